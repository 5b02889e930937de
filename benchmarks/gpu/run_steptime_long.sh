#!/usr/bin/env bash
# Second step-time batch (results/validation/gpu-memory.md, "Step time"): the 40-step MoE runs still
# drifted down after step 10, so the seven MoE runs go to 100 steps, the first 50 left out (chosen
# before the run), with the host's user/system time, page faults and context switches per step; one
# dense run as the control.
#   bash benchmarks/gpu/run_steptime_long.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_steptime_long.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/steptime-long}
source benchmarks/gpu/common.sh
{ nvidia-smi || true; nproc; uptime; } > "$RAW/env.txt" 2>&1
MOE=moe-s4k-b1-none,moe-s2k-b4-none,moe-s2k-b2-moe,moe-s4k-b1-shared-coreattn,moe-s4k-b2-full,moe-s2k-b2-distopt,holdout-moe-s8k-b1-coreattn
harness --only "$MOE" --steps 100 --warmup 50 --tag=-s100 --no-inventory
harness --only gqa-s4k-b1-none --steps 30 --warmup 10 --tag=-s30 --no-inventory
tar czf "$OUTDIR/steptime-long.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
