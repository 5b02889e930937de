"""The memory timeline of one pipeline rank over one training step, event by event.

The same quantities as :func:`planner.cost.memory.stage_memory` (chunk memories, constant memory,
communication buffers), walked op by op and layer by layer through the rank's schedule and the
optimizer step, so `explain --plot` can draw the step and name the moment of the peak. Its maximum
equals the stage's peak by construction (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.memory import chunk_memories, comm_buffers, held_function, optimizer_transient, _vocab_div
from planner.cost.constant import constant_memory
from planner.cost import activations as act
from planner.cost.schedule import rank_ops


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
    deg = setup.deg
    sh = act.shape_of(setup)
    rc = setup.recompute
    full_layers = rc.layers if rc.kind == "full" else None
    if setup.plan.stage_recompute_layers is not None and rc.kind == "full":
        full_layers = setup.plan.stage_recompute_layers[rank]
    chunks = chunk_memories(setup.model, setup.layout, rank, sh, rc, setup.precision == "fp8", _vocab_div(setup), full_layers)
    cm = constant_memory(setup, rank)
    const = cm.total
    comm = comm_buffers(setup) + cm.fsdp_buffers
    held = held_function(setup, [c.kept for c in chunks])
    counts = [0] * len(chunks)
    events: list[Event] = []

    def add(phase, chunk, mb, layer, acts, trans):
        events.append(Event(len(events), phase, chunk, mb, layer, const, comm, acts, trans))

    for op in rank_ops(deg.pp, deg.vpp, setup.micro_batches, rank):
        ch = chunks[op.chunk]
        base = held(counts)
        if op.kind == "F":
            run = 0.0
            for l in ch.layers:
                run += l.kept
                add("forward", op.chunk, op.microbatch, l.name, base + run, l.fwd_transient)
            counts[op.chunk] += 1
        else:
            freed = 0.0
            for l in reversed(ch.layers):
                add("backward", op.chunk, op.microbatch, l.name, base - freed, l.bwd_transient)
                freed += l.kept
            counts[op.chunk] -= 1
    add("optimizer", None, None, None, 0.0, optimizer_transient(setup, constant_memory(setup, rank)))
    return events
