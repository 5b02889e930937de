"""Time, part one: each pipeline rank's blocks per micro-batch (a decoder layer of each kind, the
embedding, the head, MTP) under every variant side by side, their sums per rank with the pipeline
send/receive, and the bytes a split backward holds between input and weight gradients."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.cost.arrays import Num
from planner.cost.comm import CommCost, pp_p2p_time
from planner.cost.compute import BlockTime
from planner.cost.pipeline import BlockCost, RankCost, rank_blocks, rank_p2p
from planner.cost.schedules.timing import LayerTimes
from planner.cost.terms.base import TermsBase, _column, at
from planner.cost.walked import chunk_blocks_of
from planner.specs.plan import CudaGraphs


class RankTimes(TermsBase):
    """Blocks and ranks: seconds per micro-batch of each pipeline rank."""

    def ranks(self) -> tuple[RankCost, ...]:
        """Each pipeline rank's blocks (per micro-batch) and pipeline send/receive."""
        return self._memo("ranks", self._compute_levers(), fn=self._ranks)

    def _ranks(self) -> tuple[RankCost, ...]:
        ctx, b = self.ctx, self.batch
        nbk = len(ctx.keys.bk)
        bk = ctx.keys.bk_of[b.key_rows]
        # Blocks are costed per variant over the block keys, side by side: plan i reads its block
        # key in its variant's stretch.
        keys = (np.arange(len(b.variants))[:, None] * nbk + bk[None, :]).reshape(-1)
        sh = ctx.shard(self.lv, b.rows, True)
        t_p2p = pp_p2p_time(ctx.ms, sh, self.spans()["pp"], ctx.rates)
        overlap = p2p_overlaps(b.vpp, ctx.assumptions)
        settings = [v.recompute_setting() for v in b.variants]
        by_blocks: dict[tuple, RankCost] = {}
        out = []
        for r in range(b.pp):
            specs = self.rank_specs(r)
            if specs not in by_blocks:
                blocks = tuple(self._stacked_block(name, is_full, specs, settings)
                               for name, is_full in _positions(specs))
                plain = RankCost(r, blocks, 0.0, 0.0, keys)
                p2p = rank_p2p(t_p2p, b.pp, b.vpp, plain.compute, overlap, ctx.rates)
                by_blocks[specs] = RankCost(r, blocks, *p2p, keys)
            out.append(by_blocks[specs])  # ranks with the same blocks share one object (and its sums)
        return tuple(out)

    def rank_specs(self, r: int) -> tuple:
        """Each variant's block list of rank ``r`` (planner.cost.pipeline.rank_blocks). Variants
        differ in dispatcher and EP overlap too: each recompute setting's blocks are listed once."""
        return self._memo("rank_specs", r, self._compute_levers(), fn=lambda: self._rank_specs(r))

    def _rank_specs(self, r: int) -> tuple:
        b = self.batch
        chunks = b.layout.rank_stages(r)
        keyed = [(v.recompute_setting(), v.full_layers(r, chunks)) for v in b.variants]
        blocks_of = {k: tuple(rank_blocks(self.ctx.ms, chunks, *k)) for k in dict.fromkeys(keyed)}
        return tuple(blocks_of[k] for k in keyed)

    def rank_stacks(self, r: int) -> dict[tuple[str, bool], BlockCost]:
        """Rank ``r``'s stacked blocks (:meth:`ranks`) by position (block, fully recomputed): what the
        walk reads per chunk, looked up rather than restacked for each variant."""
        return self._memo("rank_stacks", r, self._compute_levers(),
                          fn=lambda: dict(zip(_positions(self.rank_specs(r)), self.ranks()[r].blocks)))

    def _stacked_block(self, name: str, is_full: bool, specs, settings) -> BlockCost:
        """One position of a rank's blocks, under every variant side by side (count 0 where a
        variant's rank has no such block)."""
        per = []
        for spec, setting, v in zip(specs, settings, self.batch.variants):
            hit = [(count, rc) for n_, count, rc, full in spec if n_ == name and full == is_full]
            # A block appears once per chunk: the rank holds their sum (same recompute in each).
            count, rc = (sum(c for c, _ in hit), hit[0][1]) if hit else (0, None)
            per.append((count, rc, "full" if is_full else setting, v.precision, v.dispatcher, v.ep_overlap,
                        v.cuda_graphs))
        return self.ctx.cached(("stacked", name, tuple(per)), lambda: self._stack(name, per))

    def _stack(self, name: str, per: list[tuple]) -> BlockCost:
        if len(per) == 1:
            return dataclasses.replace(_costs_of(self.ctx, name, per)[0], count=per[0][0])
        nbk = len(self.ctx.keys.bk)
        count = np.repeat(np.array([p[0] for p in per], dtype=float), nbk)
        # The variants' block costs side by side do not depend on the counts: layouts whose ranks
        # hold different numbers of a block (the default search's 66 stacks) share 30 of them.
        stacked = self.ctx.cached(("stacked_costs", name, tuple(p[1:] for p in per)),
                                  lambda: self._side_by_side(name, per))
        return dataclasses.replace(stacked, count=count)

    def _side_by_side(self, name: str, per: list[tuple]) -> BlockCost:
        """The variants' block costs over the block keys, one stretch each (count 1). A context
        whose block costs are composed in a wider one (CostContext.share_blocks with compose
        there: the search's contexts for keys costed before its bound is known, some 30 at 65,536
        GPUs) reads the wider context's stack at its rows, as it reads each block cost there."""
        shared = self.ctx.blocks_parent()
        if shared is None:
            return _side_by_side(self.ctx, name, per)
        parent, idx = shared
        content = tuple(p[1:] for p in per)
        whole = parent.cached(("stacked_costs", name, content), lambda: _side_by_side(parent, name, per))
        orders = parent.cached(("stacked_causes", name, content),
                               lambda: tuple(tuple(cc.cause for cc in c.comm) for c in _costs_of(parent, name, per)))
        return _rows_of(whole, orders, idx, len(parent.keys.bk))

    def block(self, name: str, compute_rc, comm_rc) -> BlockCost:
        """One block of ``name`` per micro-batch for the batch's keys under its levers: its compute
        recomputes ``compute_rc``, its communication sees ``comm_rc`` (as in a rank's blocks)."""
        bk = self.ctx.keys.bk_of[self.batch.key_rows]
        return at(self.ctx.block_cost(name, compute_rc, comm_rc, self.lv), bk)

    def rank_times(self) -> list[Num]:
        """Seconds per micro-batch of each rank: compute, exposed communication and p2p."""
        return [rc.per_microbatch for rc in self.ranks()]

    def wgrad_kept(self, r: int) -> np.ndarray:
        """(chunks, plans): bytes one micro-batch of each chunk of rank ``r`` holds between its
        input- and weight-gradient passes (planner.cost.phases.wgrad_bytes)."""
        return self._memo("wgrad_kept", r, self._compute_levers(), fn=lambda: self._wgrad_kept(r))

    def _wgrad_kept(self, r: int) -> np.ndarray:
        b = self.batch
        nk = b.n_keys
        keys = self.ranks()[r].keys
        out = np.zeros((b.layout.chunks_per_rank, self.n))
        for j, v in enumerate(b.variants):
            cols = np.arange(j * nk, (j + 1) * nk)
            for c, blocks in enumerate(chunk_blocks_of(self, r, v)):
                for block, count in blocks:
                    kept = np.asarray(block.wgrad_kept, dtype=float)
                    out[c, cols] += count * (kept[keys[cols]] if kept.ndim else kept)
        return out

    def p2p_seconds(self) -> np.ndarray:
        """One activation (or gradient) send between pipeline neighbours, per plan."""
        def fn():
            ctx, b = self.ctx, self.batch
            return _column(pp_p2p_time(ctx.ms, ctx.shard(self.lv, b.rows, True), self.spans()["pp"], ctx.rates), self.n)

        return self._memo("p2p_s", len(self.batch.variants), fn=fn)


