#!/usr/bin/env bash
# Issue 39's CUDA-graph memory and issue 41's small allocated peaks, in one lease
# (results/validation/gpu-memory.md): the GRAPHS configurations of benchmarks/gpu/configs.py (eager
# and Megatron-Core local CUDA graphs, 8 steps with the first 5 left out: graphs are captured after
# cuda_graph_warmup_steps = 3 eager steps), then SMALL and SMALL_HOLDOUT (2-13 GiB peaks, 6 steps,
# the first left out), then two memory snapshots of small runs for memtrace.
#   bash benchmarks/gpu/run_graphs_small.sh OUTDIR [DEADLINE_S]
set -u
OUTDIR=${1:?usage: run_graphs_small.sh OUTDIR [DEADLINE_S]}
DEADLINE=${2:-540}
RAW=${RAW_DIR:-/tmp/graphs-small}
source benchmarks/gpu/common.sh
{ nvidia-smi || true; python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)"; } > "$RAW/env.txt" 2>&1
tail -1 "$RAW/env.txt"
names() { python3 -c "import benchmarks.gpu.configs as c; print(','.join(r.name for r in $1))"; }
harness --only "$(names 'c.GRAPHS')" --warmup 5 --no-inventory --per-config-s 120
harness --only "$(names 'c.SMALL + c.SMALL_HOLDOUT')" --no-inventory --per-config-s 90
for c in small-snap-s2k-b2-none small-holdout-snap-s4k-b1-none; do
  if ((DEADLINE - SECONDS < 40)); then echo "skipped snapshot (deadline): $c"; continue; fi
  python3 -m benchmarks.gpu.harness --config $c --steps 2 --snapshot "$RAW/snap-$c.pickle" --max-entries 40000 \
    --out "$RAW/snap-$c.json" > "$RAW/snap-$c.log" 2>&1
  echo "snapshot $c rc=$? $(stat -c %s "$RAW/snap-$c.pickle" 2>/dev/null) bytes"
done
tar czf "$OUTDIR/graphs-small.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"; cp "$RAW/summary.jsonl" "$OUTDIR/" 2>/dev/null
ls -la "$OUTDIR"; echo "elapsed ${SECONDS}s"
