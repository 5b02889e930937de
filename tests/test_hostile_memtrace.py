"""Hostile snapshot files (issue #17): bounded work whatever the pickle holds, and the right words
for files that are no snapshot (a zip or torch.save archive, a FIFO)."""

from __future__ import annotations

import os
import pickle
import sys
import time
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))
from memtrace_helpers import event, segment  # noqa: E402

from planner.cli import main  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.memtrace.loader import MAX_TRACE_EVENTS, load_snapshot  # noqa: E402


def _one_paragraph(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("Error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)


def test_a_shared_event_list_does_not_become_millions_of_events(tmp_path, capsys):
    # One list of 1,000 events referenced 30,000 times through the pickle memo: 3e7 events from a
    # file of a few hundred KiB. Refused from the count, before any event is walked.
    events = [event("alloc", 4096 * i, 512) for i in range(1000)]
    raw = {"segments": [segment(0, 2**30, [(2**30, 0, "inactive")])], "device_traces": [events] * 30_000}
    path = tmp_path / "memo.pickle"
    path.write_bytes(pickle.dumps(raw, protocol=4))
    assert path.stat().st_size < 200_000
    t0 = time.perf_counter()
    code = main(["memtrace", str(path)])
    _one_paragraph(code, capsys.readouterr().err, "30,000,000 trace events", f"{MAX_TRACE_EVENTS:,}", "shared references")
    assert time.perf_counter() - t0 < 5


def _deep_pickle(depth: int) -> bytes:
    """{'segments': [{'address': [[[...]]], 'total_size': 1}], 'device_traces': []} written as raw
    opcodes (pickle.dumps itself would recurse): the unpickler builds it without recursion."""
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST x depth, then APPEND x (depth - 1)
    return (b"\x80\x04}(\x8c\x08segments](}(\x8c\x07address" + nested
            + b"\x8c\ntotal_sizeK\x01ue\x8c\rdevice_traces]u.")


def _nested(n: int):
    x: list = []
    for _ in range(n):
        x = [x]
    return x


def test_deep_nesting_is_refused_before_anything_prints_it(tmp_path, capsys):
    path = tmp_path / "deep.pickle"
    path.write_bytes(_deep_pickle(100_000))  # repr() of the address would recurse away
    code = main(["memtrace", str(path)])
    _one_paragraph(code, capsys.readouterr().err, "segment 0 has no integer 'address'", "a list of 1 item(s)")
    settings = {"segments": [], "device_traces": [], "allocator_settings": {"a": _nested(100)}}
    (tmp_path / "s.pickle").write_bytes(pickle.dumps(settings))
    code = main(["memtrace", str(tmp_path / "s.pickle")])
    _one_paragraph(code, capsys.readouterr().err, "'allocator_settings' is nested more than 16 levels deep")


def test_huge_integers_are_not_sizes(tmp_path, capsys):
    raw = {"segments": [], "device_traces": [[event("alloc", 0, 10**5000)]]}
    sys.set_int_max_str_digits(0)
    try:
        (tmp_path / "big.pickle").write_bytes(pickle.dumps(raw))
    finally:
        sys.set_int_max_str_digits(4300)
    code = main(["memtrace", str(tmp_path / "big.pickle")])
    _one_paragraph(code, capsys.readouterr().err, "no non-negative integer size", "an integer of 16610 bits")


def test_zip_and_torch_save_files_are_named_as_such(tmp_path, capsys):
    z = tmp_path / "model.pt"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("archive/data.pkl", b"x")
    code = main(["memtrace", str(z)])
    _one_paragraph(code, capsys.readouterr().err, "is a zip archive", "torch.save")
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2))
    code = main(["memtrace", str(legacy)])
    _one_paragraph(code, capsys.readouterr().err, "legacy torch.save file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_device_is_not_read(tmp_path, capsys):
    fifo = tmp_path / "snap.pickle"
    os.mkfifo(fifo)
    code = main(["memtrace", str(fifo)])  # would block forever if opened
    _one_paragraph(code, capsys.readouterr().err, "is not a regular file")
    if Path("/dev/zero").exists():
        with pytest.raises(PlannerError, match="not a regular file"):
            load_snapshot("/dev/zero")
