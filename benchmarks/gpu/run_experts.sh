#!/usr/bin/env bash
# The expert range of the single-GPU host mechanism (issue 20 phase 2; results/validation/gpu-memory.md,
# "8 to 128 experts"): the six EXPERTS configurations of benchmarks/gpu/configs.py (8, 64 and 128
# routed experts), 100 steps each with the first 50 left out (the protocol of run_steptime_long.sh,
# chosen before the run), one dense control. Run once per lease; two leases are averaged.
#   bash benchmarks/gpu/run_experts.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_experts.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/experts}
source benchmarks/gpu/common.sh
{ nvidia-smi || true; nproc; uptime; lscpu | grep -i "model name" || true; } > "$RAW/env.txt" 2>&1
EXP=moe8-s4k-b1-none,moe8-s2k-b2-full,moe64-s4k-b1-none,moe64-s2k-b4-moe,moe128-s4k-b2-none,moe128-s2k-b4-full
harness --only "$EXP" --steps 100 --warmup 50 --tag=-s100 --no-inventory --per-config-s 200
harness --only gqa-s4k-b1-none --steps 20 --warmup 10 --tag=-s20 --no-inventory
tar czf "$OUTDIR/experts.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"; cp "$RAW/summary.jsonl" "$OUTDIR/" 2>/dev/null
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
