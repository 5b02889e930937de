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

from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from planner.cost.schedule import (
    KINDS, Op, distinct_before, distinct_first, distinct_table, inflight_table, megatron_microbatches, megatron_ops,
    profile_microbatches, running_held, warmup_count,
)
from planner.cost.schedules import rank_items
from planner.cost.schedules.ops import ops_of
from planner.cost.schedules.orders import check_combined
from planner.specs.schedule import Schedule

MEGATRON_ORDERS = {"megatron": 0, "combined": 1}
"""Megatron's order kinds (planner.specs.schedule.OrderKind) and the forwards each adds to the
interleaved warm-up."""


def width(sched: Schedule, v: int) -> int:
    """Entries of a held vector: the rank's chunks, twice for a split backward."""
    return sched.chunks(v) * (2 if sched.splits_backward else 1)


@lru_cache(maxsize=1024)
def held_before(sched: Schedule, p: int, v: int, m: int, rank: int) -> tuple[tuple[Op, tuple[int, ...]], ...]:
    """(op, held vector just before it) for every op of the rank, in order: :func:`held_matrix`'s
    rows beside the ops they precede (cached: reports walk them op by op)."""
    return tuple(held_from(sched, p, v, m, rank, 0))


@lru_cache(maxsize=1024)
def rank_ops(sched: Schedule, p: int, v: int, m: int, rank: int) -> tuple[Op, ...]:
    """The rank's ops in order, the rows of :func:`held_matrix`."""
    return tuple(op for item in rank_items(sched, p, v, m, rank) for op in ops_of(item))


@lru_cache(maxsize=1024)
def _megatron_microbatches(sched: Schedule, p: int, v: int, m: int, rank: int):
    return megatron_microbatches(p, sched.chunks(v), m, rank, MEGATRON_ORDERS[sched.order])


def held_from(sched: Schedule, p: int, v: int, m: int, rank: int, start: int):
    """:func:`held_before`'s pairs from op ``start`` on, made as they are read: a caller that stops
    early (the memory report's peak moment, a few ops past its first candidate) does not build a
    tuple per op of the step (some 135,000 for the default search's ranked plans), nor, under
    Megatron's orders, the rank's items (its ops come from the closed form of
    planner.cost.schedule.megatron_ops)."""
    kinds, chunks, held = held_matrix(sched, p, v, m, rank)
    closed = sched.order in MEGATRON_ORDERS
    mbs = _megatron_microbatches(sched, p, v, m, rank) if closed else None
    every = () if closed else rank_ops(sched, p, v, m, rank)
    step = 64  # rows converted a block at a time (one tolist per row costs more)
    for lo in range(start, len(kinds), step):
        hi = lo + step
        ops: Iterable[Op] = every[lo:hi] if mbs is None else \
            map(Op, [KINDS[k] for k in kinds[lo:hi].tolist()], chunks[lo:hi].tolist(), mbs[lo:hi].tolist())
        yield from zip(ops, map(tuple, held[lo:hi].tolist()))


def profiles(sched: Schedule, p: int, v: int, m: int, rank: int):
    """(before_forward[c], before_backward[c]): the distinct held vectors before each forward and
    each backward (I or B) of chunk c, as sorted tuples (the format of
    :func:`planner.cost.schedule.inflight_profiles`)."""
    return distinct_before(profile_table(sched, p, v, m, rank), sched.chunks(v))


def profile_table(sched: Schedule, p: int, v: int, m: int, rank: int):
    """:func:`profiles` as one array of distinct (kind: 0 forward / 1 backward, chunk, held
    vector) rows in numeric order (planner.cost.schedule.distinct_table)."""
    if sched.order == "megatron":
        return inflight_table(p, sched.chunks(v), m, rank)
    if sched.order == "combined":
        # Megatron's order with one more warm-up forward: its steady state repeats like the
        # interleaved one's, so the same capped count shows the same vectors (a test checks it).
        m = int(profile_microbatches(p, v, m))
    return _profile_table(sched, p, v, m, rank)


@lru_cache(maxsize=4096)
def _profile_table(sched: Schedule, p: int, v: int, m: int, rank: int):
    kinds, chunks, held = held_matrix(sched, p, v, m, rank)
    # Forwards as kind 0; input-gradient and full backwards alike as kind 1; W left out.
    return distinct_table(np.choose(kinds, [0, 1, 1, 2]).astype(np.int8), chunks, held)


