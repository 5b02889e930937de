#!/usr/bin/env bash
# Everything the GPU validation needs, in one batch (docs/gpu.md):
#   bash benchmarks/gpu/run_device.sh OUTDIR [harness|snapshots|memory|calibrate|all] [extra harness args...]
# memory = harness + snapshots. RAW_DIR (default OUTDIR/raw) holds every file; OUTDIR gets a tarball.
# Run from a folder holding planner/ and benchmarks/ (the repository root). Wheels in .whl/
# (megatron-core 0.19.2, pydantic for planner) are installed into /tmp/site first when present.
set -u
OUTDIR=${1:?usage: run_device.sh OUTDIR [harness|calibrate|snapshots|all]}
WHAT=${2:-all}
shift 2 || true
RAW=${RAW_DIR:-$OUTDIR/raw}  # everything lands here; OUTDIR gets the tarball and the summary
source benchmarks/gpu/common.sh
DEV=${DEVICE:-cuda}
{ nvidia-smi || true; python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__, 'gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"; } > "$RAW/env.txt" 2>&1
cat "$RAW/env.txt" | tail -3
if [[ $WHAT == harness || $WHAT == memory || $WHAT == all ]]; then
  python3 -m benchmarks.gpu.harness --all --out-dir "$RAW" --device "$DEV" --budget-s "${BUDGET_S:-420}" "$@"
fi
if [[ $WHAT == snapshots || $WHAT == memory || $WHAT == all ]]; then
  for c in snapshot-none snapshot-full; do
    python3 -m benchmarks.gpu.harness --config $c --device "$DEV" --snapshot "$RAW/$c.pickle" \
      --max-entries "${MAX_ENTRIES:-30000}" --out "$RAW/$c.json" > "$RAW/$c.log" 2>&1
    echo "$c rc=$? $(ls -la $RAW/$c.pickle 2>/dev/null | awk '{print $5}') bytes"
  done
fi
if [[ $WHAT == calibrate || $WHAT == all ]]; then
  python3 -m planner calibrate --out "$RAW/calibration.yaml" --hw h200 ${CALIBRATE_ARGS:-} 2>&1 | tee "$RAW/calibrate.log" | tail -40
fi
tar czf "$OUTDIR/results-$WHAT.tar.gz" -C "$(dirname "$RAW")" "$(basename "$RAW")"
[[ -f $RAW/summary.json ]] && cp "$RAW/summary.json" "$OUTDIR/"
ls -la "$OUTDIR"
