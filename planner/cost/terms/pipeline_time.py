"""Time, part two: the forward/backward phase: the schedule's closed form over the ranks' times (with
the activation offload's extra seconds on the rank that streams), or the schedule walk where the
closed forms do not cover the schedule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.arrays import Num
from planner.cost.pipeline import pipeline_time
from planner.cost.terms.base import _column
from planner.cost.terms.blocks import p2p_overlaps
from planner.cost.terms.inflight_memory import InflightMemory
from planner.cost.walked import walk_plans


@dataclass(frozen=True)
class ActOffload:
    """Activation offload of the slowest rank (the one that streams its activations)."""

    rank: np.ndarray
    """The rank whose layers' activations move over the host link (first of the slowest)."""
    bytes_per_microbatch: np.ndarray
    extra_s: np.ndarray
    """Seconds each micro-batch of that rank gains when the copies outlast its compute."""
    fwd_s: np.ndarray
    """That rank's forward seconds per micro-batch (the copy-out window)."""


class PipelineTime(InflightMemory):
    """The pipeline phase (reads the chunks' memory for what activation offload moves)."""

    def activation_offload(self) -> ActOffload | None:
        """With activation offload, the slowest rank (the first of equals) streams its layers'
        activations over the host link behind its forward (copy out) and backward (copy in)."""
        if not self.lv.offload_activations:
            return None
        return self._memo("act_offload", self._compute_levers(), fn=self._act_offload)

    def _act_offload(self) -> ActOffload:
        ctx, b, n = self.ctx, self.batch, self.n
        ranks, times = self.ranks(), self.rank_times()
        slow = times[0]
        worst = np.zeros(n, dtype=np.int64)
        for r in range(1, b.pp):
            if ranks[r] is ranks[r - 1]:
                continue  # equal to the rank before: never the first slowest
            worst = np.where(times[r] > slow, r, worst)
            slow = np.maximum(slow, times[r])
        # (np.choose takes at most 64 choices; pipelines run deeper)
        pick = lambda vals: np.stack([_column(v, n) for v in vals])[worst, np.arange(n)]  # noqa: E731
        fwd, bwd = pick([rc.fwd for rc in ranks]), pick([rc.bwd for rc in ranks])
        # What the memory model keeps of one micro-batch on the rank (every chunk's kept bytes,
        # under the plan's recompute and precision) is what offload moves out and back. Under
        # layer-level offload (Assumptions.offload_layers) the chunk's device bytes leave out what
        # waits on the host: both are counted, as before that offload was modeled (only the host
        # part moves; streaming only it makes the four Llama 3 70B FSDP runs 7-14 points faster
        # than measured: a time-model question of its own).
        nbytes = pick([sum(_column(c.kept + c.host_kept, n) for c in self.chunks(r)) for r in range(b.pp)])
        host = ctx.rates.host_bw
        extra = np.maximum(0.0, nbytes / host - fwd) + np.maximum(0.0, nbytes / host - bwd)
        return ActOffload(worst, nbytes, extra, fwd)

    def step_rank_times(self) -> list[Num]:
        """Rank times with the activation offload's extra seconds on the rank that streams."""
        times = self.rank_times()
        off = self.activation_offload()
        if off is None:
            return times
        return [t + np.where(off.rank == r, off.extra_s, 0.0) for r, t in enumerate(times)]

    def pipeline_s(self) -> np.ndarray:
        """The forward/backward phase: the schedule over the ranks' per-micro-batch times, plus the
        fill and drain passing each boundary once more with latency on the path (plain 1F1B
        already has its exposed p2p inside every rank time; interleaved hides it in the steady
        state but not while the first micro-batch travels down and the last one back up)."""
        return self._memo("pipeline", self._compute_levers(), self.lv.offload_activations, fn=self._pipeline)

    def _pipeline(self) -> np.ndarray:
        b = self.batch
        pipe = pipeline_time(self.step_rank_times(), b.micro_batches, b.vpp)
        if p2p_overlaps(b.vpp, self.ctx.assumptions):
            pipe = pipe + 2 * (b.pp - 1) * self.ranks()[0].p2p_total / (2 * b.vpp)
        walked = self.walked()
        if not walked:
            return _column(pipe, self.n)
        pipe = np.array(_column(pipe, self.n), dtype=float)
        off = self.activation_offload()
        for w in walked:
            pipe[w.cols] = w.result.step
            if off is not None:
                # The walk's items do not hold the offload copies: the streaming rank's extra seconds
                # per micro-batch, as the closed form above adds them to that rank's time.
                pipe[w.cols] += _column(b.micro_batches, self.n)[w.cols] * _column(off.extra_s, self.n)[w.cols]
        return pipe

    def walked(self) -> list:
        """The plans whose forward/backward phase comes from the schedule walk, with its result
        (:func:`planner.cost.walked.walk_plans`; empty when the closed forms cover every plan)."""
        return self._memo("walked", self._compute_levers(), fn=lambda: walk_plans(self))
