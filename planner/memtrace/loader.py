"""Loading a snapshot pickle safely, and checking that it is one.

``torch.cuda.memory._dump_snapshot`` pickles a tree of plain values: dicts, lists, strings, ints,
bools, None, and tuples (``segment_pool_id``, ``pool_id``). Frames are dicts with ``filename``,
``line`` and ``name`` (plus optional ``fx_*`` strings); no PyTorch version we read puts enums,
namedtuples or class instances in it. A pickle can name any importable callable and have it called
while loading, so the unpickler here resolves *no* global at all: every opcode that would import
something (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT1/2/4 all go through ``find_class``) and every
persistent id is refused before anything is called. The plain-value opcodes need no import and
build only the types above, so refusing globals is the whole defense.

:func:`parse_snapshot` then checks the structure and returns a :class:`Snapshot` whose traces are
columnar lists (one Python pass over the events, then numpy in :mod:`planner.memtrace.timeline`).
"""

from __future__ import annotations

import gzip
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner import files
from planner.files import check_input, note_input

TRACE_ACTIONS = frozenset(
    {
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "snapshot",
        "oom",
    }
)
"""Actions the analysis understands. Others (newer PyTorch's ``annotate``) are kept and skipped."""

_NEEDS_ADDR = frozenset(TRACE_ACTIONS - {"snapshot", "oom"})

BLOCK_STATES = frozenset({"active_allocated", "active_pending_free", "active_awaiting_free", "inactive"})

_HINT = (
    "Write the file with torch.cuda.memory._record_memory_history(max_entries=100000), a few "
    "training steps, then torch.cuda.memory._dump_snapshot(path)."
)


class _Refused(Exception):
    """Raised inside the unpickler when the file asks for something a snapshot never holds."""


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds plain values only; any request to import or look up an object is refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        # Reached for every opcode that would import something; refusing here means the
        # callable is never looked up, so it can never be called.
        raise _Refused(f"the global '{module}.{name}'")

    def persistent_load(self, pid: Any):
        raise _Refused("a persistent object reference")


@dataclass(frozen=True)
class Block:
    """One block of a segment at dump time."""

    address: int
    size: int
    requested_size: int
    """Bytes the caller asked for (the trace records these); ``size`` is after rounding."""
    state: str
    frames: Any
    """The stack recorded when the block was allocated (list of frame dicts), or None."""

    @property
    def allocated(self) -> bool:
        return self.state == "active_allocated"


@dataclass(frozen=True)
class Segment:
    """Memory the allocator got from cudaMalloc (or mapped, for expandable segments)."""

    device: int
    address: int
    total_size: int
    stream: int
    is_expandable: bool
    pool_id: tuple | None
    blocks: tuple[Block, ...]


@dataclass
class Trace:
    """One device's trace ring buffer as parallel lists, oldest event first."""

    action: list[str] = field(default_factory=list)
    addr: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    stream: list[int] = field(default_factory=list)
    time_us: list[int | None] = field(default_factory=list)
    frames: list[Any] = field(default_factory=list)
    device_free: dict[int, int] = field(default_factory=dict)
    """For ``oom`` events (by event index): bytes CUDA still reported free."""

    def __len__(self) -> int:
        return len(self.action)


@dataclass
class Snapshot:
    segments: tuple[Segment, ...]
    traces: list[Trace]
    """Index = device."""
    allocator_settings: dict
    layout: str
    """Which snapshot layout the file used: 'current', 'legacy-history' or 'segments-list'."""
    notes: list[str] = field(default_factory=list)
    annotations: list[dict] = field(default_factory=list)
    """``external_annotations`` with a START/END stage, a name and a time (newer PyTorch marks
    each ``Optimizer.step`` this way): {device, time_us, stage, name}, in file order."""

    def devices(self) -> list[int]:
        """Devices with any segment or trace event, ascending."""
        found = {s.device for s in self.segments}
        found.update(i for i, t in enumerate(self.traces) if len(t))
        return sorted(found)


# ---- reading the file ------------------------------------------------------------------------


def load_snapshot(path: str | Path) -> Snapshot:
    """Read and check a snapshot file; every failure is a one-paragraph :class:`PlannerError`."""
    return parse_snapshot(load_plain_pickle(path), str(path))


_TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""The first object of a pre-1.6 torch.save file (torch.serialization.MAGIC_NUMBER)."""


_GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip member (RFC 1952, section 2.3.1)."""


class _Inflated(Exception):
    """A compressed snapshot decompressed past the cap."""


class _CappedReader:
    """A file-like reader over ``raw`` that raises :class:`_Inflated` once more than ``limit``
    bytes have come out of it. ``read`` and ``readline`` are what the pickle module needs;
    ``peek`` lets it read ahead on pickles without frames (protocol < 4) instead of calling
    ``read`` once per opcode, and consumes nothing, so the count stays exact."""

    def __init__(self, raw: Any, limit: int) -> None:
        self._raw = raw
        self._left = limit

    def _count(self, data: bytes) -> bytes:
        self._left -= len(data)
        if self._left < 0:
            raise _Inflated
        return data

    def read(self, n: int = -1) -> bytes:
        # Never more than one byte past the cap in one call, so a read of "everything" is bounded.
        want = self._left + 1 if n is None or n < 0 else min(n, self._left + 1)
        return self._count(self._raw.read(want))

    def readline(self) -> bytes:
        return self._count(self._raw.readline(self._left + 1))

    def peek(self, n: int = 0) -> bytes:
        return self._raw.peek(n)


def load_plain_pickle(path: str | Path) -> Any:
    """Unpickle ``path`` accepting plain values only. Nothing in the file is ever executed."""
    st = check_input(path, "snapshot", folder_hint="Give the pickle file torch.cuda.memory._dump_snapshot wrote.")
    if st.st_size > files.MAX_SNAPSHOT_BYTES:
        raise PlannerError(
            f"Snapshot file '{path}' is {st.st_size / 2**30:.1f} GiB, more than the {files.MAX_SNAPSHOT_BYTES // 2**30} GiB "
            "planner reads.",
            hint="Record fewer events (torch.cuda.memory._record_memory_history(max_entries=100000)).",
        )
    p = Path(path)
    compressed = False
    try:
        with p.open("rb") as f:
            head = f.read(4)
            if not head:
                raise PlannerError(f"Snapshot file '{path}' is empty.", hint=_HINT)
            if head in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
                raise PlannerError(
                    f"'{path}' is a zip archive, not a memory snapshot: torch.save (PyTorch 1.6 and later) writes zip "
                    "archives, and a snapshot is the plain pickle torch.cuda.memory._dump_snapshot writes.",
                    hint=_HINT,
                )
            f.seek(0)
            note_input(path, "snapshot")
            # Gzip is told by its magic bytes, whatever the name: snapshots are often kept as
            # .pickle.gz (this repository ships its real ones so). The stream is decompressed as
            # the unpickler reads it, never whole, and the decompressed bytes are held to the same
            # cap as a plain file, so a small file that inflates without end (a gzip bomb) stops
            # at the cap with an error instead of filling memory.
            compressed = head[:2] == _GZIP_MAGIC
            source: Any = _CappedReader(gzip.GzipFile(fileobj=f, mode="rb"), files.MAX_SNAPSHOT_BYTES) if compressed else f
            value = _PlainDataUnpickler(source).load()
            if type(value) is int and value == _TORCH_LEGACY_MAGIC:
                raise PlannerError(
                    f"'{path}' is a legacy torch.save file (PyTorch before 1.6), not a memory snapshot.", hint=_HINT)
            return value
    except PlannerError:
        raise
    except _Inflated:
        raise PlannerError(
            f"Gzip-compressed snapshot '{path}' decompresses to more than the {files.MAX_SNAPSHOT_BYTES // 2**30} GiB "
            "planner reads from a snapshot (a plain dump with max_entries=100000 is 50-200 MiB); reading stopped there.",
            hint="Check that it is the snapshot you meant; record fewer events "
            "(torch.cuda.memory._record_memory_history(max_entries=100000)).",
        ) from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise PlannerError(
            f"Snapshot file '{path}' starts like a gzip file but is not valid gzip data ({str(exc)[:200]}).",
            hint=f"Check the file (gzip -t '{path}'), or copy it again.",
        ) from None
    except _Refused as exc:
        raise PlannerError(
            f"Refused to load '{path}': it asks for {exc}, and a PyTorch memory snapshot holds only "
            "plain values (dicts, lists, tuples, strings, numbers, booleans, None). Nothing in the "
            "file was run.",
            hint="Load only snapshots written by torch.cuda.memory._dump_snapshot from a source you trust.",
        ) from None
    except OSError as exc:
        raise PlannerError(f"Could not read '{path}': {exc.strerror or exc}.") from None
    except (EOFError, pickle.UnpicklingError) as exc:
        # EOFError: ran out of input; UnpicklingError: truncated data, or bytes that are no pickle.
        text = str(exc)
        if isinstance(exc, EOFError) or "truncated" in text:
            stream = "its gzip stream" if compressed else "the pickle"
            what = f"ends in the middle of {stream} (truncated: was the dump interrupted or the copy cut short?)"
        else:
            what = f"is not a pickle ({text[:200]})"
        raise PlannerError(f"Snapshot file '{path}' {what}.", hint=_HINT) from None
    except (MemoryError, RecursionError):
        raise PlannerError(f"Snapshot file '{path}' is too large or too deeply nested to load here.") from None
    except Exception as exc:  # corrupt opcodes surface as ValueError, KeyError, IndexError, ...
        raise PlannerError(
            f"Snapshot file '{path}' is corrupt: unpickling failed with {type(exc).__name__}: {str(exc)[:200]}.",
            hint=_HINT,
        ) from None


