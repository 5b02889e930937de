#!/usr/bin/env bash
# Build the CPU validation environment for `planner export` (shared/reference/launchers.md §2, §3):
# a Python 3.11 venv with the local CPU torch, the megatron-core 0.19.2 wheel unzipped into
# site-packages, and torchtitan 0.3.0 with the dependencies its config system imports.
#
# Why unzip: megatron-core >= 0.17 is Requires-Python >=3.12 and ships only a cp312 wheel, while
# the CPU torch wheel on this machine is cp311. The parts validation needs (argparse, validate_args,
# TransformerConfig, the micro-batch calculator) are pure Python; only datasets/helpers_cpp is
# compiled and it is never imported. The harness patches typing.override (3.12-only) at start-up.
#
# Usage: scripts/setup_validation_env.sh [VENV_DIR]   (default: .megatron-venv in the checkout)
# The test module tests/megatron_validate/ finds it there or via $PLANNER_MEGATRON_VENV.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${PLANNER_MEGATRON_VENV:-$ROOT/.megatron-venv}}"
PY="${PYTHON311:-python3.11}"
MCORE_VERSION=0.19.2
TORCHTITAN_VERSION=0.3.0
TORCH_VERSION=2.13.0
start=$(date +%s)

if ! command -v "$PY" >/dev/null; then
  echo "setup_validation_env: $PY not found (the local CPU torch wheel is cp311)" >&2
  exit 1
fi

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip >/dev/null

# 1. The CPU torch (pip picks the local +cpu wheel from the configured find-links).
"$PIP" install -q "torch==$TORCH_VERSION"

# 2. megatron-core: download the cp312 wheel and unzip it into site-packages.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
"$PIP" download -q "megatron-core==$MCORE_VERSION" --no-deps --python-version 3.12 \
  --only-binary=:all: -d "$WHEELS"
"$VENV/bin/python" - "$WHEELS" "$SITE" <<'EOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/megatron_core-*.whl")
if not whl:
    sys.exit("setup_validation_env: megatron-core wheel not downloaded")
zipfile.ZipFile(whl[0]).extractall(sys.argv[2])
print("unzipped", whl[0].rsplit("/", 1)[-1])
EOF
# megatron.core imports triton unconditionally (moe paged stash); packaging>=24.2 per its metadata.
"$PIP" install -q triton numpy 'packaging>=24.2'

# 3. torchtitan 0.3.0 without its pinned torch, plus what its config system and trainer import.
"$PIP" install -q --no-deps "torchtitan==$TORCHTITAN_VERSION"
# Versions as torchtitan 0.3.0's metadata pins them (datasets<4.8, spmd_types==0.2.3).
"$PIP" install -q tyro torchdata 'datasets>=3.6,<4.8' tokenizers safetensors einops pillow \
  tensorboard wandb blobfile tiktoken fsspec 'spmd_types==0.2.3' 'torch_checkpointing>=0.1.0'
# torchao: registry configs with Float8 converters (llama3_405b) import it while being built.
"$PIP" install -q --no-deps torchao

# 3b. torchtitan 0.2.2, the last release that reads TOML job files, unzipped beside (not into)
# site-packages: tests/megatron_validate/torchtitan_toml_check.py puts it ahead of 0.3.0 on sys.path
# to check `planner export --format torchtitan-toml` with 0.2.2's own ConfigManager.
"$PIP" download -q --no-deps "torchtitan==0.2.2" -d "$WHEELS"
rm -rf "$VENV/torchtitan-0.2.2"
"$VENV/bin/python" - "$WHEELS" "$VENV/torchtitan-0.2.2" <<'EOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/torchtitan-0.2.2-*.whl")
if not whl:
    sys.exit("setup_validation_env: torchtitan 0.2.2 wheel not downloaded")
zipfile.ZipFile(whl[0]).extractall(sys.argv[2])
print("unzipped", whl[0].rsplit("/", 1)[-1])
EOF

# 4. Smoke test: both validators import.
"$VENV/bin/python" - <<'EOF'
import typing
if not hasattr(typing, "override"):
    typing.override = lambda f: f
import megatron.training.arguments  # noqa: F401
import torchtitan.config.manager  # noqa: F401
print("validation env OK")
EOF

end=$(date +%s)
echo "setup_validation_env: built $VENV in $((end - start)) s, $(du -sh "$VENV" | cut -f1) on disk"
