"""Memory, part one: what a GPU holds whatever the schedule does: weights, gradients and optimizer
states (per rank and per block), communication buffers, and the optimizer step's temporaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dataclasses

import numpy as np

from planner.cost.arrays import Num
from planner.cost.constant import ConstantMemory, RankParams, block_params, constant_bytes, embedding_head_params
from planner.cost.pieces import attention_score_bytes, comm_bytes, comm_lines, optimizer_transient_of, span_crossings
from planner.cost.terms.base import TermsBase, _column

if TYPE_CHECKING:
    from planner.cost.compose import Levers


class StaticMemory(TermsBase):
    """Constant memory and buffers of one GPU of each rank."""

    def block_constant(self, name: str) -> Num:
        """Bytes of weights, gradients and optimizer state of one block of ``name`` (a decoder
        layer kind, 'embedding', 'head', 'mtp') on one GPU under the plan's sharding levers."""
        d = self.batch.deg
        dense, expert = block_params(self.ctx.model, name, d.tp, d.ep, d.etp)
        return self.dense_constant(dense, expert)

    def dense_constant(self, dense, expert=0.0) -> Num:
        """Constant bytes of ``dense`` and ``expert`` parameters per GPU under the plan's levers."""
        d, lv = self.batch.deg, self.lv
        cm = constant_bytes(RankParams(dense, expert, 0.0), dp=d.dp, cp=d.cp, edp=d.edp, sharding=lv.sharding,
                            moments=lv.moments, offload_optimizer=lv.offload_optimizer, grad_bytes=lv.grad_bytes)
        return cm.total

    def constant(self, r: int) -> ConstantMemory:
        """Weights, gradients and optimizer states of one GPU of rank ``r``."""
        lv = self.lv
        per_key = self._memo("constant", r, lv.sharding, lv.moments, lv.offload_optimizer, lv.grad_reduce,
                             lv.param_gather, fn=lambda: self._constant(r))
        if len(self.batch.variants) == 1:
            return per_key
        return self._memo("constant_tiled", r, lv.sharding, lv.moments, lv.offload_optimizer, lv.grad_reduce,
                          lv.param_gather, len(self.batch.variants),
                          fn=lambda: ConstantMemory(*(self._tile(getattr(per_key, f.name))
                                                      for f in dataclasses.fields(ConstantMemory))))

    def _constant(self, r: int) -> ConstantMemory:
        d = self.key_deg()
        rp = self._rank_params(r)
        # DualPipe: rank r holds stages r and pp-1-r, so every stage's parameters sit on two ranks
        # of the pipeline (two copies, deepseek-ai/DualPipe example_dualpipe.py: full_modules[r] and
        # full_modules[pp-1-r]); their gradients are summed across the two holders, so the
        # sharded states are sharded over both holders' data-parallel groups (2 DP replicas).
        copies = 2 if self.batch.layout.placement == "dual" else 1
        return constant_bytes(rp, dp=copies * d.dp, cp=d.cp, edp=copies * d.edp, sharding=self.lv.sharding,
                              moments=self.lv.moments, offload_optimizer=self.lv.offload_optimizer,
                              grad_bytes=self.lv.grad_bytes, fp4_weights=self.lv.param_gather == "fp4",
                              bf16_dense=(embedding_head_params(self.ctx.model, self.batch.layout, r, d.tp)
                                          if self.lv.param_gather == "fp4" else 0.0))

    def comm_buffers(self) -> np.ndarray:
        """NCCL communicators, dispatcher staging, p2p buffers and workspaces (every rank alike),
        and the local spec's persistent attention-score buffer."""
        return self._memo("comm", self._row("dispatcher"), fn=lambda: self._per_variant_by(("dispatcher",), self._comm_buffers))

    def _comm_buffers(self, lv: Levers) -> np.ndarray:
        ctx, b = self.ctx, self.batch
        keys = ctx.keys
        rows = b.key_rows
        crosses = span_crossings(self._key_spans())
        d = self.key_deg()
        mbs = keys.col["mbs"][rows]
        tokens = mbs * ctx.job.seq_len // d.cp
        sp = (d.tp > 1) & ctx.assumptions.sequence_parallel
        total = comm_bytes(ctx.model, ctx.efficiency.memory, d, crosses=crosses, dispatcher=lv.dispatcher,
                           tokens=tokens, sp=sp)
        return total + attention_score_bytes(ctx.model, ctx.assumptions.implementation, mbs, d.tp,
                                             ctx.job.seq_len // d.cp)

    def comm_lines(self) -> list:
        """:meth:`comm_buffers` line by line (planner.cost.pieces.comm_lines; the local spec's
        attention-score buffer is not among them), for the reports: the first variant's levers."""
        ctx, b = self.ctx, self.batch
        lv = b.variants[0]
        d = self.key_deg()
        mbs = ctx.keys.col["mbs"][b.key_rows]
        sp = (d.tp > 1) & ctx.assumptions.sequence_parallel
        return comm_lines(ctx.model, ctx.efficiency.memory, d, crosses=span_crossings(self._key_spans()),
                          dispatcher=lv.dispatcher, tokens=mbs * ctx.job.seq_len // d.cp, sp=sp)

    def attention_score_buffer(self) -> np.ndarray:
        """The local spec's persistent attention-score buffer (0 with Transformer Engine)."""
        ctx, b = self.ctx, self.batch
        d = self.key_deg()
        mbs = ctx.keys.col["mbs"][b.key_rows]
        return _column(attention_score_bytes(ctx.model, ctx.assumptions.implementation, mbs, d.tp,
                                             ctx.job.seq_len // d.cp), b.n_keys)

    def optimizer_transient(self, r: int) -> np.ndarray:
        """Optimizer-step temporaries of rank ``r``. With bf16 main gradients (grad_reduce=bf16) the
        distributed optimizer casts its gradient shard to fp32 for the step (DistributedOptimizer.
        _copy_model_grads_to_main_grads: ``shard_model_grad.float()``), 4 B per parameter it updates
        (its states are 12 B, or 8 B with bf16 moments, per parameter); with fp32 gradients the
        shard is a view of the buffer."""
        lv = self.lv
        key = (r, lv.sharding, lv.moments, lv.offload_optimizer, lv.grad_reduce, self._row("precision"))
        opt = self.constant(r).optimizer
        fp32_grads = 4.0 * opt / (4.0 + (4.0 if lv.moments == "bf16" else 8.0)) if lv.grad_reduce == "bf16" else 0.0
        return self._memo("opt_transient", *key, fn=lambda: self._per_variant(
            lambda v: optimizer_transient_of(self.ctx.hw, self.ctx.assumptions, v.moments, v.precision,
                                             np.asarray(opt)[: self.batch.n_keys] if np.ndim(opt) else opt))
            + fp32_grads)
