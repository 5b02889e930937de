#!/usr/bin/env bash
# The micro-batch lever on host-bound eager MoE (issue 39): MBS5 of benchmarks/gpu/configs.py, held out;
# planner's predictions were committed before the run (results/validation/gpu-mbs5-predictions.json).
# 60 steps, the first 30 left out (host-bound steps speed up over their first steps; the three splits of
# one model run back to back on one machine, so their ratios are what is compared).
#   bash benchmarks/gpu/run_mbs5.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_mbs5.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/mbs5}
source benchmarks/gpu/common.sh
record_env
harness --only ${ONLY:-mbs5-moe-s2k-b1-m4,mbs5-moe-s2k-b2-m2,mbs5-moe-s2k-b4-m1,mbs5-moe128x2-s2k-b1-m4,mbs5-moe128x2-s2k-b2-m2,mbs5-moe128x2-s2k-b4-m1} \
  --warmup 30 --no-inventory --per-config-s 120
tar czf "$OUTDIR/mbs5.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
