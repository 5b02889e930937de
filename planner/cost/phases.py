"""A block's pieces as the pipeline-schedule walk cuts them (planner.cost.schedules.timing).

The walk cuts a layer as Megatron-Core's combined 1F1B cuts a transformer layer
(TransformerLayerSchedulePlan: attention, norms and router before the dispatch; the experts; the
combine after) and as the DeepSeek-V3 report (sec. 3.2.1) cuts a DualPipe chunk, the backward of
each part split into its input gradient and its weight gradient (the zero-bubble paper's B and W).
The kernel times of :mod:`planner.cost.compute` are summed per part: every GEMM's weight gradient
to W, its data gradient, attention and memory-bound backward (and the recomputed forward, which
runs before the input gradient) to I. The host-bound waits of a pass (``BlockTime.host_*``) go to
the attention side, so each part's seconds add up to the block's forward and backward exactly.

Communication: the exposed TP, CP and expert-TP seconds of the block's closed form stay inside the
compute they wait on (TP/CP with the attention part, expert TP with the experts), split between
forward and backward in proportion to the part's compute; the EP all-to-all is the walk's own
(its total seconds on the communication stream), one dispatch and one combine each way, the
backward's first transfer (the combine's gradient, sent to the experts like a dispatch) with the
dispatch's seconds and its second with the combine's (DeepSeek-V3 sec. 3.3: FP8 towards the
experts, BF16 back).
"""

from __future__ import annotations

import numpy as np

from planner.cost.arrays import Num, any_true

from planner.cost.compute import BlockTime, KernelTime, recompute_share
from planner.cost.flops import BF16, FP8, Gemm
from planner.cost.schedules.timing import LayerTimes

EXPERT_MODULES = ("moe", "moe_act", "shared_experts", "mlp")
"""Megatron modules whose kernels run between the dispatch and the combine (the dense MLP too,
for a layer without experts)."""
ROUTER_KERNELS = ("router", "router_topk")
"""Kernels of the 'moe' module that run before the dispatch (the router)."""


def _side(kt: KernelTime) -> int:
    k = kt.kernel
    return 1 if k.module in EXPERT_MODULES and k.name not in ROUTER_KERNELS else 0


def block_layer(kts: tuple[KernelTime, ...], bt: BlockTime, comm, recompute, ep_parts=None) -> LayerTimes:
    """The walk's pieces of one block for one micro-batch (arrays over block keys allowed):
    ``comm`` its CommCosts, ``recompute`` what its compute recomputes, ``ep_parts`` one
    dispatch's and one combine's seconds (None without expert parallelism)."""
    f: list[Num] = [0.0, 0.0]
    i: list[Num] = [0.0, 0.0]
    w: list[Num] = [0.0, 0.0]
    for kt in kts:
        s = _side(kt)
        f[s] = f[s] + kt.fwd
        i[s] = i[s] + kt.dgrad
        if kt.wgrad is not None:
            w[s] = w[s] + kt.wgrad
        share = recompute_share(kt.kernel, recompute)
        if any_true(share):
            i[s] = i[s] + share * kt.fwd
    f[0] = f[0] + (bt.fwd - f[0] - f[1])
    i[0] = i[0] + (bt.bwd - i[0] - i[1] - w[0] - w[1])
    a2a = (0.0, 0.0, 0.0, 0.0)
    for c in comm:
        if c.cause == "ep":
            a2a = _ep_pieces(c.total, ep_parts)
            continue
        s = 1 if c.cause == "etp" else 0
        whole = f[s] + i[s] + w[s]
        share = f[s] / whole if not _zero(whole) else 0.5
        f[s] = f[s] + c.exposed * share
        i[s] = i[s] + c.exposed * (1 - share)
    return LayerTimes(f[0], i[0], w[0], f[1], i[1], w[1], *a2a)


def wgrad_bytes(kts: tuple[KernelTime, ...], fp8: bool) -> float:
    """Bytes a weight-gradient pass needs of one micro-batch once its input gradient is done: each
    weight GEMM's input and the gradient of its output (Qi et al. 2023, Table 1), the input in FP8
    where the GEMM runs in FP8 (Transformer Engine saves the FP8 copy), the gradient in BF16. GEMMs
    without a weight (attention's batched products) leave nothing for W."""
    total = 0.0
    for kt in kts:
        g = kt.kernel
        if isinstance(g, Gemm) and kt.wgrad is not None:
            total = total + g.count * g.m * (g.k * (FP8 if fp8 and g.fp8 else BF16) + g.n * BF16)
    return total


def _zero(x) -> bool:
    return bool(np.all(np.asarray(x) == 0))


def _ep_pieces(total, ep_parts):
    """(dispatch_f, combine_f, dispatch_b, combine_b) from the block's EP seconds: the forward's
    dispatch and combine, the backward the rest (twice with the MoE recomputed), split alike."""
    disp, comb = ep_parts
    once = disp + comb
    safe = np.where(np.asarray(once) > 0, once, 1.0)
    share = np.where(np.asarray(once) > 0, disp / safe, 0.5)
    fwd = np.minimum(once, total)
    bwd = total - fwd
    return share * fwd, (1 - share) * fwd, (1 - share) * bwd, share * bwd
