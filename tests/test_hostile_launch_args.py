"""Hostile Megatron launch scripts read back by `planner check --megatron-args` (issue #17): shell
arithmetic is evaluated in 64-bit wrap-around as bash does, with a bound on the work, and a
--moe-layer-freq expression cannot expand without limit.

The bash reader (planner/export/megatron_args.py) is being rewritten on the launchers branch; until
it lands these tests are expected to fail. Each hang-prone case runs in a subprocess with a 3 s
hang guard (planner's start-up and the check take under a second), so a hang costs seconds, not
the suite."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

V3_ARGS = ("--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --micro-batch-size 1 "
           "--global-batch-size 8192 --seq-length 4096 --bf16 ")


def _memory_cap() -> None:  # in the child: a runaway expansion fails there, it cannot take the machine
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
    except (ImportError, ValueError, OSError):
        pass


HANG = 30.0
"""Seconds after which a `planner check` counts as hung: a runaway expansion (9**9**9 evaluated, a list
of 9**9**9 items) runs for hours or hits the memory cap, while an answer takes about a second. Not a
speed bound (speed is measured in benchmarks/): 3 s failed twice in a fresh-clone CI run whose two
cores ran the default tests beside the slow shards and other work (2026-12-06)."""


def check(tmp_path: Path, script: str, *extra: str, timeout: float = HANG) -> subprocess.CompletedProcess:
    path = tmp_path / "run.sh"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "planner", "check", "--megatron-args", str(path),
                           "--model", "deepseek-v3", "--hw", "gb200-nvl72", "--json", *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout,
                          preexec_fn=_memory_cap if os.name == "posix" else None)


def answered(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr


def test_huge_exponent_in_arithmetic_answers_at_once(tmp_path):
    proc = check(tmp_path, "N=$((9**9**9))\ntorchrun --nproc-per-node 4 --nnodes 64 pretrain_gpt.py " + V3_ARGS
                 + "--tensor-model-parallel-size 1 --train-iters $N\n")
    answered(proc)


def test_moe_layer_freq_expression_cannot_expand_without_limit(tmp_path):
    proc = check(tmp_path, "torchrun --nproc-per-node 4 --nnodes 64 pretrain_gpt.py " + V3_ARGS
                 + "--num-experts 256 --moe-layer-freq \"[1]*(9**9**9)\"\n")
    answered(proc)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_arithmetic_wraps_at_64_bits_like_bash(tmp_path):
    expr = "2**64 + 2"
    bash = subprocess.run(["bash", "-c", f"echo $(({expr}))"], capture_output=True, text=True, timeout=10)
    assert bash.stdout.strip() == "2"  # what the shell that runs the script computes
    proc = check(tmp_path, f"torchrun --nproc-per-node 4 --nnodes 64 pretrain_gpt.py {V3_ARGS}"
                 f"--tensor-model-parallel-size $(({expr}))\n")
    answered(proc)
    assert json.loads(proc.stdout)["plan"].startswith("tp=2,")


def test_a_flag_without_its_value_is_named(tmp_path):
    proc = check(tmp_path, "torchrun --nproc-per-node 4 --nnodes 64 pretrain_gpt.py " + V3_ARGS
                 + "--tensor-model-parallel-size\n")
    answered(proc)
    # Megatron's parser refuses the command: check says which argument and exits 1 (a launcher rule).
    assert proc.returncode == 1 and "--tensor-model-parallel-size" in proc.stdout


def test_variables_that_double_cannot_expand_without_limit(tmp_path):
    # V1=$V0$V0, V2=$V1$V1, ...: 2^40 characters from a 600-byte script.
    lines = "V0=2\n" + "".join(f"V{i}=$V{i - 1}$V{i - 1}\n" for i in range(1, 41))
    proc = check(tmp_path, lines + "torchrun --nproc-per-node 4 --nnodes 64 pretrain_gpt.py " + V3_ARGS
                 + "--tensor-model-parallel-size $V40\n")
    answered(proc)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
