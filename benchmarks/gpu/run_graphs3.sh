#!/usr/bin/env bash
# Third CUDA-graph lease (issue 39): the full-iteration runs of GRAPHS3 (held out) and their eager
# twins, the whole run on Megatron's capture stream as run_graphs2_rerun.sh found necessary (harness.py).
#   bash benchmarks/gpu/run_graphs3.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs3.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-500}
RAW=${RAW_DIR:-/tmp/graphs3}
source benchmarks/gpu/common.sh
nvidia-smi > "$RAW/env.txt" 2>&1
python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)" >> "$RAW/env.txt" 2>&1
harness --only ${ONLY:-graph3-gqa-s4k-b1-fulliter,graph3-mha-s2k-b1-m4-fulliter,graph3-moe-s1k-b4-pad-fulliter,graph3-gqa-s4k-b1-none,graph3-mha-s2k-b1-m4-none,graph3-moe-s1k-b4-pad-none} --warmup 5 --no-inventory --per-config-s 90
tar czf "$OUTDIR/graphs3.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
