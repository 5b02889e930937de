"""Pipeline schedules as Megatron-Core runs them: the order of forward and backward chunks on each
pipeline rank (megatron/core/pipeline_parallel/schedules.py).

1F1B (vpp = 1): rank r runs min(p - r - 1, m) warm-up forwards, then alternates one forward and one
backward, then drains the remaining backwards. Interleaved 1F1B (vpp = v > 1): micro-batches go
through the v model chunks in groups of p (``microbatch_group_size_per_vp_stage`` defaults to p);
rank r runs 2(p - r - 1) + (v - 1)p warm-up forwards (capped at m*v), then 1F1B, then drains.
The backward order visits chunks in reverse. These orders decide how many micro-batch chunks each
rank holds at every moment, hence its activation memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.cost.arrays import Count, Num, maximum, minimum, where


@dataclass(frozen=True)
class Op:
    kind: str  # "F" or "B"
    chunk: int  # virtual-stage index on this rank (0..v-1)
    microbatch: int


def chunk_order(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) in forward order: groups of ``group`` micro-batches sweep all chunks;
    the last group takes the leftover micro-batches (Megatron's get_schedule_table)."""
    order: list[tuple[int, int]] = []
    for start in range(0, m, group):
        stop = m if start + group >= m else start + group
        for c in range(v):
            order.extend((mb, c) for mb in range(start, stop))
    return order


def chunk_order_array(m: int, v: int, group: int):
    """:func:`chunk_order` as an (m * v, 2) integer array, built without a Python loop over the
    micro-batches (Megatron's closed-form op order reads it for every profile the search needs)."""
    full, last = divmod(m, group)
    if last == 0 and full:
        full, last = full - 1, group  # the last group is a whole one
    # Whole groups: (group, chunk, micro-batch within the group), in that nesting order.
    g = np.arange(full)[:, None, None] * group + np.arange(group)[None, None, :]
    mb = np.broadcast_to(g, (full, v, group)).reshape(-1)
    ch = np.broadcast_to(np.arange(v)[None, :, None], (full, v, group)).reshape(-1)
    # The last group's leftover micro-batches sweep every chunk in turn.
    mb = np.concatenate([mb, np.tile(full * group + np.arange(last), v)])
    ch = np.concatenate([ch, np.repeat(np.arange(v), last)])
    return np.stack([mb, ch], axis=1).astype(np.int64)


def warmup_count(p: int, v: int, m: int, rank: int, group: int | None = None) -> int:
    """Forwards rank ``rank`` runs before its first backward."""
    total = m * v
    if v == 1:
        return min(p - rank - 1, m)
    g = p if group is None else group
    return min((p - rank - 1) * 2 + (v - 1) * g, total)


@lru_cache(maxsize=8192)
def rank_ops(p: int, v: int, m: int, rank: int) -> tuple[Op, ...]:
    """The op sequence of one pipeline rank for one training step."""
    order = chunk_order(m, v, p)
    fwd = [Op("F", c, mb) for mb, c in order]
    bwd = [Op("B", v - 1 - c, mb) for mb, c in order]
    w = warmup_count(p, v, m, rank)
    ops: list[Op] = fwd[:w]
    for i in range(len(fwd) - w):
        ops.append(fwd[w + i])
        ops.append(bwd[i])
    ops.extend(bwd[len(fwd) - w :])
    return tuple(ops)


def profile_microbatches(p: int, v: int, m: Count) -> Count:
    """A micro-batch count with the same in-flight vectors as ``m``: the schedule's steady state
    repeats every p*v virtual micro-batches, so beyond the warm-up, a few periods and the partial
    last group (m mod p) nothing new appears (tests check this against the full schedule)."""
    cap = p * (v + 4) + (m % p)
    return where(m <= cap, m, cap)


def inflight_profiles(p: int, v: int, m: int, rank: int):
    """Distinct in-flight count vectors (chunks held per virtual stage) seen just before each
    forward and each backward of each chunk: (before_forward[c], before_backward[c]) as tuples of
    count vectors. Enough to find the peak exactly without walking every op again."""
    return _inflight_profiles(p, v, int(profile_microbatches(p, v, m)), rank)


