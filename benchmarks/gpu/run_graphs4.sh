#!/usr/bin/env bash
# Fourth CUDA-graph lease (issue 39): GRAPHS4 of benchmarks/gpu/configs.py (8 and 256 routed experts,
# drop and pad, eager and graphed), held out; planner's predictions were committed before the run
# (results/validation/gpu-graphs4-predictions.json). GRAPHS2's protocol: 20 steps, the first 8 left out.
#   bash benchmarks/gpu/run_graphs4.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs4.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/graphs4}
source benchmarks/gpu/common.sh
nvidia-smi > "$RAW/env.txt" 2>&1
python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)" >> "$RAW/env.txt" 2>&1
harness --only ${ONLY:-graph4-moe8x2-s2k-b2-pad-none,graph4-moe8x2-s2k-b2-pad-layer,graph4-moe256x2-s2k-b2-pad-layer,graph4-moe256x2-s2k-b2-pad-none,graph4-moe256x2-s2k-b2-pad-fulliter,graph4-moe256x2-s1k-b4-pad-layer,graph4-moe256x2-s1k-b4-pad-none} --warmup 8 --no-inventory --per-config-s 120
tar czf "$OUTDIR/graphs4.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