MAX_TRACE_EVENTS = 5_000_000
"""Trace events (all devices) planner analyzes: a dump with the recommended max_entries=100000
holds 100,000 per device, so this is 50 devices' worth. Counted after the pickle's shared
references are expanded: a few KiB that repeat one event list through the pickle memo cannot
become tens of millions of events to walk."""
MAX_BLOCKS = 5_000_000
"""Segment blocks (all segments), counted the same way."""
MAX_SETTINGS_NESTING = 16
"""allocator_settings is a flat mapping; deeper nesting is refused before anything prints it."""


def _show(v: Any) -> str:
    """A short description of a value for an error message, safe for any input (repr of a deeply
    nested list would recurse without end; of a huge integer, raise)."""
    if v is None or type(v) in (bool, float):
        return repr(v)
    if type(v) is int:
        return repr(v) if v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"
    if type(v) is str:
        return repr(v[:60] + ("..." if len(v) > 60 else ""))
    if isinstance(v, (list, tuple, dict)):
        return f"a {type(v).__name__} of {len(v)} item(s)"
    return f"a {type(v).__name__}"


def _nesting_exceeds(obj: Any, limit: int, budget: int = 100_000) -> bool:
    """Whether ``obj`` nests lists/tuples/dicts deeper than ``limit`` (or holds more than
    ``budget`` of them), found without recursion."""
    stack = [(obj, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, tuple, dict)):
            if depth > limit:
                return True
            seen += 1
            if seen > budget:
                return True
            items = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in items)
    return False


# ---- checking the structure ------------------------------------------------------------------


_I64 = 2**63


def _is_int(v: Any) -> bool:
    # bool is an int subclass; a bool where a byte count belongs is a malformed file. Values
    # outside int64 cannot be addresses, sizes or times (and would overflow the numpy arrays).
    return type(v) is int and -_I64 <= v < _I64


def _fail(origin: str, where: str, what: str) -> PlannerError:
    return PlannerError(f"'{origin}' is not a memory snapshot planner can read: {where} {what}.", hint=_HINT)


