"""The forward/backward phase of the schedules the closed forms do not cover, from the event walk.

Which plans walk (:func:`walk_schedule`): every plan of the zero-bubble and DualPipe schedules, and
Megatron's 1F1B and interleaved with EP overlap (its combined 1F1B: the overlap happens inside the
forward-and-backward pairs, so how much all-to-all hides depends on the pairs, the lone warm-up
forwards and cool-down backwards, not on a block's own compute); Megatron's 1F1B and interleaved
without overlap keep the closed forms of :mod:`planner.cost.pipeline`.

For each plan the walk reads, per rank and chunk, its blocks' pieces in layer order
(:func:`planner.cost.phases.block_layer`, the blocks of :meth:`Costs.ranks`), the pipeline send
of :func:`planner.cost.comm.pp_p2p_time`, and the hardware's overlap interference (hidden
all-to-all seconds slow the compute they hide behind by that fraction, as in the closed forms);
:func:`planner.cost.schedules.batch.pipeline_step` walks all plans of a batch at once, or, for the
search's tables, :func:`~planner.cost.schedules.batch.pipeline_estimate` reads the closed forms
over the same items. The tables keep Megatron's combined 1F1B in the closed forms of
:mod:`planner.cost.pipeline` (the block's all-to-all overlapped with its own compute): its item
graphs for every lever combination of every layout would cost the search some 40 times its
table time, and the search's ranked plans are evaluated again with the walk.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.cost.pipeline import BlockCost, rank_blocks
from planner.cost.schedules.batch import (
    StepResult, item_counts, item_times, pipeline_estimate, pipeline_step, slice_items,
)
from planner.cost.schedules.timing import LayerTimes
from planner.specs.plan import EpOverlap
from planner.specs.schedule import COMBINED_1F1B, Schedule


def walk_schedule(schedule: Schedule | None, levers, vpp: int = 1) -> Schedule | None:
    """The schedule the walk runs for a plan on ``schedule``, None for the closed forms (also for EP
    overlap under 1F1B with PP > 1, which Megatron refuses: rule ep-overlap-needs-vpp)."""
    if schedule is None or schedule.order == "megatron":
        return COMBINED_1F1B if levers.ep_overlap and (schedule is None or vpp > 1) else None
    return schedule


@dataclass(frozen=True)
class Walked:
    """The walked plans of a batch: their columns, the walk's result for them (arrays over those
    columns) and the schedule it walked."""

    cols: np.ndarray
    schedule: Schedule
    result: StepResult
    estimate: bool
    """Read from the closed forms (the search's tables) rather than walked."""


def chunk_blocks_of(costs, r: int, variant) -> list[list[tuple[BlockCost, int]]]:
    """Rank ``r``'s chunks as (stacked BlockCost, count) in layer order, for one variant (the
    blocks of :meth:`Costs.ranks`, whose numbers are over the rank's stacked block keys)."""
    chunks = costs.batch.layout.rank_stages(r)
    setting, full = variant.recompute_setting(), variant.full_layers(r, chunks)
    return costs._memo("chunk_blocks", r, setting, full, costs._compute_levers(),
                       fn=lambda: _chunk_blocks(costs, r, chunks, setting, full))


def _chunk_blocks(costs, r: int, chunks, setting, full) -> list[list[tuple[BlockCost, int]]]:
    stacks = costs.rank_stacks(r)
    return [[(stacks[(name, is_full)], count)
             for name, count, _, is_full in rank_blocks(costs.ctx.ms, (chunk,), setting, (n_full,))]
            for chunk, n_full in zip(chunks, full)]


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
    """Walk (or, for the tables, estimate) every plan of the batch whose schedule needs it."""
    b = costs.batch
    if not b.walk and (b.schedule is None or b.schedule.order in ("megatron", "combined")):
        # Megatron's orders walk only as its combined 1F1B (walk_schedule), which the tables read
        # from the closed forms (below): nothing to estimate, whatever the variants.
        return []
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
            sched = walk_schedule(b.schedule, lv, b.vpp)
            sel = j * nk + np.flatnonzero((ep[j * nk:(j + 1) * nk] > 1) == has_ep)
            if sched is None or not len(sel) or (sched.order == "combined" and not b.walk):
                continue  # the tables read Megatron's overlap from the closed forms (module docstring)
            # Item times do not depend on the micro-batch count: once for all of them (items of
            # equal chunks share theirs, batch.item_times).
            blocks = [chunk_blocks_of(costs, r, lv) for r in range(b.pp)]
            chunks = [chunk_layers(costs, r, lv, sel, blocks[r]) for r in range(b.pp)]
            ms = tuple(int(x) for x in np.unique(m[sel]))
            v_, pair = b.layout.chunks_per_rank, bool(lv.ep_overlap)
            items = item_times(sched, b.pp, v_, ms, chunks, lv.delay_wgrad, pair)
            for mi in ms:
                idx = np.flatnonzero(m[sel] == mi)
                cols = sel[idx]
                fn = pipeline_step if b.walk else pipeline_estimate
                own = [{k: per[k] for k in item_counts(sched, b.pp, v_, mi, r, pair)}
                       for r, per in enumerate(slice_items(items, idx))]
                res = fn(sched, b.pp, v_, mi, None, p2p[cols], delay_wgrad=lv.delay_wgrad, pair_overlap=pair,
                         interference=interference, items=own)
                out.append(Walked(cols, sched, res, not b.walk))
    return out