class PrecisionFlags:
    """``fp8`` / ``fp4`` of a record with a ``precision`` field (the plan's Levers and a block's
    _LeverView): the hardware's FP8 recipe or NVFP4."""

    precision: str

    @property
    def fp8(self) -> bool:
        return self.precision == "fp8"

    @property
    def fp4(self) -> bool:
        return self.precision == "nvfp4"


@dataclass(frozen=True)
class _LeverView(PrecisionFlags):
    """The levers a block's cost reads (see :meth:`CostContext.block_cost`)."""

    precision: str
    dispatcher: str | None
    ep_overlap: bool
    cuda_graphs: CudaGraphs = CudaGraphs()


def _positions(specs) -> list[tuple[str, bool]]:
    """The (block, fully recomputed) positions of a rank over all variants' block lists, in order."""
    return list(dict.fromkeys((name, full) for spec in specs for name, _, _, full in spec))


def p2p_overlaps(vpp: int, assumptions) -> bool:
    """Megatron-Core overlaps pipeline send/receive with compute in the interleaved schedule
    (overlap_p2p_comm); 2021-22 Megatron (megatron-local) blocked on it."""
    return vpp > 1 and assumptions.implementation == "te"


def _costs_of(ctx, name: str, per: list[tuple]) -> list[BlockCost]:
    """The block costs of each variant's entry of a stack (see RankTimes._stacked_block)."""
    return [ctx.block_cost(name, rc, comm_rc, _LeverView(precision, dispatcher, overlap, graphs))
            for _, rc, comm_rc, precision, dispatcher, overlap, graphs in per]


