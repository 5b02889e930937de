#!/usr/bin/env bash
# The second CUDA-graph lease (issue 39) and issue 41's knee runs, in one lease
# (results/validation/gpu-memory.md): GRAPHS2 of benchmarks/gpu/configs.py (the dense layer's
# full-iteration graph; drop-and-pad MoE from 16 to 128 experts, eager and graphed; 8 leading
# steps left out: graphs are captured after cuda_graph_warmup_steps = 3 eager steps), then
# KNEE_HOLDOUT (12-22 GiB allocated peaks, 6 steps, the first left out).
#   bash benchmarks/gpu/run_graphs2_knee.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs2_knee.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/graphs2-knee}
source benchmarks/gpu/common.sh
{ nvidia-smi || true; python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)"; } > "$RAW/env.txt" 2>&1
tail -1 "$RAW/env.txt"
names() { python3 -c "import benchmarks.gpu.configs as c; print(','.join(r.name for r in $1))"; }
harness --only "$(names 'c.KNEE_HOLDOUT')" --no-inventory --per-config-s 90
harness --only "$(names 'c.GRAPHS2')" --warmup 8 --no-inventory --per-config-s 120
tar czf "$OUTDIR/graphs2-knee.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"; cp "$RAW/summary.jsonl" "$OUTDIR/" 2>/dev/null
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
