"""The slow-test list in conftest.py names tests that exist (a renamed test would silently move back
into the default run, or out of every run)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import SLOW_TESTS

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_test_named_exists():
    for nodeid in SLOW_TESTS:
        path, _, rest = nodeid.partition("::")
        func = re.match(r"[A-Za-z_0-9]+", rest).group(0)
        source = (ROOT / path).read_text()
        assert f"def {func}(" in source, nodeid


def test_the_default_selection_leaves_slow_tests_out_and_ci_runs_them():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "-m 'not slow and not megatron'" in pyproject
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"python -m pytest -m slow\b", ci) and re.search(r"python -m pytest -m megatron\b", ci)