@lru_cache(maxsize=8192)
def _inflight_profiles(p: int, v: int, m: int, rank: int):
    return distinct_before(inflight_table(p, v, m, rank), v)


def inflight_table(p: int, v: int, m: int, rank: int):
    """:func:`inflight_profiles` as one array: :func:`distinct_table` of the rank's ops."""
    return _inflight_table(p, v, int(profile_microbatches(p, v, m)), rank)


@lru_cache(maxsize=8192)
def _inflight_table(p: int, v: int, m: int, rank: int):
    kinds, chunks = megatron_ops(p, v, m, rank)
    return distinct_table(kinds, chunks, running_held(kinds, chunks, v, v))


KINDS = ("F", "B", "I", "W")
"""Op kinds as the arrays below number them: forward, backward, input gradient, weight gradient."""


def megatron_ops(p: int, v: int, m: int, rank: int, extra_warmup: int = 0):
    """The kinds (indices of KINDS: 0 forward, 1 backward) and chunks of the rank's ops in the
    order of :func:`rank_ops`, in closed form: forward i runs at position i in the warm-up of w
    forwards, else at w + 2(i - w); backward i right after forward w + i, or in the drain once the
    forwards are done (a PP 2, VPP 31 rank runs some 4,000 ops per step). ``extra_warmup``
    forwards more before the first backward: 1 for Megatron's combined 1F1B
    (planner.cost.schedules.orders.megatron_overlap), whose overlapped pairs count their forward
    first."""
    order, pos_f, pos_b = _megatron_positions(p, v, m, rank, extra_warmup)
    kinds = np.empty(2 * len(order), dtype=np.int8)
    chunks = np.empty(2 * len(order), dtype=np.int64)
    kinds[pos_f], kinds[pos_b] = 0, 1
    chunks[pos_f], chunks[pos_b] = order[:, 1], v - 1 - order[:, 1]
    return kinds, chunks


def megatron_microbatches(p: int, v: int, m: int, rank: int, extra_warmup: int = 0):
    """The micro-batch of each op of :func:`megatron_ops`, in closed form: backward i is that of
    forward i (Megatron's backward table is its forward table with the chunks reversed)."""
    order, pos_f, pos_b = _megatron_positions(p, v, m, rank, extra_warmup)
    mbs = np.empty(2 * len(order), dtype=np.int64)
    mbs[pos_f] = mbs[pos_b] = order[:, 0]
    return mbs


def _megatron_positions(p: int, v: int, m: int, rank: int, extra_warmup: int):
    """(chunk_order_array, each forward's position, each backward's position) of :func:`megatron_ops`."""
    order = chunk_order_array(m, v, p)
    n = len(order)
    w = min(warmup_count(p, v, m, rank) + extra_warmup, n)
    i = np.arange(n)
    pos_f = np.where(i < w, i, w + 2 * (i - w))
    pos_b = np.where(i < n - w, w + 2 * i + 1, n + i)
    return order, pos_f, pos_b


def running_held(kinds, chunks, n: int, width: int):
    """Row i: the held vector just before op i (ops x ``width``, int32), the running sum of what
    each op holds or releases: a forward holds its chunk (entry c), a backward releases it, an
    input gradient moves it to the entries held until the weight gradient (entry n + c), which
    releases that. A rank ends its step holding nothing."""
    rows = np.arange(len(kinds))
    delta = np.zeros((len(kinds), width), dtype=np.int32)
    delta[rows, np.where(kinds == 3, n + chunks, chunks)] = np.where(kinds == 0, 1, -1)
    split = kinds == 2
    delta[rows[split], n + chunks[split]] = 1
    held = np.zeros_like(delta)
    if len(kinds) > 1:
        np.cumsum(delta[:-1], axis=0, out=held[1:])
    if len(kinds) and (held[-1] + delta[-1]).any():
        raise AssertionError(f"the rank ends the step holding chunks {(held[-1] + delta[-1]).tolist()}")
    return held


