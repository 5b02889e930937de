#!/usr/bin/env bash
# The full iteration without stranded blocks (issue 39): GRAPHS6 of benchmarks/gpu/configs.py (64, 128, 8 and
# 256 routed experts, drop and pad, each eager and as a full-iteration graph), held out; planner's predictions
# were committed before the run (results/validation/gpu-graphs6-predictions.json). GRAPHS2's protocol: 20 steps,
# the first 8 left out.
#   bash benchmarks/gpu/run_graphs6.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs6.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/graphs6}
source benchmarks/gpu/common.sh
record_env
harness --only "${ONLY:-$(python3 -c 'from benchmarks.gpu.configs import GRAPHS6; print(",".join(c.name for c in GRAPHS6))')}" \
  --warmup 8 --no-inventory --per-config-s 120
tar czf "$OUTDIR/graphs6.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
