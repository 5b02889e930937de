"""The durations a schedule's time walk reads: each chunk's layers, split where an overlapped
schedule interleaves them, and the pipeline send/receive.

A layer is cut the way Megatron-Core's combined 1F1B cuts a transformer layer
(TransformerLayerSchedulePlan: "pre-dispatch computation" = attention, layer norms and router;
dispatch all-to-all; "mlp" = the experts; combine all-to-all) and the way the DeepSeek-V3 report
(sec. 3.2.1) cuts a DualPipe chunk (attention, all-to-all dispatch, MLP, all-to-all combine; the
backward's attention and MLP further split into input and weight gradients). Compute runs on the
rank's compute stream, the all-to-alls on its communication stream (Megatron's comm_stream;
DeepSeek's dedicated communication SMs), the pipeline send/receive on a stream per peer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from planner.cost.arrays import Num

if TYPE_CHECKING:
    from planner.cost.schedules.graph import Lin

Seconds = Union[Num, "Lin"]
"""A duration: seconds (a number, or one per plan of a batch) or, while
:mod:`~planner.cost.schedules.batch` builds a graph with the walk's builder, the
:class:`~planner.cost.schedules.graph.Lin` standing for them."""


def seconds(d: Seconds) -> float:
    """``d`` as the one-plan walk times it: a number (arrays over plans and symbolic durations are
    :mod:`~planner.cost.schedules.batch`'s to evaluate, by longest paths)."""
    if isinstance(d, (int, float)):  # numpy's float64 is a float
        return d
    raise TypeError(f"the time walk takes a number of seconds, not {type(d).__name__}")


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one layer (or any piece of a chunk: embedding, head) for one micro-batch."""

    attn_f: Seconds = 0.0
    """Attention, norms and router forward (Megatron's pre_dispatch_computation)."""
    attn_b: Seconds = 0.0
    """Its input gradient."""
    attn_w: Seconds = 0.0
    """Its weight gradient."""
    mlp_f: Seconds = 0.0
    """Experts (or the dense MLP) forward."""
    mlp_b: Seconds = 0.0
    mlp_w: Seconds = 0.0
    dispatch_f: Seconds = 0.0
    """EP all-to-all seconds (communication stream): forward dispatch and combine, and the
    backward's two (the gradient of the combine is a dispatch, and the reverse)."""
    combine_f: Seconds = 0.0
    dispatch_b: Seconds = 0.0
    combine_b: Seconds = 0.0

    @property
    def f(self) -> Seconds:
        return self.attn_f + self.mlp_f

    @property
    def i(self) -> Seconds:
        return self.attn_b + self.mlp_b

    @property
    def w(self) -> Seconds:
        return self.attn_w + self.mlp_w

    @property
    def a2a(self) -> Seconds:
        return self.dispatch_f + self.combine_f + self.dispatch_b + self.combine_b


def compute_chunk(f: float, i: float, w: float = 0.0) -> tuple[LayerTimes, ...]:
    """A chunk of compute only: forward ``f``, input gradient ``i``, weight gradient ``w`` (its full
    backward is i + w)."""
    return (LayerTimes(attn_f=f, attn_b=i, attn_w=w),)


def moe_chunk(layers: int, attn: tuple[float, float, float], mlp: tuple[float, float, float],
              a2a: float) -> tuple[LayerTimes, ...]:
    """``layers`` identical MoE layers: attention and expert (forward, input grad, weight grad)
    seconds and one all-to-all's seconds (each of the four per layer)."""
    one = LayerTimes(*attn, *mlp, a2a, a2a, a2a, a2a)
    return (one,) * layers


@dataclass(frozen=True)
class StepTimes:
    """Everything the walk needs besides the op order."""

    chunks: tuple[tuple[tuple[LayerTimes, ...], ...], ...]
    """``chunks[rank][chunk]``: the chunk's layers in forward order."""
    p2p: Seconds = 0.0
    """Seconds of one activation (or gradient) send between neighbouring ranks."""
    p2p_overlap: bool = True
    """True: sends run on their own stream (Megatron's overlap_p2p_comm, torch's async p2p) and
    only delay the receiver; False: a blocking send holds the sender's compute stream too
    (Megatron's non-interleaved 1F1B)."""
    delay_wgrad: bool = False
    """Megatron's --delay-wgrad-compute: inside an overlapped pair, the experts' weight gradient
    runs after the backward dispatch is issued (and the attention's after the layer), so the
    dispatch waits only for the input gradient."""
    join_items: bool = True
    """Each item's compute stream waits for the item's communication before the next item starts
    (Megatron-Core's combined 1F1B ends every model-chunk step with ``wait_current_stream`` on the
    events its nodes recorded; a lone op's all-to-all is then as exposed as on the compute stream).
    False lets the next item's compute start under the previous one's last all-to-all."""
    pair_overlap: bool = True
    """False: an overlapped pair runs its forward, then its backward (torch.distributed.pipelining's
    eager runtime runs OVERLAP_F_B's sub-actions one after the other unless a custom function is
    registered for it)."""

    @classmethod
    def uniform(cls, p: int, chunks: int, layers: tuple[LayerTimes, ...], **kw) -> StepTimes:
        """Every chunk of every rank alike."""
        return cls(tuple(tuple(layers for _ in range(chunks)) for _ in range(p)), **kw)

    @classmethod
    def per_rank(cls, fs, bs, ws=None, chunks: int = 1, **kw) -> StepTimes:
        """Compute-only ranks: rank r's chunks each take fs[r], bs[r] (input gradient), ws[r]."""
        ws = ws or [0.0] * len(fs)
        return cls(tuple(tuple(compute_chunk(f, b, w) for _ in range(chunks)) for f, b, w in zip(fs, bs, ws)), **kw)
