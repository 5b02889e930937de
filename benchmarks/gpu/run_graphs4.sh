#!/usr/bin/env bash
# Fourth CUDA-graph lease (issue 39): GRAPHS4 of benchmarks/gpu/configs.py (8 and 256 routed experts,
# drop and pad, eager and graphed), held out; planner's predictions were committed before the run
# (results/validation/gpu-graphs4-predictions.json). GRAPHS2's protocol: 20 steps, the first 8 left out.
#   bash benchmarks/gpu/run_graphs4.sh OUTDIR [DEADLINE_S]
# The same lease's other calls (results/validation/gpu-memory.md, "Fourth lease"), each on a fresh machine:
#   MODE=long      the two eager 256-expert runs, 100 steps, the first 50 left out (run twice: two leases)
#   MODE=segments  the 256- and 8-expert runs' allocator segments by pool (--segments), 10 steps
set -u
OUTDIR=${1:?usage: run_graphs4.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/graphs4}
source benchmarks/gpu/common.sh
record_env
case "${MODE:-runs}" in
long) harness --only graph4-moe256x2-s2k-b2-pad-none,graph4-moe256x2-s1k-b4-pad-none --steps 100 --warmup 50 \
        --tag=-s100 --no-inventory --per-config-s 240 ;;
segments) harness --only graph4-moe256x2-s2k-b2-pad-layer,graph4-moe256x2-s2k-b2-pad-fulliter,graph4-moe256x2-s2k-b2-pad-none,graph4-moe8x2-s2k-b2-pad-layer,graph4-moe8x2-s2k-b2-pad-none \
        --steps 10 --warmup 5 --no-inventory --segments --per-config-s 90 ;;
*) harness --only ${ONLY:-graph4-moe8x2-s2k-b2-pad-none,graph4-moe8x2-s2k-b2-pad-layer,graph4-moe256x2-s2k-b2-pad-layer,graph4-moe256x2-s2k-b2-pad-none,graph4-moe256x2-s2k-b2-pad-fulliter,graph4-moe256x2-s1k-b4-pad-layer,graph4-moe256x2-s1k-b4-pad-none} --warmup 8 --no-inventory --per-config-s 120 ;;
esac
tar czf "$OUTDIR/graphs4.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
echo "elapsed ${SECONDS}s"
