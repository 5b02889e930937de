"""What a pipeline rank runs, item by item: the op kinds and where each chunk sits in the pipeline.

Op kinds follow the action letters of torch.distributed.pipelining (``_ComputationType``):
``F`` forward, ``I`` input gradient (the zero-bubble paper's "B", torch's BACKWARD_INPUT),
``W`` weight gradient (BACKWARD_WEIGHT), ``B`` full backward (FULL_BACKWARD: I and W in one pass,
what Megatron-Core's schedules run). :class:`Pair` is torch's OVERLAP_F_B: a forward of one
micro-batch chunk and a backward of another issued together so that one's all-to-all hides under
the other's compute (DualPipe's ``_forward_backward_chunk``, Megatron-Core's combined 1F1B).

A rank's chunk ``c`` is one model chunk (virtual stage) it holds. :class:`Placement` says which
pipeline *route* (direction) and which *position* along it each (rank, chunk) is: micro-batches of a
route run its positions 0, 1, ... forward and back again in the backward. Megatron's (interleaved)
1F1B and zero-bubble H1 have one route of p*v positions, chunk c of rank r at c*p + r (the "loop"
placement); ZB-V, DualPipeV have one route of 2p positions in a V (rank r holds r and 2p-1-r,
torchtitan's "v" placement); DualPipe has two routes of p positions in opposite directions (rank r
holds stage r of route 0 and stage p-1-r of route 1: two copies of the parameters per PP group).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from planner.cost.schedule import Op

FORWARD, INPUT_GRAD, WEIGHT_GRAD, FULL_BACKWARD = "F", "I", "W", "B"
BACKWARDS = (INPUT_GRAD, FULL_BACKWARD)


@dataclass(frozen=True)
class Pair:
    """A forward and a backward issued as one overlapped item (torch's OVERLAP_F_B)."""

    fwd: Op
    bwd: Op

    @property
    def kind(self) -> str:
        return "F&B"


@dataclass(frozen=True)
class Post:
    """A pipeline send or receive queued for the next :class:`Commit` (DualPipe's
    ``comm.append_isend`` / ``append_irecv``): ``what`` is 'sendF' (the activations out of the
    chunk's forward of ``microbatch``), 'recvF' (the input of its forward), 'sendG' (the input
    gradient out of its backward) or 'recvG' (the gradient its backward needs). Posts whose peer is
    on the same rank or does not exist are no-ops, as in DualPipe."""

    what: str
    chunk: int
    microbatch: int


@dataclass(frozen=True)
class Commit:
    """``dist.batch_isend_irecv`` of the queued posts and a wait on every one of them (DualPipe's
    ``_commit_and_wait_comm`` before each chunk): NCCL point-to-point is a rendezvous, so a send
    completes only once its peer has posted the receive."""


def ops_of(item) -> tuple[Op, ...]:
    """The ops of one schedule item, in the order their memory effects are counted (a pair's
    forward first: its chunk is added before the backward's is released, an upper bound of the
    interleaved pair and exactly what the non-overlapped 1F1B step does); none for posts and
    commits."""
    if isinstance(item, Pair):
        return (item.fwd, item.bwd)
    return (item,) if isinstance(item, Op) else ()


@dataclass(frozen=True)
class Placement:
    """Where each chunk of each rank sits: ``route_pos[r][c] = (route, position)``."""

    route_pos: tuple[tuple[tuple[int, int], ...], ...]
    positions: tuple[int, ...]
    """Positions (stages) of each route."""
    microbatches: tuple[int, ...]
    """Micro-batches each route carries in one step."""

    @property
    def pp(self) -> int:
        return len(self.route_pos)

    def at(self, route: int, pos: int) -> tuple[int, int]:
        """(rank, chunk) holding position ``pos`` of ``route``."""
        return self._where[(route, pos)]

    @cached_property
    def _where(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {rp: (r, c) for r, chunks in enumerate(self.route_pos) for c, rp in enumerate(chunks)}

    def stages_held(self, rank: int) -> tuple[tuple[int, int], ...]:
        """(route, position) of each chunk of ``rank``."""
        return self.route_pos[rank]


def loop_placement(p: int, v: int, m: int) -> Placement:
    """Megatron's and torch's looped stages: chunk c of rank r is stage c*p + r."""
    return Placement(tuple(tuple((0, c * p + r) for c in range(v)) for r in range(p)), (p * v,), (m,))


def v_placement(p: int, m: int) -> Placement:
    """torchtitan's "v" stage-to-rank mapping (ZBVZeroBubble, DualPipeV): rank r holds stage r and
    stage 2p-1-r, so the last rank feeds its own second chunk."""
    return Placement(tuple(((0, r), (0, 2 * p - 1 - r)) for r in range(p)), (2 * p,), (m,))


def dual_placement(p: int, m: int) -> Placement:
    """DualPipe's two directions: rank r holds stage r of route 0 (micro-batches enter at rank 0)
    and stage p-1-r of route 1 (they enter at rank p-1); each route carries m/2 micro-batches
    (deepseek-ai/DualPipe example_dualpipe.py: modules full_modules[rank], full_modules[p-1-rank])."""
    return Placement(tuple(((0, r), (1, p - 1 - r)) for r in range(p)), (p, p), (m // 2, m // 2))
