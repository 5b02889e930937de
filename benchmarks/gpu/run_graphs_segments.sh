#!/usr/bin/env bash
# Fourth CUDA-graph call (issue 39, derivation data, not held out): where the full-iteration graph's
# reserved memory beyond the eager activation peak sits. The allocator's segments after the last step
# (harness --segments) of the three dense full-iteration runs measured before and their eager twins.
#   bash benchmarks/gpu/run_graphs_segments.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs_segments.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-400}
RAW=${RAW_DIR:-/tmp/graphs-segments}
source benchmarks/gpu/common.sh
nvidia-smi > "$RAW/env.txt" 2>&1
harness --only graph3-gqa-s4k-b1-fulliter,graph3-gqa-s4k-b1-none,graph-gqa-s2k-b1-fulliter,graph-gqa-s2k-b2-fulliter,graph3-mha-s2k-b1-m4-fulliter --warmup 5 --no-inventory --segments --per-config-s 90
tar czf "$OUTDIR/graphs-segments.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
