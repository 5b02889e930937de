"""The forward/backward phase of the schedules the closed forms do not cover, from the event walk.

Which plans walk (:func:`walk_name`): every plan of the zero-bubble and DualPipe schedules, and
Megatron's 1F1B and interleaved with EP overlap (its combined 1F1B: the overlap happens inside the
forward-and-backward pairs, so how much all-to-all hides depends on the pairs, the lone warm-up
forwards and cool-down backwards, not on a block's own compute); Megatron's 1F1B and interleaved
without overlap keep the closed forms of :mod:`planner.cost.pipeline`.

For each plan the walk reads, per rank and chunk, its blocks' pieces in layer order
(:func:`planner.cost.phases.block_layer`, the blocks of :meth:`Costs.ranks`), the pipeline send
of :func:`planner.cost.comm.pp_p2p_time`, and the hardware's overlap interference (hidden
all-to-all seconds slow the compute they hide behind by that fraction, as in the closed forms);
:func:`planner.cost.schedules.batch.pipeline_step` walks all plans of a batch at once. The
search's tables (batches with ``walk`` off) hold :func:`walk_floor` instead, a proven lower bound
of the walk from each chunk's sums (the item graphs of every lever combination of every layout
would cost the search some 40 times its table time); the search walks the plans it ranks in the
order of that floor until no plan left can enter its top K (planner.search.driver).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.cost.pipeline import BlockCost, chunk_blocks, rank_blocks
from planner.cost.schedules.batch import (
    StepResult, item_counts, item_times, pipeline_step, slice_items,
)
from planner.cost.schedules.timing import LayerTimes
from planner.specs.plan import EpOverlap
from planner.specs.schedule import schedule_named


def walk_name(schedule: str | None, levers, vpp: int = 1) -> str | None:
    """The schedule walk a plan runs (planner.cost.schedules names), None for the closed forms
    (also for EP overlap under 1F1B with PP > 1, which Megatron refuses: rule ep-overlap-needs-vpp)."""
    if schedule is None or schedule_named(schedule).order == "megatron":
        return "combined-1f1b" if levers.ep_overlap and (schedule is None or vpp > 1) else None
    return schedule


@dataclass(frozen=True)
class Walked:
    """The walked plans of a batch: their columns, the walk's result for them (arrays over those
    columns) and the schedule it walked."""

    cols: np.ndarray
    name: str
    result: StepResult
    estimate: bool
    """Read from the closed forms (the search's tables) rather than walked."""


def chunk_blocks_of(costs, r: int, variant) -> list[list[tuple[BlockCost, int]]]:
    """Rank ``r``'s chunks as (stacked BlockCost, count) in layer order, for one variant (the
    blocks of :meth:`Costs.ranks`, whose numbers are over the rank's stacked block keys)."""
    ctx, b = costs.ctx, costs.batch
    chunks = b.layout.rank_stages(r)
    settings = [v.recompute_setting() for v in b.variants]
    specs = tuple(tuple(rank_blocks(ctx.ms, chunks, s, v.full_layers(r, chunks))) for s, v in zip(settings, b.variants))
    setting = variant.recompute_setting()
    out = []
    for chunk, n_full in zip(chunks, variant.full_layers(r, chunks)):
        out.append([(costs._stacked_block(name, is_full, specs, settings), count)
                    for name, count, _, is_full in rank_blocks(ctx.ms, (chunk,), setting, (n_full,))])
    return out


def chunk_layers(costs, r: int, variant, cols: np.ndarray, blocks_of=None) -> tuple[tuple[LayerTimes, ...], ...]:
    """Rank ``r``'s chunks as layer pieces for the plans ``cols`` of one variant (``blocks_of``:
    its :func:`chunk_blocks_of`, when the caller has it)."""
    keys = costs.ranks()[r].keys[cols]

    def at(x):
        x = np.asarray(x, dtype=float)
        return np.broadcast_to(x, (len(keys),)) if x.ndim == 0 else x[keys]

    out = []
    for blocks in (chunk_blocks_of(costs, r, variant) if blocks_of is None else blocks_of):
        layers: list[LayerTimes] = []
        for block, count in blocks:
            lt = LayerTimes(**{f.name: at(getattr(block.layer, f.name)) for f in dataclasses.fields(LayerTimes)})
            layers += [lt] * count
        out.append(tuple(layers))
    return tuple(out)


def walk_plans(costs) -> list[Walked]:
    """Walk (or, for the tables, bound from below: walk_floor) every plan of the batch whose
    schedule needs it."""
    b = costs.batch
    nk = b.n_keys
    m = b.micro_batches
    p2p = costs.p2p_seconds()
    out = []
    interference = costs.ctx.rates.overlap_interference
    ep = b.deg.ep
    for j, v in enumerate(b.variants):
        for has_ep in (False, True):
            # EP overlap needs expert parallelism (the canonical plan drops it at ep = 1).
            lv = v if has_ep else dataclasses.replace(v, ep_overlap=EpOverlap.OFF)
            name = walk_name(b.schedule, lv, b.vpp)
            sel = j * nk + np.flatnonzero((ep[j * nk:(j + 1) * nk] > 1) == has_ep)
            if name is None or not len(sel):
                continue
            pair = bool(lv.ep_overlap)
            if not b.walk:
                # The search's tables: a proven floor of the walk (walk_floor), from each chunk's
                # sums alone (the walk of every lever combination of every layout would cost the
                # search many times its table time).
                sums = [rank_chunk_sums(costs, r, j, sel) for r in range(b.pp)]
                for mi in (int(x) for x in np.unique(m[sel])):
                    idx = np.flatnonzero(m[sel] == mi)
                    cols = sel[idx]
                    part = [ChunkSums(*(x[:, idx] for x in (s.f, s.i, s.w, s.af, s.ab))) for s in sums]
                    res = walk_floor(name, b.pp, b.layout.chunks_per_rank, mi, part, p2p[cols],
                                     delay_wgrad=lv.delay_wgrad, pair_overlap=pair, interference=interference)
                    out.append(Walked(cols, name, res, True))
                continue
            # Item times do not depend on the micro-batch count: once for all of them (items of
            # equal chunks share theirs, batch.item_times).
            blocks = [chunk_blocks_of(costs, r, lv) for r in range(b.pp)]
            chunks = [chunk_layers(costs, r, lv, sel, blocks[r]) for r in range(b.pp)]
            ms = tuple(int(x) for x in np.unique(m[sel]))
            v_ = b.layout.chunks_per_rank
            items = item_times(name, b.pp, v_, ms, chunks, lv.delay_wgrad, pair)
            for mi in ms:
                idx = np.flatnonzero(m[sel] == mi)
                cols = sel[idx]
                own = [{k: per[k] for k in item_counts(name, b.pp, v_, mi, r, pair)}
                       for r, per in enumerate(slice_items(items, idx))]
                res = pipeline_step(name, b.pp, v_, mi, None, p2p[cols], delay_wgrad=lv.delay_wgrad, pair_overlap=pair,
                         interference=interference, items=own)
                out.append(Walked(cols, name, res, False))
    return out



HEAD_SCHEDULES = ("combined-1f1b", "zb-h1", "zbv", "dualpipev")
"""Schedules with one route, from rank 0 through the ranks in order and (zbv, dualpipev) back:
every forward of rank q > 0 waits for a forward of rank q - 1, every backward of rank q - 1 for
one of rank q (DualPipe's two routes start at both ends: no fill or drain term for it)."""

SEND_SCHEDULES = ("combined-1f1b", "zb-h1", "zbv")
"""Of those, the ones whose sends the walk adds as tasks of one send's seconds between producer and
consumer (planner.cost.schedules.walk, _Builder.hand_over; DualPipeV posts and commits its own)."""


@dataclass(frozen=True)
class ChunkSums:
    """Per chunk of one rank (rows) and plan (columns), the seconds of one micro-batch's pieces
    (:class:`LayerTimes` summed over the chunk's layers)."""

    f: np.ndarray
    """Forward compute (attention and MLP)."""
    i: np.ndarray
    """Input-gradient compute."""
    w: np.ndarray
    """Weight-gradient compute."""
    af: np.ndarray
    """The forward's all-to-alls (dispatch and combine)."""
    ab: np.ndarray
    """The backward's."""


def sums_of(chunks) -> ChunkSums:
    """:class:`ChunkSums` of one rank's chunks given as layers (tuples of LayerTimes)."""
    def total(layers, names):
        return sum((np.asarray(getattr(lt, f), dtype=float) for lt in layers for f in names), np.zeros(1))

    parts = {k: np.array([np.broadcast_to(total(layers, names), np.broadcast_shapes(*(
        np.shape(total(ls, names)) for ls in chunks))) for layers in chunks])
        for k, names in (("f", ("attn_f", "mlp_f")), ("i", ("attn_b", "mlp_b")), ("w", ("attn_w", "mlp_w")),
                         ("af", ("dispatch_f", "combine_f")), ("ab", ("dispatch_b", "combine_b")))}
    n = max(x.shape[1] for x in parts.values())
    return ChunkSums(**{k: np.broadcast_to(x, (x.shape[0], n)) for k, x in parts.items()})


SUM_FIELDS = {"f": ("attn_f", "mlp_f"), "i": ("attn_b", "mlp_b"), "w": ("attn_w", "mlp_w"),
              "af": ("dispatch_f", "combine_f"), "ab": ("dispatch_b", "combine_b")}


def rank_chunk_sums(costs, r: int, j: int, cols: np.ndarray) -> ChunkSums:
    """:class:`ChunkSums` of rank ``r`` for the plans ``cols`` of variant ``j``: each chunk's block
    counts (:func:`_chunk_counts`) times the rank's stacked blocks' pieces (:meth:`Costs.ranks`)."""
    ctx, b = costs.ctx, costs.batch
    chunks = b.layout.rank_stages(r)
    fulls = tuple(v.full_layers(r, chunks) for v in b.variants)
    shape = tuple((tuple(c.layers), bool(c.embedding), bool(c.loss), int(c.mtp)) for c in chunks)
    positions, counts = _chunk_counts(ctx.ms, shape, fulls, j)
    rank = costs.ranks()[r]
    keys = rank.keys[cols]
    out = {}
    for k, names in SUM_FIELDS.items():
        rows = []
        for block in rank.blocks:
            x = np.asarray(sum(np.asarray(getattr(block.layer, f), dtype=float) for f in names), dtype=float)
            rows.append(np.broadcast_to(x, (len(keys),)) if np.ndim(x) == 0 else x[keys])
        out[k] = counts @ np.array(rows).reshape(len(positions), len(keys))
    return ChunkSums(**out)


@lru_cache(maxsize=4096)
def _chunk_counts(ms, shape: tuple, fulls: tuple, j: int) -> tuple[tuple, np.ndarray]:
    """The (block, fully recomputed) positions of a rank's blocks over every variant (the order
    of :meth:`Costs.ranks`'s stacked blocks) and, for variant ``j``, each chunk's count of each
    (chunks x positions)."""
    per = [[chunk_blocks(ms, *c, n) for c, n in zip(shape, full)] for full in fulls]
    positions = tuple(dict.fromkeys((name, is_full) for var in per for chunk in var for name, _, is_full in chunk))
    at = {pos: i for i, pos in enumerate(positions)}
    counts = np.zeros((len(shape), len(positions)))
    for c, chunk in enumerate(per[j]):
        for name, count, is_full in chunk:
            counts[c, at[name, is_full]] += count
    return positions, counts


def walk_floor(name: str, p: int, v: int, m: int, sums: list[ChunkSums], p2p=0.0, *, delay_wgrad: bool = False,
               pair_overlap: bool = True, interference: float = 0.0) -> StepResult:
    """A lower bound of :func:`~planner.cost.schedules.batch.pipeline_step`'s step under schedule
    ``name`` (``p`` ranks, ``v`` chunks per rank, ``m`` micro-batches; ``sums[r]`` rank r's
    :class:`ChunkSums`, ``p2p`` one send's seconds), what the search's tables hold for the
    schedules the walk times.

    Why it holds (the walk's structure: planner.cost.schedules.walk and batch):
    1. An item's pieces follow each other on two streams: compute (``c``: F f, B i + w, I i, W w;
       a weight gradient moved off the data path runs on it too, Chain.side) and all-to-all
       (``a``). Inside one op (and inside each half of an overlapped pair) every piece waits for
       the one before it (Chain), so a lone op takes at least all its pieces (F f + af, I i + ab,
       B i + ab + w without --delay-wgrad-compute, i + w with it, W w) and a pair at least
       max(c, a) and each half's chain. The coarse walk charges an item ``dur + interference *
       (a + c - dur)`` (its hidden all-to-all), at least ``(1 - x) L + x (a + c)`` for a lower
       bound L of ``dur`` and x the interference clipped to [0, 1].
    2. A rank's items run one after the other on its compute stream (each waits for the one
       before it: Tasks.issue_point), so from its first item's start the rank is busy at least
       ``B_q``, the sum of item lower bounds over the items it runs (item_counts).
    3. Head: no item of rank q starts before its first forward (a backward needs its own forward),
       and in HEAD_SCHEDULES every forward of rank q > 0 needs the output of a forward of rank
       q - 1 (the stage before it), which needs one of rank q - 2, and so on to rank 0. A
       forward's output waits for its chain (f + af of its chunk) and, in SEND_SCHEDULES, a send
       of ``p2p`` seconds: rank q starts no earlier than ``H_q``, the sum over r < q of rank r's
       least chunk forward chain (plus a send each).
    4. Tail: where rank q's last item is a backward (B or I) it hands an input gradient to a
       backward of rank q - 1, which hands one to rank q - 2, and so on to rank 0, whose output
       the step waits for. A backward's output waits for its chain (i + ab, + w without
       --delay-wgrad-compute); only a delayed weight gradient (at most that chunk's w) may follow
       the output on rank q: the step is at least ``H_q + B_q - w_last + T_q``, T_q the sum over
       r < q of rank r's least chunk backward chain (plus a send each).
    The step is at least the largest of these over the ranks. tests/test_walk_floor.py checks it
    against the walk on random durations of every schedule and on the plans of a search."""
    n = max([np.size(p2p)] + [x.shape[1] for s in sums for x in (s.f, s.i, s.w, s.af, s.ab)])
    send = np.broadcast_to(np.asarray(p2p, dtype=float), (n,)) if name in SEND_SCHEDULES else np.zeros(n)
    x = min(max(float(interference), 0.0), 1.0)
    keep = 0.0 if delay_wgrad else 1.0
    head = np.zeros(n)
    tail_of = np.zeros(n)
    step = np.zeros(n)
    busy, compute, zero = [], [], np.zeros(n)
    for q, s in enumerate(sums):
        s = ChunkSums(*(np.broadcast_to(y, (y.shape[0], n)) for y in (s.f, s.i, s.w, s.af, s.ab)))
        # Per op kind and chunk: compute, all-to-all, and the chain a lone op waits through.
        comp = {"F": s.f, "B": s.i + s.w, "I": s.i, "W": s.w}
        a2a = {"F": s.af, "B": s.ab, "I": s.ab, "W": np.zeros_like(s.w)}
        chain = {"F": s.f + s.af, "B": s.i + s.ab + keep * s.w, "I": s.i + s.ab, "W": s.w}
        ops, pairs, last = _rank_items(name, p, v, m, q, pair_overlap)
        total = np.zeros(n)
        work = np.zeros(n)
        for kind, (chunk, count) in ops.items():
            c, a = comp[kind][chunk], a2a[kind][chunk]
            low = np.maximum(chain[kind][chunk], c)
            total = total + count @ ((1 - x) * low + x * (a + c))
            work = work + count @ c
        for kind, (fc, bc, count) in pairs.items():
            c, a = comp["F"][fc] + comp[kind][bc], a2a["F"][fc] + a2a[kind][bc]
            low = np.maximum(np.maximum(c, a), np.maximum(chain["F"][fc], chain[kind][bc]))
            total = total + count @ ((1 - x) * low + x * (a + c))
            work = work + count @ c
        busy.append(total)
        compute.append(work)
        end = head + total
        if name in HEAD_SCHEDULES and q > 0 and last is not None:
            moved = s.w[last[1]] if last[0] == "B" and delay_wgrad else 0.0
            end = np.maximum(end, end - moved + tail_of)
        step = np.maximum(step, end)
        if name in HEAD_SCHEDULES:
            head = head + chain["F"].min(axis=0) + send
            tail_of = tail_of + chain["B" if "B" in ops or "B" in pairs else "I"].min(axis=0) + send
    return StepResult(step, tuple(busy), tuple(compute), (zero,) * p, (zero,) * p)


@lru_cache(maxsize=4096)
def _rank_items(name: str, p: int, v: int, m: int, q: int, pair_overlap: bool) -> tuple[dict, dict, tuple | None]:
    """Rank q's items as arrays: lone ops per kind (chunk indices, counts), overlapped pairs per
    backward kind (forward chunks, backward chunks, counts), and its last item's (kind, chunk)
    when that is a lone backward (B or I), else None."""
    from planner.cost.schedules import rank_items
    from planner.cost.schedules.ops import Pair

    ops: dict[str, list] = {}
    pairs: dict[str, list] = {}
    for key, count in item_counts(name, p, v, m, q, pair_overlap).items():
        if key[0] == "op":
            ops.setdefault(key[1], []).append((key[2], count))
        else:
            pairs.setdefault(key[2], []).append((key[1], key[3], count))
    items = rank_items(name, p, v, m, q)
    last = items[-1] if items else None
    if isinstance(last, Pair) and not pair_overlap:
        last = last.bwd
    tail = (last.kind, last.chunk) if last is not None and not isinstance(last, Pair) and \
        getattr(last, "kind", "") in ("B", "I") else None
    return ({k: (np.array([c for c, _ in v_]), np.array([n for _, n in v_], dtype=float)) for k, v_ in ops.items()},
            {k: (np.array([f for f, _, _ in v_]), np.array([b for _, b, _ in v_]),
                 np.array([n for _, _, n in v_], dtype=float)) for k, v_ in pairs.items()},
            tail)
