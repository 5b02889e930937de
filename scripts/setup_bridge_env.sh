#!/usr/bin/env bash
# Build the CPU validation environment for `planner export --format bridge`: a Python 3.11 venv
# with the local CPU torch, the megatron-core 0.19.2 wheel unzipped into site-packages (as in
# setup_validation_env.sh), Megatron-Bridge 0.6.2 and the packages `import megatron.bridge` and its
# recipes import. tests/megatron_validate/test_bridge.py runs exported launches through Bridge's own
# config checks in it (tests/megatron_validate/bridge_check.py says what runs and what is stubbed).
#
# Why Python 3.11 although Bridge says Requires-Python >=3.12: PyPI's torch wheels for Python 3.12
# are CUDA builds of several GB, while this machine has a CPU torch for 3.11 on disk. Bridge 0.6.2
# and Megatron-Core 0.19.2 have no 3.12-only syntax (every module compiles under 3.11); the one
# 3.12-only name they use, typing.override, is patched by the harness at start-up, as for Megatron.
# Transformer Engine cannot be built without CUDA: the harness stubs it.
#
# Usage: scripts/setup_bridge_env.sh [VENV_DIR]   (default: .bridge-venv in the checkout; the tests
# find it there or via $PLANNER_BRIDGE_VENV). About 2 minutes and 3 GB; nothing is cached outside
# the checkout (pip's own cache is switched off).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${PLANNER_BRIDGE_VENV:-$ROOT/.bridge-venv}}"
PY="${PYTHON311:-python3.11}"
BRIDGE_VERSION=0.6.2
MCORE_VERSION=0.19.2
TORCH_VERSION=2.13.0
export PIP_NO_CACHE_DIR=1
start=$(date +%s)

if ! command -v "$PY" >/dev/null; then
  echo "setup_bridge_env: $PY not found (the local CPU torch wheel is cp311)" >&2
  exit 1
fi

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip >/dev/null

# 1. The CPU torch (pip picks the local +cpu wheel from the configured find-links).
"$PIP" install -q "torch==$TORCH_VERSION"

# 2. megatron-core: the cp312 wheel unzipped into site-packages (Requires-Python >=3.12).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
"$PIP" download -q "megatron-core==$MCORE_VERSION" --no-deps --python-version 3.12 --only-binary=:all: -d "$WHEELS"
"$VENV/bin/python" - "$WHEELS" "$SITE" <<'EOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/megatron_core-*.whl")
if not whl:
    sys.exit("setup_bridge_env: megatron-core wheel not downloaded")
zipfile.ZipFile(whl[0]).extractall(sys.argv[2])
print("unzipped", whl[0].rsplit("/", 1)[-1])
EOF

# 3. Megatron-Bridge without its dependency list (it pins CUDA-only packages: flashinfer, TE, ...),
#    then what its config system, recipes and module-level imports need, at the versions tried.
"$PIP" install -q --no-deps --ignore-requires-python "megatron-bridge==$BRIDGE_VERSION"
"$PIP" install -q 'triton<3.10' 'numpy<2.5' 'packaging>=24.2' 'omegaconf>=2.3,<2.4' 'hydra-core>=1.3.4,<1.4' \
  'transformers>=5.8,<=5.12.1' einops pyyaml rich tqdm regex six absl-py 'datasets>=2.20,<5.3' \
  'megatron-energon<7.5' 'tensorboard>=2.19,<2.22' 'diffusers>=0.36,<0.43' 'nvidia-modelopt<0.48'

# 4. Smoke test: Bridge's config system and recipes import with the harness's stubs.
"$VENV/bin/python" - "$ROOT" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/tests/megatron_validate")
import contextlib, io
import bridge_check
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    bridge_check._stub_transformer_engine()
    import megatron.bridge.recipes  # noqa: F401
    from megatron.bridge.training.config import runtime_config_update  # noqa: F401
print("bridge validation env OK")
EOF

end=$(date +%s)
echo "setup_bridge_env: built $VENV in $((end - start)) s, $(du -sh "$VENV" | cut -f1) on disk"
