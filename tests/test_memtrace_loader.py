"""Loading snapshot files: the restricted unpickler refuses anything that is not plain data (and
runs nothing), malformed files get one-paragraph errors, and every snapshot layout PyTorch has
written is read."""

from __future__ import annotations

import collections
import enum
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "fixtures" / "memtrace"))
from memtrace_helpers import FIXTURES, event, segment, synth, write_pickle
from planner.errors import PlannerError
from planner.memtrace.loader import load_plain_pickle, load_snapshot, parse_snapshot


def _plain_pickle_would_run(data: bytes, marker) -> bool:
    """Unpickle ``data`` with the standard unpickler in a child process and report whether the
    marker file appeared: proves the test pickle really is malicious."""
    code = textwrap.dedent(
        """
        import pickle, sys
        try:
            pickle.loads(sys.stdin.buffer.read())
        except Exception:
            pass
        """
    )
    subprocess.run([sys.executable, "-c", code], input=data, check=True, timeout=60)
    return marker.exists()


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "inside-a-valid-snapshot"])
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path, nested):
    control = tmp_path / "control_marker"
    assert _plain_pickle_would_run(synth.malicious_bytes(control, nested=nested), control), \
        "the test pickle must create its marker when loaded normally"

    marker = tmp_path / "marker"
    path = tmp_path / "evil.pickle"
    path.write_bytes(synth.malicious_bytes(marker, nested=nested))
    with pytest.raises(PlannerError) as err:
        load_snapshot(path)
    assert not marker.exists()
    msg = str(err.value)
    assert "posix.system" in msg or "os.system" in msg
    assert "Nothing in the file was run" in msg
    assert "\n" not in msg


class _Color(enum.Enum):
    RED = 1


_Frame = collections.namedtuple("_Frame", "filename line name")


@pytest.mark.parametrize(
    "payload, names",
    [
        (_Color.RED, "_Color"),  # an enum (a future PyTorch might use one for actions)
        ([_Frame("a.py", 1, "f")], "_Frame"),  # a namedtuple frame
        (collections.OrderedDict(a=1), "OrderedDict"),
        (print, "builtins.print"),
    ],
    ids=["enum", "namedtuple", "ordereddict", "builtin-function"],
)
def test_any_global_is_refused(tmp_path, payload, names):
    snap = synth.case_fits()
    snap["device_traces"][0][0]["frames"] = payload
    path = write_pickle(tmp_path / "s.pickle", snap)
    with pytest.raises(PlannerError, match=names):
        load_plain_pickle(path)


def test_persistent_ids_are_refused(tmp_path):
    import io

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "tensor-storage-0" if obj == "x" else None

    buf = io.BytesIO()
    P(buf).dump({"segments": ["x"]})
    path = tmp_path / "p.pickle"
    path.write_bytes(buf.getvalue())
    with pytest.raises(PlannerError, match="persistent object reference"):
        load_plain_pickle(path)


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_plain_data_loads_under_every_protocol(tmp_path, protocol):
    snap = synth.case_fits()
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=protocol))
    assert load_plain_pickle(path) == snap
    s = load_snapshot(path)
    assert s.segments[0].pool_id == (0, 0)  # tuples come through
    assert len(s.traces[0]) == len(snap["device_traces"][0])


@pytest.mark.parametrize(
    "name, expect",
    [
        ("empty.pickle", "is empty"),
        ("not_a_pickle.pickle", "is not a pickle"),
        ("truncated.pickle", "truncated"),
        ("not_a_snapshot.pickle", "neither 'segments' nor 'device_traces'"),
        ("a_number.pickle", "value of type int"),
        ("bad_segment.pickle", "segment 0 has no integer 'total_size'"),
        ("bad_event.pickle", "event 0 of device 0 (alloc) has no non-negative integer size"),
        ("gzipped.pickle", "ends in the middle of its gzip stream"),
    ],
)
def test_malformed_files_get_one_paragraph_errors(tmp_path, name, expect):
    files = synth.write_files(tmp_path)
    with pytest.raises(PlannerError) as err:
        load_snapshot(files[name])
    msg = err.value.paragraph()
    assert expect in msg
    assert "\n" not in msg and "Traceback" not in msg


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(PlannerError, match="does not exist"):
        load_snapshot(tmp_path / "nope.pickle")
    with pytest.raises(PlannerError, match="is a folder"):
        load_snapshot(tmp_path)


def test_corrupt_opcode_stream_is_an_error_not_a_crash(tmp_path):
    # A valid header and then an opcode that refers to a memo slot that was never stored.
    path = tmp_path / "c.pickle"
    path.write_bytes(b"\x80\x04h\x07.")
    with pytest.raises(PlannerError, match="corrupt|not a pickle"):
        load_snapshot(path)


def test_bool_is_not_a_size():
    raw = {"segments": [], "device_traces": [[event("alloc", 16, True)]]}
    with pytest.raises(PlannerError, match="non-negative integer size"):
        parse_snapshot(raw)


def test_legacy_history_layout_reads_requested_size_and_frames():
    seg = segment(0x1000, 4096, [(2048, 2000, "active_allocated"), (2048, 0, "inactive")])
    b = seg["blocks"][0]
    del b["frames"], b["requested_size"], b["address"]
    b["history"] = [{"addr": 0x1000, "real_size": 1500, "frames": [{"filename": "x.py", "line": 3, "name": "forward"}]}]
    s = parse_snapshot({"segments": [seg], "device_traces": []})
    assert s.layout == "legacy-history"
    blk = s.segments[0].blocks[0]
    assert (blk.address, blk.requested_size, blk.frames[0]["name"]) == (0x1000, 1500, "forward")
    assert s.segments[0].blocks[1].address == 0x1000 + 2048  # addresses rebuilt from sizes


def test_bare_segment_list_layout():
    s = parse_snapshot([segment(0x1000, 4096, [(4096, 4000, "active_allocated")])])
    assert s.layout == "segments-list" and s.traces == []
    assert any("bare list of segments" in n for n in s.notes)


def test_unknown_actions_and_extra_keys_are_kept(tmp_path):
    raw = {
        "segments": [],
        "device_traces": [[event("annotate", 0x10, 0, user_metadata="x"), event("snapshot", 0, 0)]],
        "allocator_settings": {"expandable_segments": True},
        "external_annotations": [{"device": 0, "time_us": 5, "stage": "fwd"}],
        "host_segments": [],
    }
    s = parse_snapshot(raw)
    assert s.traces[0].action == ["annotate", "snapshot"]
    assert s.annotations == []  # not a START/END region marker
    assert s.allocator_settings == {"expandable_segments": True}


def test_fixture_generator_writes_every_file(tmp_path):
    files = synth.write_files(tmp_path)
    assert {"case_a", "staircase", "fragmentation", "stream_split", "fits"} <= set(files)
    assert FIXTURES.joinpath("memtrace_synth.py").exists()
    assert all(p.exists() for p in files.values())
    assert os.path.getsize(files["staircase"]) < 200_000
