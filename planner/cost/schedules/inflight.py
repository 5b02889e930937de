"""What each rank holds over the step under any schedule: micro-batch chunks in flight.

A chunk's activations are held from its forward until its backward has used them: until the full
backward (B), or, where the backward is split (zero bubble, DualPipe), until the input gradient
(I), after which what the weight gradient needs (the inputs of the linear layers and the output
gradients, the zero-bubble paper's Table 1) stays until W. The held vector of a rank with ``v``
chunks therefore has ``v`` entries (chunks whose activations are held), and ``2v`` for schedules
that split the backward (entries v..2v-1: chunks between I and W).

:func:`profiles` gives the distinct held vectors seen just before each forward and each backward
(I or B) of each chunk, the form :func:`planner.cost.pieces.peak_over_profiles` consumes; for
Megatron's ``1f1b`` and ``interleaved`` it is :func:`planner.cost.schedule.inflight_profiles`
itself. A weight-gradient pass adds no memory of its own (the gradient GEMMs accumulate into the
persistent gradient buffer) and the moment before it is the end of the op before it, which that
op's own rise covers (so an input-gradient pass's rise must reach what it leaves for W: its end is
one of its moments); W ops add no profile.
"""

from __future__ import annotations

from functools import lru_cache

from planner.cost.schedule import Op, inflight_profiles, profile_microbatches
from planner.cost.schedules import rank_items, schedule
from planner.cost.schedules.ops import ops_of

MEGATRON = ("1f1b", "interleaved")


def width(name: str, v: int) -> int:
    """Entries of a held vector: the rank's chunks, twice for a split backward."""
    s = schedule(name)
    return s.chunks(v) * (2 if s.splits_backward else 1)


@lru_cache(maxsize=1024)
def held_before(name: str, p: int, v: int, m: int, rank: int) -> tuple[tuple[Op, tuple[int, ...]], ...]:
    """(op, held vector just before it) for every op of the rank, in order (cached: the memory
    tables ask for the same rank's vectors once per lever combination)."""
    n = schedule(name).chunks(v)
    held = [0] * width(name, v)
    out = []
    for item in rank_items(name, p, v, m, rank):
        for op in ops_of(item):
            out.append((op, tuple(held)))
            c = op.chunk
            if op.kind == "F":
                held[c] += 1
            elif op.kind == "B":
                held[c] -= 1
            elif op.kind == "I":
                held[c] -= 1
                held[n + c] += 1
            else:
                held[n + c] -= 1
    assert not any(held), f"{name}: rank {rank} ends the step holding {held}"
    return tuple(out)


def profiles(name: str, p: int, v: int, m: int, rank: int):
    """(before_forward[c], before_backward[c]): the distinct held vectors before each forward and
    each backward (I or B) of chunk c, as sorted tuples (the format of
    :func:`planner.cost.schedule.inflight_profiles`)."""
    if name in MEGATRON:
        return inflight_profiles(p, v if name == "interleaved" else 1, m, rank)
    if name == "combined-1f1b":
        # Megatron's order with one more warm-up forward: its steady state repeats like the
        # interleaved one's, so the same capped count shows the same vectors (a test checks it).
        m = int(profile_microbatches(p, v, m))
    return _profiles(name, p, v, m, rank)


@lru_cache(maxsize=4096)
def _profiles(name: str, p: int, v: int, m: int, rank: int):
    n = schedule(name).chunks(v)
    before_f: list[set] = [set() for _ in range(n)]
    before_b: list[set] = [set() for _ in range(n)]
    for op, vec in held_before(name, p, v, m, rank):
        if op.kind == "F":
            before_f[op.chunk].add(vec)
        elif op.kind in ("I", "B"):
            before_b[op.chunk].add(vec)
    return (tuple(tuple(sorted(s)) for s in before_f), tuple(tuple(sorted(s)) for s in before_b))


def max_inflight(name: str, p: int, v: int, m: int, rank: int, with_w: bool = True) -> int:
    """Most chunks the rank holds at once, the one being computed included (from its forward's
    start to its backward's end; ``with_w``: to its weight gradient's end)."""
    n = schedule(name).chunks(v)
    best = 0
    for op, vec in held_before(name, p, v, m, rank):
        held = sum(vec) if with_w else sum(vec[:n])
        best = max(best, held + (op.kind == "F"))
    return best


def peak_moment(name: str, p: int, v: int, m: int, rank: int, kept) -> tuple[int, object, float]:
    """(op index, op, bytes held) where the rank's held bytes peak: ``kept[i]`` are the bytes one
    micro-batch holds in held-vector entry i (activations per chunk, then what W needs per chunk),
    the op being computed counted with what it holds when it ends (first of equal peaks)."""
    best: tuple[int, Op | None, float] = (0, None, -1.0)
    for i, (op, vec) in enumerate(held_before(name, p, v, m, rank)):
        total = sum(n * k for n, k in zip(vec, kept)) + (kept[op.chunk] if op.kind == "F" else 0.0)
        if total > best[2]:
            best = (i, op, total)
    return best


def inflight_over_time(result, rank: int, with_w: bool = True) -> list[tuple[float, int]]:
    """(time, chunks held from then on) on ``rank``, read off a time walk's task intervals rather
    than the op order: a chunk of a micro-batch is held from the start of its forward's first task
    to the end of its backward's last (``with_w``: of its weight gradient's last; a chunk ending
    at the moment another starts is not counted twice)."""
    tasks = result.tasks
    begin: dict[tuple, float] = {}
    end: dict[tuple, float] = {}
    last = ("B", "W") if with_w else ("B", "I")
    for t, op in enumerate(tasks.op):
        if op is None or tasks.rank[t] != rank:
            continue
        key = (op.chunk, op.microbatch)
        if op.kind == "F":
            begin[key] = min(begin.get(key, float("inf")), result.start[t])
        elif op.kind in last:
            end[key] = max(end.get(key, 0.0), result.finish[t])
    events = sorted([(end[k], 0, -1) for k in end] + [(begin[k], 1, 1) for k in begin])
    out, held = [], 0
    for time, _, step in events:
        held += step
        out.append((time, held))
    return out
