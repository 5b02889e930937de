"""Hostile snapshot files (issue #17): bounded work whatever the pickle holds, and the right words
for files that are no snapshot (a zip or torch.save archive, a FIFO)."""

from __future__ import annotations

import gzip
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


REAL = Path(__file__).parent / "fixtures" / "memtrace" / "real"


def test_the_gzipped_snapshots_this_repository_ships_are_read(tmp_path, capsys):
    gz = REAL / "oom.pickle.gz"
    plain = tmp_path / "oom.pickle"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    assert main(["memtrace", str(plain)]) == 0
    expected = capsys.readouterr().out
    # Gzip is told by its magic bytes, not the name: the same file under a plain name reads too.
    renamed = tmp_path / "renamed.pickle"
    renamed.write_bytes(gz.read_bytes())
    for path in (gz, renamed):
        assert main(["memtrace", str(path)]) == 0
        assert capsys.readouterr().out.split("\n", 1)[1] == expected.split("\n", 1)[1]  # line 1 names the file


def test_a_gzip_bomb_stops_at_the_decompressed_cap(tmp_path, capsys, monkeypatch):
    import planner.files

    # 64 MiB of one byte compresses to ~64 KiB; with the cap lowered to 1 MiB the reader must stop
    # at the cap (the real 4 GiB cap works the same, only slower to show).
    bomb = tmp_path / "bomb.pickle.gz"
    bomb.write_bytes(gzip.compress(b"(" * (64 << 20), compresslevel=9))
    assert bomb.stat().st_size < 1 << 20
    monkeypatch.setattr(planner.files, "MAX_SNAPSHOT_BYTES", 1 << 20)
    t0 = time.perf_counter()
    code = main(["memtrace", str(bomb)])
    _one_paragraph(code, capsys.readouterr().err, "decompresses to more than the", "reading stopped there")
    assert time.perf_counter() - t0 < 3


def test_a_broken_gzip_file_is_named_as_such(tmp_path, capsys):
    cut = tmp_path / "cut.pickle.gz"
    cut.write_bytes((REAL / "oom.pickle.gz").read_bytes()[:200])
    assert main(["memtrace", str(cut)]) == 2
    _one_paragraph(2, capsys.readouterr().err, "ends in the middle of its gzip stream")
    bad = tmp_path / "bad.pickle.gz"
    bad.write_bytes(b"\x1f\x8b\x63" + b"garbage" * 5)  # compression method 0x63: none gzip knows
    code = main(["memtrace", str(bad)])
    _one_paragraph(code, capsys.readouterr().err, "not valid gzip data", "gzip -t")


@pytest.mark.parametrize("field, value, words", [
    ("device_free", -5 * 2**30, "no non-negative integer device_free (found -5368709120)"),
    ("device_free", "lots", "no non-negative integer device_free (found 'lots')"),
    ("address", -4096, "segment 0 has a negative address -4096"),
    ("device", -1, "segment 0 has a negative device index -1"),
])
def test_impossible_device_figures_are_refused(tmp_path, capsys, field, value, words):
    seg = segment(0, 2**30, [(2**30, 0, "inactive")])
    oom = event("oom", None, 2**31, device_free=0)
    if field == "device_free":
        oom["device_free"] = value
    else:
        seg[field] = value
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [[oom]]}))
    code = main(["memtrace", str(path)])
    _one_paragraph(code, capsys.readouterr().err, words)
