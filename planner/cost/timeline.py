"""The memory timeline of one pipeline rank over one training step, event by event.

The same quantities as :func:`planner.cost.memory.stage_memory` (chunk memories, constant memory,
communication buffers, from the one composition), walked op by op and layer by layer through the rank's schedule and the
optimizer step, so `explain --plot` can draw the step and name the moment of the peak. Its maximum
equals the stage's peak by construction (a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass

from planner.cost.arrays import Num
from planner.cost.compose import costs_of
from planner.cost.memory import stage_memory
from planner.cost.pieces import held_of, pair_steps
from planner.cost.schedule import Op, rank_ops
from planner.cost.schedules.inflight import held_before, paired_forwards


@dataclass(frozen=True)
class Event:
    index: int
    phase: str  # "forward", "backward", "optimizer"
    chunk: int | None
    microbatch: int | None
    layer: str | None
    constant: float
    comm_buffers: float
    activations: float
    transient: float

    @property
    def total(self) -> float:
        return self.constant + self.comm_buffers + self.activations + self.transient


def stage_timeline(setup, rank: int) -> list[Event]:
    """Every layer's forward and backward of ``rank`` in schedule order, then the optimizer step."""
    stage = stage_memory(setup, rank)
    chunks = stage.chunks
    const, comm = float(stage.constant.total), stage.comm_buffers  # one plan: scalars
    kept = [c.kept for c in chunks]
    costs = costs_of(setup)
    walked = costs.schedule_columns()
    sched = walked[0][0] if walked else None
    if sched is None:
        ops: Sequence[tuple[Op, Any]] = [(op, None) for op in rank_ops(setup.deg.pp, setup.deg.vpp, setup.micro_batches, rank)]
    else:  # the walked schedule's own order and held vectors (planner.cost.schedules.inflight)
        ops = held_before(sched, setup.deg.pp, setup.deg.vpp, setup.micro_batches, rank)
        if sched.splits_backward:
            kept += [float(x) for x in costs.wgrad_kept(rank)[:, 0]]
    held = held_of(kept, setup.plan.offload.activations)
    counts = [0] * len(chunks)
    events: list[Event] = []

    def add(phase, chunk, mb, layer, acts, trans):
        events.append(Event(len(events), phase, chunk, mb, layer, const, comm, acts, trans))

    # The combined 1F1B's overlapped steps: a paired forward's index -> its backward's chunk
    pairs = {} if sched is None or sched.order != "combined" else {
        int(k): int(ops[k + 1][0].chunk) for k in paired_forwards(sched, setup.deg.pp, setup.deg.vpp,
                                                                  setup.micro_batches, rank)}
    for i, (op, vec) in enumerate(ops):
        if op.kind == "W" or i - 1 in pairs:
            continue  # W adds nothing (inflight.py), its release is in the next vector; a pair's B ran with its F
        ch = chunks[op.chunk]
        base = held(counts if vec is None else list(vec))
        if i in pairs:
            # forward piece j beside backward piece L-1-j (planner.cost.pieces.pair_steps)
            added: Num = 0.0
            released: Num = 0.0
            for fl, bl in pair_steps(ch, chunks[pairs[i]]):
                stored = added - released + (fl.kept if fl else 0.0)
                add("forward", op.chunk, op.microbatch, (fl or bl).name, base + stored,
                    (fl.fwd_transient if fl else 0.0) + (bl.bwd_transient if bl else 0.0))
                added += fl.kept if fl else 0.0
                released += bl.kept if bl else 0.0
            counts[op.chunk] += 1
            counts[pairs[i]] -= 1
            continue
        if op.kind == "F":
            run: Num = 0.0
            for layer in ch.layers:
                run += layer.kept
                add("forward", op.chunk, op.microbatch, layer.name, base + run, layer.fwd_transient)
            counts[op.chunk] += 1
        else:
            freed: Num = 0.0
            for layer in reversed(ch.layers):
                add("backward", op.chunk, op.microbatch, layer.name, base - freed, layer.bwd_transient)
                freed += layer.kept
            counts[op.chunk] -= 1
    add("optimizer", None, None, None, 0.0, stage.optimizer_transient)
    return events