def distinct_table(kinds, chunks, held, max_kind: int = 1):
    """The distinct (kind, chunk, held vector) rows of the ops of kind 0 (before a forward) and 1
    (before a backward), in numeric order (int32; other kinds are left out): found by
    :func:`distinct_first`, then the few distinct rows sorted. ``max_kind``: the highest kind
    kept (2 keeps the combined 1F1B's pairs, planner.cost.schedules.inflight.pair_profile_table)."""
    sel = kinds <= max_kind
    rows = np.empty((int(sel.sum()), held.shape[1] + 2), dtype=np.int32)
    rows[:, 0], rows[:, 1], rows[:, 2:] = kinds[sel], chunks[sel], held[sel]
    rows = rows[distinct_first(rows)]
    return rows[np.lexsort(rows.T[::-1])] if len(rows) else rows


@lru_cache(maxsize=64)
def _hash_weights(width: int):
    """Fixed odd 62-bit weights for :func:`distinct_first`: splitmix64's outputs (Steele, Lea and
    Flood 2014), computed here rather than with numpy.random, whose import costs 16 ms."""
    mask, state, out = (1 << 64) - 1, 20261202, []
    for _ in range(width):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(((z ^ (z >> 31)) >> 2) | 1)
    return np.array(out, dtype=np.int64)


def distinct_first(rows):
    """Indices of the first occurrence of each distinct row of an integer matrix (ascending by a
    64-bit hash of the row: a weighted sum that wraps around; rows that share a hash are checked
    equal, and a collision falls back to sorting the rows' bytes)."""
    weights = _hash_weights(rows.shape[1])
    _, first, inverse = np.unique(rows.astype(np.int64) @ weights, return_index=True, return_inverse=True)
    if (rows[first][inverse.reshape(-1)] == rows).all():
        return first
    _, first = np.unique(rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel(), return_index=True)
    return first


def distinct_before(table, n: int) -> tuple:
    """(before_forward[c], before_backward[c]) for each chunk c < n from a :func:`distinct_table`,
    as sorted tuples (the format of :func:`inflight_profiles`)."""
    out: tuple[list, list] = ([[] for _ in range(n)], [[] for _ in range(n)])
    for row in table.tolist():
        out[row[0]][row[1]].append(tuple(row[2:]))
    return tuple(tuple(map(tuple, side)) for side in out)


def max_inflight(p: int, v: int, m: int, rank: int) -> int:
    """Most micro-batch chunks rank ``rank`` holds at once (the warm-up count plus one, when the
    steady state is reached)."""
    return _max_inflight(p, v, int(profile_microbatches(p, v, m)), rank)


@lru_cache(maxsize=8192)
def _max_inflight(p: int, v: int, m: int, rank: int) -> int:
    held = best = 0
    for op in rank_ops(p, v, m, rank):
        held += 1 if op.kind == "F" else -1
        best = max(best, held)
    return best


@lru_cache(maxsize=8192)
def inflight_end_of_warmup(p: int, v: int, m: int, rank: int) -> tuple[int, ...]:
    """Chunks held per virtual stage at the end of the warm-up: the warm-up forwards plus the
    first steady-state one (what the seed calls the activation peak of 1F1B). The warm-up runs
    the first forwards of :func:`chunk_order`, so only that prefix is walked."""
    held = [0] * v
    need = min(warmup_count(p, v, m, rank) + 1, m * v)
    for start in range(0, m, p):
        stop = m if start + p >= m else start + p
        for c in range(v):
            take = min(stop - start, need)
            held[c] += take
            need -= take
            if not need:
                return tuple(held)
    return tuple(held)


def offload_share_parts(n: Num) -> tuple[Num, Num]:
    """With activation offload, the share of the held chunks' activations that stays on the GPU
    when ``n`` chunk-micro-batches are held, as (numerator, denominator): the chunk being computed
    and the one being prefetched back, at the held chunks' mean size (0 when none is held). Whole
    numbers for whole ``n``, so the per-stage model keeps its constraints integral."""
    return minimum(n, 2), maximum(n, 1)


def offload_share(n: Num) -> Num:
    """:func:`offload_share_parts` as one fraction."""
    num, den = offload_share_parts(n)
    return num / den