def paired_forwards(sched: Schedule, p: int, v: int, m: int, rank: int) -> np.ndarray:
    """Indices (into :func:`held_matrix`'s ops) of the forwards Megatron's combined 1F1B runs as one
    overlapped step with the backward that follows them (empty for every other order): every
    forward after the w = warm-up + 1 first (planner.cost.schedules.orders.megatron_overlap),
    whose op list counts a pair's forward first."""
    if sched.order != "combined":
        return np.zeros(0, dtype=np.int64)
    kinds = held_matrix(sched, p, v, m, rank)[0]
    n = sched.chunks(v)
    w = min(warmup_count(p, n, m, rank) + 1, m * n)
    forwards = np.flatnonzero(kinds == 0)
    return forwards[w:]


def pair_profile_table(sched: Schedule, p: int, v: int, m: int, rank: int):
    """The combined 1F1B's profiles with its overlapped steps apart: distinct rows (kind, chunk,
    held vector) of the unpaired forwards (kind 0) and backwards (kind 1), and of the pairs (kind
    2, chunk ``f * n + b`` for the forward's chunk f and the backward's b, the vector held before
    the pair: b's micro-batch still whole). A pair's backward has no row of its own: Megatron runs
    the pair layer by layer (forward layer i beside backward layer L-1-i, each backward layer's
    state released after it: megatron/core/models/common/model_chunk_schedule_plan.py
    TransformerModelChunkSchedulePlan.run), so its memory is the pair's
    (planner.cost.pieces.pair_rise). Capped micro-batch counts show the same rows, as for
    :func:`profile_table`."""
    return _pair_profile_table(sched, p, v, int(profile_microbatches(p, v, m)), rank)


@lru_cache(maxsize=4096)
def _pair_profile_table(sched: Schedule, p: int, v: int, m: int, rank: int):
    kinds, chunks, held = held_matrix(sched, p, v, m, rank)
    n = sched.chunks(v)
    k = kinds.astype(np.int8)  # the combined order has only F (0) and B (1)
    c = chunks.copy()
    pf = paired_forwards(sched, p, v, m, rank)
    if len(pf) and not (kinds[pf + 1] == 1).all():
        raise AssertionError("a paired forward is not followed by its backward")
    k[pf], c[pf] = 2, chunks[pf] * n + chunks[pf + 1]
    k[pf + 1] = 3  # left out: the pair covers it
    return distinct_table(k, c, held, max_kind=2)


@lru_cache(maxsize=1024)
def held_matrix(sched: Schedule, p: int, v: int, m: int, rank: int):
    """The rank's ops as arrays (kind: an index of KINDS, chunk) and ``held``: row i the held
    vector just before op i (planner.cost.schedule.running_held). Megatron's orders come in closed
    form (planner.cost.schedule.megatron_ops; a test checks them against their ops)."""
    n = sched.chunks(v)
    if sched.order in MEGATRON_ORDERS:
        if sched.order == "combined":
            check_combined(p, v)
        kinds, chunks = megatron_ops(p, n, m, rank, MEGATRON_ORDERS[sched.order])
    else:
        ops = [op for item in rank_items(sched, p, v, m, rank) for op in ops_of(item)]
        kinds = np.array([KINDS.index(op.kind) for op in ops], dtype=np.int8)
        chunks = np.array([op.chunk for op in ops], dtype=np.int64)
    return kinds, chunks, running_held(kinds, chunks, n, width(sched, v))


def max_inflight(sched: Schedule, p: int, v: int, m: int, rank: int, with_w: bool = True) -> int:
    """Most chunks the rank holds at once, the one being computed included (from its forward's
    start to its backward's end; ``with_w``: to its weight gradient's end)."""
    n = sched.chunks(v)
    kinds, _, held = held_matrix(sched, p, v, m, rank)
    if not len(kinds):
        return 0
    total = (held if with_w else held[:, :n]).sum(axis=1) + (kinds == KINDS.index("F"))
    return int(total.max())


@lru_cache(maxsize=1024)
def held_vectors(sched: Schedule, p: int, v: int, m: int, rank: int) -> tuple[tuple[int, ...], ...]:
    """The distinct held vectors of the rank over its step, in the order they first appear
    (cached: every report of a plan on this schedule reads them)."""
    return tuple(distinct_rows(held_matrix(sched, p, v, m, rank)[2]))


def distinct_rows(held) -> list[tuple[int, ...]]:
    """The distinct rows of a held matrix in the order they first appear."""
    return [tuple(row) for row in held[np.sort(distinct_first(held))].tolist()]


def peak_moment(sched: Schedule, p: int, v: int, m: int, rank: int, kept) -> tuple[int, object, float]:
    """(op index, op, bytes held) where the rank's held bytes peak: ``kept[i]`` are the bytes one
    micro-batch holds in held-vector entry i (activations per chunk, then what W needs per chunk),
    the op being computed counted with what it holds when it ends (first of equal peaks)."""
    best: tuple[int, Op | None, float] = (0, None, -1.0)
    for i, (op, vec) in enumerate(held_before(sched, p, v, m, rank)):
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