def parse_snapshot(raw: Any, origin: str = "snapshot") -> Snapshot:
    """Check the unpickled value and return it as a :class:`Snapshot`.

    Accepts the current layout (dict with ``segments``, ``device_traces`` and optionally
    ``allocator_settings``, ``external_annotations``), the 1.13-2.0 layout whose blocks carry a
    ``history`` list instead of ``frames``, and the oldest form, a bare list of segments.
    """
    notes: list[str] = []
    if isinstance(raw, list):
        segments_raw, traces_raw, settings, layout = raw, [], {}, "segments-list"
        notes.append("The file is a bare list of segments (oldest snapshot layout): no trace, dump-time state only.")
    elif isinstance(raw, dict):
        if "segments" not in raw and "device_traces" not in raw:
            keys = ", ".join(sorted(_show(k) for k in list(raw)[:8])) or "none"
            raise _fail(origin, "the top-level dict has", f"neither 'segments' nor 'device_traces' (its keys: {keys})")
        segments_raw = raw.get("segments", [])
        traces_raw = raw.get("device_traces", [])
        settings = raw.get("allocator_settings") or {}
        if not isinstance(settings, dict):
            settings = {}
        if _nesting_exceeds(settings, MAX_SETTINGS_NESTING):
            raise _fail(origin, "'allocator_settings' is", f"nested more than {MAX_SETTINGS_NESTING} levels deep "
                        "(PyTorch writes a flat mapping)")
        layout = "current"
    else:
        raise _fail(origin, "the file holds", f"a value of type {type(raw).__name__}, not a snapshot dict")

    if not isinstance(segments_raw, (list, tuple)):
        raise _fail(origin, "'segments' is", f"a {type(segments_raw).__name__}, not a list")
    if not isinstance(traces_raw, (list, tuple)):
        raise _fail(origin, "'device_traces' is", f"a {type(traces_raw).__name__}, not a list")

    blocks = sum(len(b) for seg in segments_raw if isinstance(seg, dict)
                 for b in (seg.get("blocks"),) if isinstance(b, (list, tuple)))
    events = sum(len(t) for t in traces_raw if isinstance(t, (list, tuple)))
    for count, limit, what in ((events, MAX_TRACE_EVENTS, "trace events"), (blocks, MAX_BLOCKS, "segment blocks")):
        if count > limit:
            raise PlannerError(
                f"Snapshot file '{origin}' holds {count:,} {what} once the pickle's shared references are expanded, more "
                f"than the {limit:,} planner analyzes.",
                hint="Record fewer events: torch.cuda.memory._record_memory_history(max_entries=100000).",
            )
    segments = []
    for i, seg in enumerate(segments_raw):
        s, legacy = _parse_segment(seg, i, origin, notes)
        segments.append(s)
        if legacy:
            layout = "legacy-history"
    traces = [_parse_trace(t, d, origin) for d, t in enumerate(traces_raw)]
    annotations = _parse_annotations(raw.get("external_annotations") if isinstance(raw, dict) else None)
    return Snapshot(tuple(segments), traces, dict(settings), layout, notes, annotations)


def _parse_annotations(raw: Any) -> list[dict]:
    """Keep the well-formed region markers; anything else in the list is metadata we do not use."""
    out = []
    for a in raw if isinstance(raw, (list, tuple)) else []:
        if not isinstance(a, dict):
            continue
        t, stage, name, dev = a.get("time_us"), a.get("stage"), a.get("name"), a.get("device", 0)
        if _is_int(t) and stage in ("START", "END") and isinstance(name, str) and _is_int(dev):
            out.append({"device": dev, "time_us": t, "stage": stage, "name": name})
    return out