def _side_by_side(ctx, name: str, per: list[tuple]) -> BlockCost:
    """The variants' block costs over ``ctx``'s block keys, one stretch each (count 1); a cause of
    communication some variant lacks is zero in its stretch."""
    nbk = len(ctx.keys.bk)
    costs = _costs_of(ctx, name, per)
    time = BlockTime(**{f.name: np.concatenate([_column(getattr(c.time, f.name), nbk) for c in costs])
                        for f in dataclasses.fields(BlockTime) if f.name != "gemms"}, gemms=())
    causes = list(dict.fromkeys(cc.cause for c in costs for cc in c.comm))
    comm = []
    for cause in causes:
        parts = [[cc for cc in c.comm if cc.cause == cause] for c in costs]
        comm.append(CommCost(cause, np.concatenate([_column(p[0].total if p else 0.0, nbk) for p in parts]),
                             np.concatenate([_column(p[0].exposed if p else 0.0, nbk) for p in parts])))
    layer = LayerTimes(**{f.name: np.concatenate([_column(getattr(c.layer, f.name), nbk) for c in costs])
                          for f in dataclasses.fields(LayerTimes)})
    kept = np.concatenate([_column(c.wgrad_kept, nbk) for c in costs])
    return BlockCost(name, 1, time, tuple(comm), layer, kept)


def _rows_of(whole: BlockCost, orders: tuple, idx: np.ndarray, nbp: int) -> BlockCost:
    """A wider context's stack (:func:`_side_by_side` over its ``nbp`` block keys; ``orders``: each
    variant's causes of communication there, in order) at its block keys ``idx``: what stacking
    this context's own block costs gives, which read the wider context's at ``idx`` and keep the
    causes that move something on these keys (compose._own_causes), in the same order."""
    nc = len(idx)
    rows = (np.arange(len(orders))[:, None] * nbp + idx[None, :]).reshape(-1)
    got = at(dataclasses.replace(whole, comm=()), rows)
    by_cause = {c.cause: (np.asarray(c.total)[rows], np.asarray(c.exposed)[rows]) for c in whole.comm}
    kept = [[c for c in order if np.any(by_cause[c][0][j * nc:(j + 1) * nc])] for j, order in enumerate(orders)]
    comm = []
    for cause in dict.fromkeys(c for k in kept for c in k):
        total, exposed = by_cause[cause]  # fresh arrays (fancy indexing copies)
        for j, k in enumerate(kept):
            if cause not in k:  # this variant's cost has no such cause here: zeros, as stacked
                total[j * nc:(j + 1) * nc] = 0.0
                exposed[j * nc:(j + 1) * nc] = 0.0
        comm.append(CommCost(cause, total, exposed))
    return dataclasses.replace(got, comm=tuple(comm))
