"""Time, part three: the step: the pipeline phase, the exposed data-parallel sync of the rank that
gates it, and the slowest rank's optimizer step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.constant import embedding_head_params
from planner.cost.pipeline import GATHER_BYTES, data_parallel, dp_exposure, fsdp_gathers, optimizer_shard, optimizer_step_time, param_tensors, sync_kind
from planner.cost.terms.base import _column
from planner.cost.terms.pipeline_time import PipelineTime


@dataclass(frozen=True)
class DataParallel:
    """One step's data-parallel sync of the gating rank (arrays over the batch's plans): gradient
    reduce-scatter (or all-reduce), parameter all-gather, FSDP traffic, each total and exposed."""

    grad: np.ndarray
    grad_exposed: np.ndarray
    param: np.ndarray
    param_exposed: np.ndarray
    fsdp: np.ndarray
    fsdp_exposed: np.ndarray

    @property
    def exposed(self) -> np.ndarray:
        return self.grad_exposed + self.param_exposed + self.fsdp_exposed


@dataclass(frozen=True)
class OptimizerStep:
    seconds: np.ndarray
    """The slowest rank's optimizer step (on the GPU, or on the host with optimizer offload)."""
    shard_params: np.ndarray
    """Parameters whose optimizer state the slowest rank's GPU updates."""


class StepTime(PipelineTime):
    """Seconds per optimizer step."""

    def data_parallel(self) -> DataParallel:
        """The exposed data-parallel gradient sync and parameter gather (or FSDP traffic) of the
        rank whose sync exposes the most; each rank hides its sync behind its own compute."""
        kind, fsdp = sync_kind(self.lv.sharding, fsdp2=self.ctx.assumptions.torchtitan)
        return self._memo("dp", self._compute_levers(), kind, fsdp, fsdp_gathers(self.lv.sharding), self.lv.grad_reduce,
                          self.lv.param_gather, fn=lambda: self._data_parallel(kind, fsdp))

    def _data_parallel(self, kind: str, fsdp: bool) -> DataParallel:
        ctx, b, n = self.ctx, self.batch, self.n
        best, seen = None, set()
        for r, rc in enumerate(self.ranks()):
            sig = (id(rc), self._param_signature(r))  # ranks with equal blocks and parameters sync alike
            if sig in seen:
                continue
            seen.add(sig)
            grad, param = self._memo("dp_volume", self._param_signature(r), kind, len(b.variants), self.lv.grad_reduce,
                                     self.lv.param_gather, fn=lambda r=r: tuple(self._tile(x) for x in self._dp_volume(r, kind)))
            cur = DataParallel(*(_column(x, n) for x in dp_exposure(
                grad, param, fsdp, b.micro_batches, rc.fwd, rc.bwd, ctx.rates, ctx.assumptions.dp_overlap,
                fsdp_gathers(self.lv.sharding))))
            best = cur if best is None else _gating(best, cur)
        assert best is not None  # pp >= 1 ranks
        return best

    def _dp_volume(self, r: int, kind: str) -> tuple:
        """(gradient, parameter-gather) seconds of rank ``r``'s sync per key, in the plan's
        gradient and parameter-gather dtypes (FP8 gathers leave the embedding and head in bf16)."""
        lv, b = self.lv, self.batch
        low = lv.param_gather != "bf16"
        bf16_dense = embedding_head_params(self.ctx.model, b.layout, r, self.key_deg().tp) if low else 0.0
        return data_parallel(*self.rank_params(r), self._key_spans(), kind, self.ctx.rates,
                             GATHER_BYTES[lv.param_gather], lv.grad_bytes, bf16_dense)

    def _param_signature(self, r: int) -> tuple:
        """What a rank's parameters depend on: the kinds of its chunks' pieces, in order."""
        b = self.batch
        return self._memo("param_sig", r, fn=lambda: tuple(
            (st.embedding, tuple(self.ctx.model.layer_kinds[i] for i in st.layers), st.mtp, st.loss, r == b.pp - 1)
            for st in b.layout.rank_stages(r)))

    def optimizer(self) -> OptimizerStep:
        lv = self.lv
        step = self._memo("opt", lv.sharding, lv.moments, lv.offload_optimizer, fn=self._optimizer)
        return step if len(self.batch.variants) == 1 else OptimizerStep(self._tile(step.seconds),
                                                                        self._tile(step.shard_params))

    def _optimizer(self) -> OptimizerStep:
        """The slowest rank's optimizer step, per key."""
        ctx, b, lv = self.ctx, self.batch, self.lv
        n = b.n_keys
        d = self.key_deg()
        override = optimizer_override(ctx.efficiency)
        steps = []
        for r in range(b.pp):
            dense, expert = self.rank_params(r)
            copies = 2 if b.layout.placement == "dual" else 1  # DualPipe's two holders: _constant
            sp = optimizer_shard(lv.sharding, dense, expert, copies * d.dp, d.cp, copies * d.edp)
            tensors = (param_tensors(ctx.model, b.layout.rank_stages(r), d.ep) if ctx.rates.torch_optimizer else 0.0)
            t = _column(optimizer_step_time(sp, dense + expert, lv.moments, lv.offload_optimizer, ctx.rates, override,
                                            tensors), n)
            steps.append((t, _column(sp, n)))
        secs, shard = steps[0]
        for t, sp in steps[1:]:  # the slowest rank's step, and its shard
            later = t > secs
            secs, shard = np.where(later, t, secs), np.where(later, sp, shard)
        return OptimizerStep(secs, shard)

    def step_s(self) -> np.ndarray:
        """Seconds per optimizer step: pipeline phase, exposed data-parallel sync, optimizer."""
        return self.pipeline_s() + self.data_parallel().exposed + self.optimizer().seconds


def _gating(best: DataParallel, cur: DataParallel) -> DataParallel:
    """The rank whose sync gates the step: most exposed gradient and parameter traffic (a later
    rank wins ties), and apart from it the most exposed FSDP traffic."""
    dp = cur.grad_exposed + cur.param_exposed >= best.grad_exposed + best.param_exposed
    fs = cur.fsdp_exposed >= best.fsdp_exposed
    pick = lambda take, f: np.where(take, getattr(cur, f), getattr(best, f))  # noqa: E731
    return DataParallel(pick(dp, "grad"), pick(dp, "grad_exposed"), pick(dp, "param"), pick(dp, "param_exposed"),
                        pick(fs, "fsdp"), pick(fs, "fsdp_exposed"))


def optimizer_override(efficiency) -> float | None:
    """Bytes per parameter of the optimizer step where the generation profile measured it."""
    c = efficiency.compute
    return c.optimizer_bytes_per_param.value if c is not None and c.optimizer_bytes_per_param else None