def _parse_segment(seg: Any, i: int, origin: str, notes: list[str]) -> tuple[Segment, bool]:
    where = f"segment {i}"
    if not isinstance(seg, dict):
        raise _fail(origin, where, f"is a {type(seg).__name__}, not a dict")
    for key in ("address", "total_size"):
        if not _is_int(seg.get(key)):
            raise _fail(origin, where, f"has no integer '{key}' (found {_show(seg.get(key))})")
    total = seg["total_size"]
    if total < 0:
        raise _fail(origin, where, f"has a negative total_size {total}")
    if seg["address"] < 0:
        raise _fail(origin, where, f"has a negative address {seg['address']} (device addresses are unsigned)")
    stream = seg.get("stream", 0)
    if not _is_int(stream):
        raise _fail(origin, where, f"has a non-integer stream {_show(stream)}")
    device = seg.get("device", 0)
    device = device if _is_int(device) else 0
    if device < 0:
        raise _fail(origin, where, f"has a negative device index {device}")
    pool = seg.get("segment_pool_id")
    pool = tuple(pool) if isinstance(pool, (list, tuple)) else None
    blocks_raw = seg.get("blocks", [])
    if not isinstance(blocks_raw, (list, tuple)):
        raise _fail(origin, where, f"has 'blocks' that is a {type(blocks_raw).__name__}, not a list")
    blocks = []
    legacy = False
    addr = seg["address"]
    for j, b in enumerate(blocks_raw):
        bwhere = f"block {j} of segment {i}"
        if not isinstance(b, dict):
            raise _fail(origin, bwhere, f"is a {type(b).__name__}, not a dict")
        size = b.get("size")
        if not _is_int(size) or size < 0:
            raise _fail(origin, bwhere, f"has no non-negative integer 'size' (found {_show(size)})")
        state = b.get("state")
        if state not in BLOCK_STATES:
            raise _fail(origin, bwhere, f"has an unknown state {_show(state)}")
        frames = b.get("frames")
        requested = b.get("requested_size")
        if "history" in b and frames is None:
            # 1.13-2.0 layout: the newest history entry is the live allocation.
            legacy = True
            hist = b["history"] if isinstance(b["history"], (list, tuple)) else []
            h0 = hist[0] if hist and isinstance(hist[0], dict) else {}
            frames = h0.get("frames")
            requested = h0.get("real_size", requested)
        if not _is_int(requested) or requested < 0 or requested > size:
            requested = size
        baddr = b.get("address", addr)
        baddr = baddr if _is_int(baddr) else addr
        blocks.append(Block(baddr, size, requested, state, frames if isinstance(frames, (list, tuple)) else None))
        addr = baddr + size
    if blocks and sum(b.size for b in blocks) != total:
        notes.append(f"Segment {i}'s blocks add up to {sum(b.size for b in blocks)} bytes, not its total_size {total}.")
    expandable = seg.get("is_expandable") is True
    return Segment(device, seg["address"], total, stream, expandable, pool, tuple(blocks)), legacy


def _parse_trace(entries: Any, device: int, origin: str) -> Trace:
    if not isinstance(entries, (list, tuple)):
        raise _fail(origin, f"device_traces[{device}] is", f"a {type(entries).__name__}, not a list")
    t = Trace()
    # Bound methods hoisted: this loop runs once per event (100k+ in a real dump).
    act, addr, size, stream, tus, frames = (
        t.action.append, t.addr.append, t.size.append, t.stream.append, t.time_us.append, t.frames.append,
    )
    for k, e in enumerate(entries):
        if type(e) is not dict:
            raise _fail(origin, f"event {k} of device {device}", f"is a {type(e).__name__}, not a dict")
        a = e.get("action")
        if type(a) is not str:
            raise _fail(origin, f"event {k} of device {device}", f"has no action string (found {_show(a)})")
        sz = e.get("size", 0)
        if type(sz) is not int or not 0 <= sz < _I64:
            raise _fail(origin, f"event {k} of device {device} ({a[:40]})", f"has no non-negative integer size (found {_show(sz)})")
        if a == "oom":
            free = e.get("device_free")
            free = 0 if free is None else free  # not recorded: nothing known to be free
            # CUDA's free-memory figure (cudaMemGetInfo) cannot be negative; a file that says so
            # was edited or corrupted, and the OOM diagnosis would add it to what the job could use.
            if not _is_int(free) or free < 0:
                raise _fail(origin, f"event {k} of device {device} (oom)",
                            f"has no non-negative integer device_free (found {_show(free)}): the free memory CUDA "
                            "reports cannot be negative")
            t.device_free[k] = free
            ad = 0
        else:
            ad = e.get("addr", 0)
            if type(ad) is not int or not -_I64 <= ad < _I64 or (a in _NEEDS_ADDR and "addr" not in e):
                raise _fail(origin, f"event {k} of device {device} ({a[:40]})", f"has no integer addr (found {_show(e.get('addr'))})")
        st = e.get("stream", 0)
        act(a)
        addr(ad)
        size(sz)
        stream(st if _is_int(st) else 0)
        tu = e.get("time_us")
        tus(tu if _is_int(tu) else None)
        fr = e.get("frames")
        frames(fr if isinstance(fr, (list, tuple)) else None)
    return t
