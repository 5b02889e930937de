#!/usr/bin/env bash
# Multi-GPU ground truth (issue 13) on one host of N GPUs (the device tool's nvidia-h200-x2 kind):
# NCCL collectives (both timing modes) and Megatron-Core's parallel configurations
# (benchmarks/gpu/configs.py PARALLEL), within a deadline.
#   bash benchmarks/gpu/run_multi_gpu.sh OUTDIR [DEADLINE_S]
# Run from the repository root; wheels in .whl/ as for run_device.sh. Everything lands in
# RAW_DIR (default /tmp/multi-gpu), OUTDIR gets a tarball.
set -u
OUTDIR=${1:?usage: run_multi_gpu.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-480}
RAW=${RAW_DIR:-/tmp/multi-gpu}
source benchmarks/gpu/common.sh
N=$(nvidia-smi -L | wc -l)
{ nvidia-smi; nvidia-smi topo -m; env | grep ^NCCL || true; } > "$RAW/env.txt" 2>&1
# 1. Collectives, 64 KiB to 1 GiB in x2 steps, a synchronize before each call and back to back.
timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$N" benchmarks/gpu/collectives.py \
  ${COLL_ARGS:---factor 2 --iters 20} --out "$RAW/h200x$N-collectives.json" > "$RAW/collectives.log" 2>&1
echo "collectives rc=$? $(grep -c GB/s "$RAW/collectives.log") rows"
# 2. Megatron-Core on all N GPUs: 20 steps, the first 10 left out.
NAMES=${ONLY:-}
[[ -n $NAMES ]] || NAMES=$(python3 -c "from benchmarks.gpu.configs import PARALLEL; print(','.join(c.name for c in PARALLEL if c.gpus == $N))")
harness --only "$NAMES" --steps 20 --warmup 10
tar czf "$OUTDIR/multi-gpu.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
