#!/usr/bin/env bash
# Fifth CUDA-graph call (issue 39, derivation data, not held out): the allocator's segments after the
# last step (harness --segments) of the whole-layer MoE graphs of 16, 64 and 128 experts, their eager
# twins and the dense whole-layer run: where the graphs' reserved memory sits.
#   bash benchmarks/gpu/run_graphs_segments_moe.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs_segments_moe.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-400}
RAW=${RAW_DIR:-/tmp/graphs-segments-moe}
source benchmarks/gpu/common.sh
nvidia-smi > "$RAW/env.txt" 2>&1
harness --only graph2-moe-s2k-b2-pad-layer,graph2-moe-s2k-b2-pad-none,graph2-moe64x2-s2k-b2-pad-layer,graph2-moe64x2-s2k-b2-pad-none,graph2-moe128x2-s2k-b2-pad-layer,graph2-moe128x2-s2k-b2-pad-none,graph-gqa-s2k-b2-layer --warmup 5 --no-inventory --segments --per-config-s 90
tar czf "$OUTDIR/graphs-segments-moe.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
