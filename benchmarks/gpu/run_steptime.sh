#!/usr/bin/env bash
# Step-time follow-up of the single-GPU validation (results/validation/gpu-memory.md, "Step time"):
# the MoE runs' times drifted down over their five timed steps, so they are rerun with 40 steps and
# the first 10 left out, beside diagnostics that tell the candidate causes apart, and two dense runs
# as a control. One batch, within a deadline:
#   bash benchmarks/gpu/run_steptime.sh OUTDIR [DEADLINE_S]
# Run from the repository root; wheels in .whl/ as for run_device.sh. Everything lands in
# RAW_DIR (default /tmp/steptime), OUTDIR gets a tarball.
set -u
OUTDIR=${1:?usage: run_steptime.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/steptime}
source benchmarks/gpu/common.sh
{ nvidia-smi || true; nproc; lscpu | grep -i "model name\|mhz" || true; } > "$RAW/env.txt" 2>&1

MOE=moe-s4k-b1-none,moe-s2k-b4-none,moe-s2k-b2-moe,moe-s4k-b1-shared-coreattn,moe-s4k-b2-full,moe-s2k-b2-distopt,holdout-moe-s8k-b1-coreattn
# 1. The MoE calibration runs and the MoE holdout, 40 steps, the first 10 left out.
harness --only "$MOE" --steps 40 --warmup 10 --tag=-s40
# 2. Control: two dense runs, whose five-step times were flat.
harness --only gqa-s4k-b1-none,mha-s2k-b2-none --steps 20 --warmup 10 --tag=-s20 --no-inventory
# 3. Diagnostics on one MoE run: per-expert load, Megatron's manual GC, a new batch every step.
harness --only moe-s4k-b1-none --steps 40 --warmup 10 --route-stats --tag=-routes --no-inventory
harness --only moe-s4k-b1-none --steps 40 --warmup 10 --manual-gc --tag=-gc --no-inventory
harness --only moe-s4k-b1-none --steps 40 --warmup 10 --fresh-data --route-stats --tag=-fresh --no-inventory
# 4. Where the time goes in a late step (after 30) against an early one (after 2, as profiled before).
harness --only moe-s4k-b1-none --profile --profile-after 30 --tag=-profile30
tar czf "$OUTDIR/steptime.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
