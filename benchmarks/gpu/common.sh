# Shared set-up of the device batches (sourced by run_*.sh, from the repository root):
# wheels in .whl/ (megatron-core, pydantic for planner) installed into /tmp/site when present,
# PYTHONPATH, unbuffered output; RAW and OUTDIR created; `harness ARGS...` runs the harness's
# --all within what is left of DEADLINE (seconds since the script started), appending to
# RAW/summary.jsonl.
mkdir -p "$RAW" "$OUTDIR"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
else
  export PYTHONPATH=$PWD:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=1 PYTHONWARNINGS=ignore

harness() {
  local left=$((${DEADLINE:-100000} - SECONDS))
  if ((left < 30)); then echo "skipped (deadline): $*"; return; fi
  python3 -m benchmarks.gpu.harness --all --out-dir "$RAW" --device "${DEVICE:-cuda}" --budget-s "$left" "$@" \
    | tee -a "$RAW/summary.jsonl"
}

# The lease's machine and stack, into RAW/env.txt (nvidia-smi; torch, CUDA and megatron-core versions).
record_env() {
  nvidia-smi > "$RAW/env.txt" 2>&1
  python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)" >> "$RAW/env.txt" 2>&1
}
