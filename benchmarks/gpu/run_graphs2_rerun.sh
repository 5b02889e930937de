#!/usr/bin/env bash
# Follow-up of run_graphs2_knee.sh on the same lease: the full-iteration runs with the warm-up on
# the capture stream (harness.py fwd_bwd), and the 128-expert graphed run the deadline cut.
#   bash benchmarks/gpu/run_graphs2_rerun.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs2_rerun.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-240}
RAW=${RAW_DIR:-/tmp/graphs2-rerun}
source benchmarks/gpu/common.sh
harness --only ${ONLY:-graph2-moe-s2k-b2-pad-fulliter,graph-gqa-s2k-b1-fulliter,graph2-moe128x2-s2k-b2-pad-layer,graph-gqa-s2k-b2-fulliter} --warmup 5 --no-inventory --per-config-s 60
tar czf "$OUTDIR/graphs2-rerun.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
