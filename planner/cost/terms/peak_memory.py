"""Memory, part three: the allocated and reserved peaks of each rank (constant memory, buffers and
the larger of the activation peak and the optimizer step's temporaries; the allocator workload
model above it) and the host memory a GPU needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.cost.arrays import Num
from planner.cost.pieces import stranded_expert_bytes, workload_reserved
from planner.cost.terms.base import _column
from planner.cost.terms.inflight_memory import InflightMemory
from planner.cost.terms.static_memory import StaticMemory

if TYPE_CHECKING:
    from planner.cost.compose import Levers


class PeakMemory(StaticMemory, InflightMemory):
    """Peak and reserved bytes per rank, and host bytes."""

    def buffers(self, r: int) -> Num:
        """Buffers of rank ``r`` beside the constant memory: communication, FSDP and CUDA-graph pools."""
        return self.sync_buffers(r) + self.graph_pool(r)

    def sync_buffers(self, r: int) -> Num:
        """:meth:`buffers` less the CUDA-graph pools: communication and FSDP buffers (the search's
        tables keep the two apart, each over its own levers: planner.search.tables.GROUPS)."""
        return self.comm_buffers() + self.constant(r).fsdp_buffers

    def peak_bytes(self, r: int) -> np.ndarray:
        """Allocated peak of rank ``r``: constant memory, buffers, and the larger of the activation
        peak over the schedule and the optimizer step's temporaries."""
        const = self.constant(r)
        return (const.total + self.buffers(r)
                + np.maximum(self.activation_peak(r), self.optimizer_transient(r)))

    def reserved_bytes(self, r: int) -> np.ndarray:
        """Reserved peak of rank ``r``: with the default caching allocator where the profile
        measured it, the workload model (planner.cost.pieces.workload_reserved: phase peaks,
        stranded expert blocks, recompute); otherwise the allocated peak times one plus the
        allocator fraction."""
        ctx = self.ctx
        wl = ctx.allocator_workload
        if wl is None:
            return self.peak_bytes(r) * (1 + ctx.allocator_fraction)
        base, act_peak, stranded, recomputes = self._workload_inputs(r)
        return workload_reserved(wl, base + act_peak, self._optimizer_top(r, base, act_peak, stranded), act_peak,
                                 stranded, recomputes=recomputes, pipelined=self.batch.pp > 1,
                                 fixed_held=self._fixed_held())

    def _fixed_held(self) -> bool:
        """Whether the workload model's fixed small-pool bytes (``base_bytes``) are held: not under a
        full-iteration graph. Megatron's FullCudaGraphWrapper (megatron/core/full_cuda_graph.py, wrapped
        around forward_backward_func only in megatron/training/training.py train) captures the whole
        forward-backward, every micro-batch, as one torch.cuda.CUDAGraph with its own private pool;
        torch's graph capture empties the caching allocator's cache first (torch/cuda/graphs.py
        graph.__enter__: synchronize, empty_cache), so the blocks the eager warm-up steps cached
        are given back, and after it the general pool sees only the eager optimizer step while the
        one capture reuses its pool's blocks across layers and micro-batches as eager does. What
        stays reserved is the two pools' working sets, the activations (with the stranded expert
        blocks) and the step's temporaries side by side (_optimizer_top), each with its segments'
        partial use (peak_fraction), and no fixed holding on top. Measured (results/validation/
        gpu-memory.md, "Full-iteration graphs"): reserved 1.2-4.7 % above constant memory +
        activation peak + optimizer temporaries at allocated size, where the fixed term alone is
        5-6 % of it. Whole-layer graphs (many captures sharing a pool, Megatron's CudaGraphManager)
        keep it: measured 2.1-2.6 GiB above the same sum."""
        return self.lv.cuda_graphs.kind != "full_iteration"

    def _optimizer_top(self, r: int, base, act_peak, stranded=0.0):
        """What the allocator holds at the optimizer step. Graphs of whole layers allocate the
        forward-backward from their private pool (torch.cuda.graph(pool=...): its segments stay
        reserved for the replays and the caching allocator gives them to nothing else; Megatron
        captures the layers or the forward-backward, not the optimizer), so the step's temporaries
        and the per-expert blocks that eager activations partly reuse (``stranded``) take segments of
        their own on top; eager, they reuse the activations' freed segments. Measured
        (results/validation/gpu-memory.md, CUDA graphs): whole-layer graphs raise the reserved peak
        by 4.0-6.0 GiB on dense and 16-128-expert layers; partial scopes keep the eager rule."""
        if self.lv.cuda_graphs.layers_captured:
            return base + act_peak + stranded + self.optimizer_transient(r)
        return base + self.optimizer_transient(r)

    def _strands(self) -> bool:
        """Whether freed per-expert blocks strand (pieces.stranded_expert_bytes): not under a
        full-iteration graph. Eager, the local spec's weight-sized temporaries (the unfused weight
        gradients in the backward, torch AdamW's in the optimizer step) leave cached blocks that the
        next step's activation blocks cannot reuse. The one capture of the whole forward-backward
        (_fixed_held) starts from an emptied cache and reuses its own freed blocks in capture order, so
        the weight gradients' blocks serve the capture's later allocations; the optimizer's temporaries
        sit in the general pool beside the graph's, as _optimizer_top counts them. Derived after the
        fourth lease: the 256-expert full iteration +8.1 -> -2.7 %, the 16-expert ones +4.2 -> +1.1 % and
        +5.4 -> +2.0 %, the dense ones unchanged (nothing strands there); held out on a fifth lease,
        four MoE models of 8-256 experts: -2.4 to +3.3 % (results/validation/gpu-memory.md, "Fifth
        lease")."""
        return self.lv.cuda_graphs.kind != "full_iteration"

    def _workload_inputs(self, r: int):
        """What the allocator workload model reads of rank ``r`` (one place for reserved_bytes and
        reserved_terms): constant memory plus buffers, the activation peak, the stranded expert
        blocks and which plans recompute."""
        base = self.constant(r).total + self.buffers(r)
        act_peak = self.activation_peak(r)
        stranded = self._memo("stranded", r, self._row("precision"), self.lv.moments, fn=lambda: self._per_variant(
            lambda v: self._stranded(r, v))) if self._strands() else 0.0
        recomputes = np.array([v.recompute.kind != "none" for v in self.batch.variants]).repeat(self.batch.n_keys)
        return base, act_peak, stranded, recomputes

    def reserved_terms(self, r: int) -> dict[str, np.ndarray]:
        """What :meth:`reserved_bytes` adds above the allocated peak of rank ``r``, term by term
        (they sum to reserved minus allocated): with the workload model, 'stranded' (expert blocks
        the forward-backward peak cannot reuse, beyond the allocated peak), 'partial_segments'
        (the peak fraction), 'small_pool' (the fixed bytes), 'recompute' and 'pipeline' (shares of
        the activation peak) and 'graph_pool_hold' (the graphs' pool kept through the optimizer
        step, _optimizer_top); otherwise 'allocator_fraction' (a measured share of the peak)."""
        ctx = self.ctx
        wl = ctx.allocator_workload
        peak = self.peak_bytes(r)
        n = self.n
        if wl is None:
            # The graphs' pool hold (_optimizer_top) is not applied here: the search's memory tables
            # bound a plan by W + C + max(A, OT) and do not carry it, so on profiles without the
            # workload model (Blackwell) the exact check rejected the tables' edge plans and the
            # default search re-enumerated (6.8 -> 21 s CPU, 2026-12-05); measured only on Hopper.
            return {"allocator_fraction": _column(peak * ctx.allocator_fraction, n),
                    "graph_pool_hold": _column(0.0, n)}
        base, act_peak, stranded, recomputes = self._workload_inputs(r)
        eager_top = np.maximum(base + act_peak + stranded, base + self.optimizer_transient(r))
        top = np.maximum(eager_top, self._optimizer_top(r, base, act_peak, stranded))
        return {"stranded": _column(eager_top - peak, n),
                "graph_pool_hold": _column(top - eager_top, n),
                "partial_segments": _column(top * wl.peak_fraction.value, n),
                "small_pool": _column(wl.base_bytes.value if self._fixed_held() else 0.0, n),
                "recompute": _column(wl.recompute_fraction.value * recomputes * act_peak, n),
                "pipeline": _column(wl.pipeline_fraction.value * float(self.batch.pp > 1) * act_peak, n)}

    def _stranded(self, r: int, lv: Levers):
        """Stranded expert blocks of rank ``r`` (pieces.stranded_expert_bytes): on the local spec the
        torch AdamW temporary (when its foreach step runs: fp32 moments, no FP8) and the unfused
        weight gradient; none with Transformer Engine (fused Adam in place, fused accumulation)."""
        ctx, b = self.ctx, self.batch
        if ctx.assumptions.implementation != "megatron-local":
            return 0.0
        temps = (4.0, 2.0) if lv.moments != "bf16" and not lv.fp8 else (2.0,)
        d = self.key_deg()
        layers = sum(1 for st in b.layout.rank_stages(r) for i in st.layers if ctx.model.layer_kinds[i] == "moe")
        sp = self.ctx.keys.col["mbs"][b.key_rows] * ctx.job.seq_len // d.cp / d.tp
        workload = ctx.efficiency.memory.allocator_workload
        assert workload is not None  # every generation profile states it (hw_specs/efficiency)
        return stranded_expert_bytes(ctx.model, layers, d.ep, d.etp, sp, workload.stranding_ratio.value, temps)

    def host_bytes(self, r: int) -> np.ndarray:
        """Host memory one GPU of rank ``r`` needs: offloaded optimizer state, with activation
        offload the activations of the chunks in flight at the end of the warm-up, and with the
        MoE paged stash its pinned host buffer (Assumptions.paged_stash_host_factor x the peak
        stash, allocated beside the CUDA one: paged_stash.py allocate_stash_buffers)."""
        total = _column(self.constant(r).host_optimizer, self.n)
        if self.paged_stash():
            total = total + self.ctx.assumptions.paged_stash_host_factor * self.stash_peak(r)
        if self.lv.offload_activations:
            total = total + self.host_activation_bytes(r)
        return total
