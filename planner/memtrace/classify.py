"""Which class each allocation belongs to: weights, gradients, optimizer, activations, transient,
comm_buffers, or unknown.

Three kinds of evidence, strongest first:

1. **Frames** (the Python stack recorded at allocation, innermost first). The innermost frame that
   matches a rule decides: communication (``nccl``, ``ProcessGroup``, ``_allgather_base``,
   ``all_to_all``, ``torch/distributed/distributed_c10d``, Megatron's ``p2p_communication``),
   optimizer (``optimizer``, ``torch/optim/``, ``adam``, ``exp_avg``, ``megatron/core/optimizer``),
   gradients (``main_grad``, ``megatron/core/distributed``, ``DistributedDataParallel``, a ``grad``
   name token), weights (``param`` tokens, ``reset_parameters``, ``Module._apply``),
   activations (a ``forward`` token, ``checkpoint``/``recompute``). Schedule drivers such as
   ``forward_backward_no_pipelining`` name both passes and are skipped; ``backward`` frames only
   mark the phase. A communication frame just outside a ``forward`` frame wins (an autograd
   Function wrapping a collective).
2. **Lifetime**, from the trace: *transient* if freed after at most ``transient_max_allocs`` other
   allocations (one kernel or op: workspaces, expert intermediates, fused-kernel scratch; these
   are transient whatever their frames say, except communication, and except a forward
   allocation that backward frees, which is a saved activation however soon it goes);
   *constant* if never freed in the window; *dynamic* otherwise (allocated in one phase, freed in
   a later one: activations when nothing else is known).
3. **Stream**: an allocation on a stream other than the main one (the stream with the most
   allocations) is a communication buffer unless its frames say optimizer, gradients or weights.

cuBLAS workspaces are named by their C++ frames (``setWorkspaceForHandle``) when C++ stacks were
recorded; otherwise sizes place them: a never-freed allocation that no frame places, of exactly
PyTorch's default cuBLAS workspace size, is that workspace (class transient, evidence ``size``).

What no evidence places stays ``unknown``: typically constant memory allocated before the window
without recorded frames, which is weights, gradients or optimizer states in some proportion that
sizes alone cannot tell apart. The result records which evidence placed each byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from planner.memtrace import CLASSES
from planner.memtrace.timeline import ALLOC, Timeline

EVIDENCE = ("frames", "free_frames", "stream", "lifetime", "size", "none")
LIFETIMES = ("constant", "dynamic", "transient")
CONSTANT, DYNAMIC, TRANSIENT = range(3)

TRANSIENT_MAX_ALLOCS = 8
"""An allocation freed after at most this many other allocations lived within one op."""

CUBLAS_WORKSPACE_SIZES = frozenset({32 << 20, (4096 * 2 + 16 * 8) << 10})
"""PyTorch's default cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG ':4096:8' on Hopper and newer,
':4096:2:16:8' before), one per handle and stream. It is allocated from C++ (with no Python stack
in the snapshots seen on torch 2.11) and kept for good, so without C++ stacks only its exact size
identifies it; the seed counts it with the transients (the workspace that
CUBLAS_WORKSPACE_CONFIG shrinks)."""

_C = {name: i for i, name in enumerate(CLASSES)}

# Phase markers a frame can carry (bit flags).
FWD, BWD, OPT, CKPT = 1, 2, 4, 8

_COMM_SUBSTR = (
    "nccl", "processgroup", "c10d", "all_gather", "allgather", "reduce_scatter", "reducescatter",
    "all_to_all", "alltoall", "all_reduce", "allreduce", "deep_ep", "deepep", "p2p_communication",
    "_functional_collectives", "_coalescing_manager",
)
_COMM_TOKENS = frozenset({"isend", "irecv", "broadcast"})
_CUBLAS_WORKSPACE_FRAMES = ("setworkspaceforhandle", "blasltworkspace", "getchosenworkspacesize")
_OPT_SUBSTR = ("optimizer", "/optim/", "adam", "exp_avg", "fp32_from", "main_param", "master_param")
_GRAD_SUBSTR = (
    "main_grad", "grad_buffer", "grad_data", "accumulategrad", "accumulate_grad", "megatron/core/distributed",
    "distributeddataparallel", "torch/nn/parallel/distributed", "param_and_grad",
)
_GRAD_TOKENS = frozenset({"grad", "grads", "gradient", "gradients"})
_WEIGHT_SUBSTR = (
    "reset_parameters", "parameter", "init_weight", "load_state_dict", "get_model", "model_provider", "init_method",
)
_WEIGHT_TOKENS = frozenset({"param", "params", "weight", "weights"})
_MODULE_MOVES = frozenset({"_apply", "cuda", "to", "to_empty"})
_BWD_SUBSTR = ("autograd::engine", "evaluate_function")
# Not "torch/autograd": a custom autograd Function's forward runs under torch/autograd/function.py too.

COMM_REACH = 3
"""A communication frame this close outside a ``forward`` frame wins: the forward of an autograd
Function that wraps a collective (Megatron's ``_AllToAll.forward`` under ``all_to_all``)."""
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def frame_rule(name: str, filename: str) -> tuple[str | None, int]:
    """(class, phase markers) for one frame; class None when no rule matches."""
    if "::" in name:
        name = name.split("(", 1)[0]  # a C++ frame: its argument types say nothing about the caller
    n, f = name.lower(), filename.lower()
    tokens = set(_TOKEN_SPLIT.split(n))
    both = n + " " + f
    if any(s in n for s in _CUBLAS_WORKSPACE_FRAMES):
        return "transient", 0  # cuBLAS's per-handle workspace, allocated by whichever GEMM came first
    if "reducer" in n:
        return "gradients", 0  # DDP's c10d::Reducer: its buckets are gradients, despite the namespace
    if any(s in both for s in _COMM_SUBSTR) or tokens & _COMM_TOKENS:
        return "comm_buffers", 0
    if "forward" in tokens and "backward" in tokens:
        return None, 0  # a schedule driver (forward_backward_func): on every stack, says nothing
    if any(s in both for s in _OPT_SUBSTR):
        return "optimizer", OPT
    if any(s in both for s in _GRAD_SUBSTR) or tokens & _GRAD_TOKENS:
        return "gradients", 0
    if any(s in both for s in _WEIGHT_SUBSTR) or tokens & _WEIGHT_TOKENS:
        return "weights", 0
    if f.endswith("torch/nn/modules/module.py") and n in _MODULE_MOVES:
        return "weights", 0  # model.cuda() / model.to(): the parameters arriving on the GPU
    marks = 0
    # Substring, not token: C++ autograd nodes are named like MulBackward0 / AddmmBackward0.
    if "backward" in n or any(s in both for s in _BWD_SUBSTR):
        marks |= BWD
    if "dist_checkpointing" not in f and ("checkpoint" in both or "recompute" in both):
        return "activations", marks | CKPT
    if "forward" in tokens:
        return "activations", marks | FWD
    return None, marks


def _frame_fields(fr) -> tuple[str, str]:
    if isinstance(fr, dict):
        name, filename = fr.get("name", ""), fr.get("filename", "")
        return (name if isinstance(name, str) else ""), (filename if isinstance(filename, str) else "")
    return (fr, "") if isinstance(fr, str) else ("", "")


class StackReader:
    """Frame-rule verdicts for whole stacks, cached by stack identity and by frame text.

    PyTorch deduplicates identical tracebacks and pickle keeps the sharing, so most stacks are
    the same list object; the per-frame cache covers snapshots that lost the sharing."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[str | None, int]] = {}
        self._by_frame: dict[tuple[str, str], tuple[str | None, int]] = {}
        self._keep: list = []  # keep stacks alive so their ids stay unique while cached

    def verdict(self, frames) -> tuple[str | None, int]:
        """(class of the innermost matching frame, OR of all frames' phase markers)."""
        if not frames:
            return None, 0
        key = id(frames)
        hit = self._by_id.get(key)
        if hit is not None:
            return hit
        cls, marks, at = None, 0, -1
        for k, fr in enumerate(frames):
            fk = _frame_fields(fr)
            v = self._by_frame.get(fk)
            if v is None:
                v = self._by_frame[fk] = frame_rule(*fk)
            if cls is None and v[0] is not None:
                cls, at = v[0], k
            elif cls == "activations" and v[0] == "comm_buffers" and k - at <= COMM_REACH:
                cls = "comm_buffers"
            # Markers from frames outside the deciding one still tell the phase (a forward frame
            # under autograd's backward is recompute), so keep collecting them.
            marks |= v[1]
        out = (cls, marks)
        self._by_id[key] = out
        self._keep.append(frames)
        return out


def phase_of(marks: int) -> str:
    if marks & OPT:
        return "optimizer"
    if marks & BWD:
        return "backward (recompute)" if marks & (FWD | CKPT) else "backward"
    if marks & (FWD | CKPT):
        return "forward"
    return "unknown"


_PLUMBING_PARTS = ("unwind::", "capturedtraceback", "gather_with_cpp", "cachingallocator", "__libc_start")
_PLUMBING_PREFIXES = ("c10::", "at::", "std::", "pybind11", "py", "_py", "_start")


def _plumbing(name: str) -> bool:
    """C++ frames every allocation passes through (stack capture, the allocator, dispatch, the
    interpreter): never the answer to 'where was this allocated'."""
    n = name.lower()
    return any(p in n for p in _PLUMBING_PARTS) or n.startswith(_PLUMBING_PREFIXES)


def where_of(frames) -> str:
    """A short 'file.py:line:function' for the innermost frame of the user's code (else of
    PyTorch's Python, else the innermost C++ frame that is not plumbing)."""
    if not frames:
        return ""
    dicts = [f for f in frames if isinstance(f, dict)]
    text = lambda f, k: v if isinstance(v := f.get(k, ""), str) else ""  # noqa: E731
    py = [f for f in dicts if text(f, "filename").endswith(".py")]
    user = [f for f in py if "/torch/" not in text(f, "filename")]
    cpp = [f for f in dicts if not _plumbing(text(f, "name"))]
    pick = (user or py or cpp or dicts or [None])[0]
    if pick is None:
        return ""
    fname, name, line = pick.get("filename", ""), pick.get("name", "?"), pick.get("line", "?")
    # Only strings and integers are shown: a crafted frame may hold anything (str() of a deeply
    # nested list would recurse without end).
    fname = fname.rsplit("/", 1)[-1][:200] if isinstance(fname, str) else "?"
    name = name.replace("(anonymous namespace)::", "").split("(", 1)[0][:200] if isinstance(name, str) else "?"
    line = line if type(line) is int and abs(line) < 2**63 else "?"
    return f"{fname}:{line}:{name}"


@dataclass
class Classification:
    cls: np.ndarray
    """Index into :data:`planner.memtrace.CLASSES`, per allocation record."""
    evidence: np.ndarray
    """Index into :data:`EVIDENCE`."""
    lifetime: np.ndarray
    """Index into :data:`LIFETIMES`."""
    marks: np.ndarray
    """Phase markers of the allocation stack."""
    main_stream: int
    """Stream index (into Timeline.streams) carrying most allocations."""
    transient_max_allocs: int

    @property
    def transient_mask(self) -> np.ndarray:
        return self.lifetime == TRANSIENT


def main_stream(tl: Timeline) -> int:
    """The stream with the most allocations in the window (or, with no window, the most bytes)."""
    a = tl.allocs
    if not len(a):
        return 0
    made = a.event >= 0
    if made.any():
        counts = np.bincount(a.stream[made], minlength=len(tl.streams))
        return int(np.argmax(counts))
    return int(np.argmax(np.bincount(a.stream, weights=a.size, minlength=len(tl.streams))))


def lifetimes(tl: Timeline, transient_max_allocs: int = TRANSIENT_MAX_ALLOCS) -> np.ndarray:
    """constant / dynamic / transient per allocation (see the module docstring)."""
    a = tl.allocs
    allocs_before = np.concatenate(([0], np.cumsum(tl.codes == ALLOC)))  # allocs before event i
    life = np.full(len(a), DYNAMIC, dtype=np.int8)
    life[a.end > tl.n_events] = CONSTANT
    inside = (a.event >= 0) & (tl.alloc_free_event >= 0)
    between = np.zeros(len(a), dtype=np.int64)
    between[inside] = allocs_before[tl.alloc_free_event[inside]] - allocs_before[a.event[inside]] - 1
    life[inside & (between <= transient_max_allocs)] = TRANSIENT
    return life


def classify(tl: Timeline, transient_max_allocs: int = TRANSIENT_MAX_ALLOCS) -> Classification:
    a = tl.allocs
    n = len(a)
    life = lifetimes(tl, transient_max_allocs)
    ms = main_stream(tl)
    reader = StackReader()
    cls = np.full(n, _C["unknown"], dtype=np.int8)
    ev = np.full(n, EVIDENCE.index("none"), dtype=np.int8)
    marks = np.zeros(n, dtype=np.int16)
    side = a.stream != ms
    E = {k: i for i, k in enumerate(EVIDENCE)}
    strong = ("optimizer", "gradients", "weights")
    for i in range(n):
        fc, mk = reader.verdict(tl.alloc_frames[i])
        marks[i] = mk
        lt = life[i]
        if lt == TRANSIENT and mk & (FWD | CKPT) and reader.verdict(tl.alloc_free_frames[i])[1] & BWD:
            # Made in forward, freed by backward: saved for backward however few allocations
            # came in between (the last layer's activations), so an activation, not a transient.
            lt = life[i] = DYNAMIC
        if fc in ("comm_buffers", "transient"):
            c, e = fc, "frames"
        elif lt == TRANSIENT:
            c, e = "transient", "lifetime"
        elif side[i] and fc not in strong:
            c, e = "comm_buffers", "stream"
        elif fc is not None:
            c, e = fc, "frames"
        elif lt == CONSTANT and int(a.size[i]) in CUBLAS_WORKSPACE_SIZES:
            c, e = "transient", "size"
        elif mk & BWD:
            # Made in backward with no more specific frame: kept to the end, or freed by the
            # optimizer (zero_grad(set_to_none=True)), it is a parameter's gradient (AccumulateGrad
            # keeps the tensor the backward op made); freed within backward it is the gradient of
            # an activation, counted with the activations.
            if lt == CONSTANT:
                c, e = "gradients", "frames"
            elif reader.verdict(tl.alloc_free_frames[i])[1] & OPT:
                c, e = "gradients", "free_frames"
            else:
                c, e = "activations", "frames"
        else:
            c, e = _by_free_or_lifetime(reader, tl.alloc_free_frames[i], lt)
        cls[i] = _C[c]
        ev[i] = E[e]
    return Classification(cls, ev, life, marks, ms, transient_max_allocs)


def _by_free_or_lifetime(reader: StackReader, free_frames, lt: int) -> tuple[str, str]:
    """No allocation stack: the stack of the free, then the lifetime alone."""
    _, fmk = reader.verdict(free_frames)
    if fmk & OPT:
        return "gradients", "free_frames"  # freed by the optimizer step / zero_grad(set_to_none)
    if fmk & (BWD | FWD):
        return "activations", "free_frames"  # consumed within the step
    if lt == DYNAMIC:
        return "activations", "lifetime"  # allocated in one phase and freed in a later one
    return "unknown", "none"


# ---- decompositions at a moment and over time ------------------------------------------------


def components_at(tl: Timeline, cl: Classification, state: int) -> dict:
    """Bytes per class, per lifetime and per (class, evidence) among allocations live at ``state``.
    The classes sum exactly to ``tl.allocated[state]``: they partition the same records."""
    live = tl.live_allocs(state)
    size = tl.allocs.size[live]
    by_cls = np.bincount(cl.cls[live], weights=size, minlength=len(CLASSES))
    by_life = np.bincount(cl.lifetime[live], weights=size, minlength=len(LIFETIMES))
    pair = cl.cls[live].astype(np.int64) * len(EVIDENCE) + cl.evidence[live]
    by_pair = np.bincount(pair, weights=size, minlength=len(CLASSES) * len(EVIDENCE))
    evidence = {
        c: {e: int(by_pair[i * len(EVIDENCE) + j]) for j, e in enumerate(EVIDENCE) if by_pair[i * len(EVIDENCE) + j]}
        for i, c in enumerate(CLASSES)
    }
    return {
        "components": {c: int(by_cls[i]) for i, c in enumerate(CLASSES)},
        "lifetimes": {k: int(by_life[i]) for i, k in enumerate(LIFETIMES)},
        "evidence": {c: v for c, v in evidence.items() if v},
    }


def class_series(tl: Timeline, cl: Classification) -> np.ndarray:
    """Allocated bytes per class at every state, shape (len(CLASSES), n_states)."""
    a = tl.allocs
    ns = tl.n_states
    out = np.zeros((len(CLASSES), ns), dtype=np.int64)
    for c in range(len(CLASSES)):
        m = cl.cls == c
        if not m.any():
            continue
        up = np.bincount(a.start[m], weights=a.size[m], minlength=ns + 1)
        down = np.bincount(a.end[m], weights=a.size[m], minlength=ns + 1)
        out[c] = np.cumsum(up - down)[:ns].astype(np.int64)
    return out


def peak_phase(tl: Timeline, cl: Classification, state: int) -> str:
    """The phase of the most recent allocation at or before ``state`` (its stack's markers)."""
    a = tl.allocs
    if state == 0 or not len(a):
        return "unknown"
    made = np.flatnonzero((a.event >= 0) & (a.event < state))
    if not len(made):
        return "unknown"
    order = made[np.argsort(a.event[made])][::-1][:32]
    for r in order:  # the latest allocation that has a stack
        if cl.marks[r] or tl.alloc_frames[r]:
            return phase_of(int(cl.marks[r]))
    return "unknown"
