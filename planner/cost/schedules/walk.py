"""The time walk: a discrete-event simulation of one step's forward/backward phase.

Every op of every rank becomes tasks on the rank's streams (compute, the all-to-all stream, one
send stream per peer); a stream runs its tasks in the order they were issued, as a CUDA stream
does, and a task starts when its stream is free and every task it depends on has finished:

- a forward of pipeline position s needs the forward of s-1 (its send, when s-1 is on another
  rank); a backward of s needs the backward of s+1 (the loss, at the last position: its own
  forward) and its own forward; a weight gradient needs its input gradient;
- inside an op, a layer's pieces follow each other (attention, dispatch, experts, combine; the
  backward in reverse); inside an overlapped pair the two micro-batches' pieces are issued in
  Megatron-Core's order (TransformerLayerSchedulePlan.run):
  ``comm: combine_b | dispatch_f -> dispatch_b | combine_f`` and
  ``comp: attn_f | mlp_b -> (mlp_w) -> mlp_f | attn_b -> (attn_w)``;
- an item (an op or an overlapped pair) starts where the rank's compute stream has reached it and
  once every input of its ops has arrived: each framework issues an item's kernels, on the
  communication stream too, after what the rank issued before it (Megatron-Core's
  ``ModelChunkSchedulePlan.run`` waits for both p2p receives, then records the compute stream's
  event that every layer node, all-to-alls included, waits on; DualPipe issues a chunk after
  ``_commit_and_wait_comm``; torch's eager runtime runs one action after another and a NCCL
  collective waits for the current stream at launch), so an item's inner timing does not depend
  on the pipeline around it (:func:`item_profile`; the coarse walk of
  :mod:`~planner.cost.schedules.batch` relies on this);
- a send between ranks either starts when its data exists (the orders of Megatron and torch:
  ideal asynchronous point-to-point, on the sender's stream to that peer, or holding the sender's
  compute stream when blocking), or, for schedules that post their own sends and receives
  (DualPipe's :class:`~planner.cost.schedules.ops.Post` and ``Commit``), once both sides have
  posted it (NCCL's rendezvous), the commit waiting for every op it posted.

Events are processed in time order (a heap of ready tasks by start time), so the walk knows when
each task ran; a step whose orders wait on each other forever is reported as a deadlock. Nothing
here is specific to a schedule: bubbles, exposed and hidden communication come out of the
simulation.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

from planner.cost.schedules.ops import Commit, Pair, Placement, Post
from planner.cost.schedules.timing import LayerTimes, Seconds, StepTimes, seconds

COMPUTE, A2A = "compute", "a2a"


class Tasks:
    """The task graph under construction: parallel lists, deps as task ids or output keys."""

    def __init__(self):
        self.rank: list[int] = []
        self.stream: list[str] = []
        self.dur: list[Seconds] = []
        self.deps: list[list] = []
        self.cause: list[str] = []
        self.op: list = []
        """The op a task is part of (None for sends and commit points)."""
        self.outputs: dict[tuple, list[int]] = {}
        self.last_compute: dict[int, int] = {}
        """Each rank's latest task on its compute stream (where the next item is issued)."""

    def add(self, rank: int, stream: str, dur: Seconds, deps, cause: str, op=None) -> int:
        self.rank.append(rank)
        self.stream.append(stream)
        self.dur.append(dur)
        self.deps.append(list(deps))
        self.cause.append(cause)
        self.op.append(op)
        t = len(self.dur) - 1
        if stream == COMPUTE:
            self.last_compute[rank] = t
        return t

    def issue_point(self, rank: int) -> list[int]:
        """What an item issued now on ``rank`` waits for besides its inputs: the rank's compute
        stream up to here (see the module docstring)."""
        t = self.last_compute.get(rank)
        return [] if t is None else [t]

    def resolved(self, t: int) -> list[int]:
        out: list[int] = []
        for d in self.deps[t]:
            if isinstance(d, int):
                out.append(d)
            elif d in self.outputs:
                out.extend(self.outputs[d])
            else:
                raise ValueError(f"task {t} ({self.cause[t]} on rank {self.rank[t]}) waits for {d}, which no op makes")
        return out


class Chain:
    """One micro-batch's pieces in sequence; zero-length communication is skipped."""

    def __init__(self, tasks: Tasks, rank: int, deps, op):
        self.tasks, self.rank, self.last, self.op = tasks, rank, list(deps), op
        self.any = False

    def run(self, stream: str, dur: Seconds, cause: str | None = None) -> None:
        if dur <= 0.0 and (stream != COMPUTE or self.any):
            return
        self.last = [self.tasks.add(self.rank, stream, dur, self.last, cause or self.op.kind, self.op)]
        self.any = True

    def side(self, dur: Seconds, cause: str) -> None:
        """Compute that follows the chain's last piece but that nothing later in the chain waits
        for (a weight gradient Megatron's --delay-wgrad-compute moves off the data path)."""
        if dur > 0.0:
            self.tasks.add(self.rank, COMPUTE, dur, self.last, cause, self.op)

    def close(self) -> list[int]:
        """The tasks that end the chain (a zero-length mark when every piece was empty)."""
        if not self.any:
            self.run(COMPUTE, 0.0)
        return self.last


def _forward_pieces(layers: tuple[LayerTimes, ...]) -> list[tuple[str, Seconds]]:
    segs: list[tuple[str, Seconds]] = []
    for lt in layers:
        segs += [(COMPUTE, lt.attn_f), (A2A, lt.dispatch_f), (COMPUTE, lt.mlp_f), (A2A, lt.combine_f)]
    return segs


def _backward_pieces(layers: tuple[LayerTimes, ...], kind: str) -> list[tuple[str, Seconds]]:
    """The backward of a chunk, last layer first: I (input gradient), B (input and weight
    gradients of each piece together) or W (weight gradients only)."""
    if kind == "W":
        return [(COMPUTE, sum(lt.w for lt in layers))]
    full = kind == "B"
    segs: list[tuple[str, Seconds]] = []
    for lt in reversed(layers):
        segs += [(A2A, lt.combine_b), (COMPUTE, lt.mlp_b + full * lt.mlp_w), (A2A, lt.dispatch_b),
                 (COMPUTE, lt.attn_b + full * lt.attn_w)]
    return segs


def _merged(segs: list[tuple[str, Seconds]]) -> list[tuple[str, Seconds]]:
    """Adjacent compute pieces as one task (the walk's result is the same, with fewer events)."""
    out: list[tuple[str, Seconds]] = []
    for stream, dur in segs:
        if stream != COMPUTE and dur <= 0.0:
            continue
        if out and stream == COMPUTE and out[-1][0] == COMPUTE:
            out[-1] = (COMPUTE, out[-1][1] + dur)
        else:
            out.append((stream, dur))
    return out


def op_inputs(place: Placement, rank: int, op) -> list[tuple]:
    """What an op on ``rank`` waits for, as output keys (see :class:`_Builder`)."""
    route, pos = place.route_pos[rank][op.chunk]
    if op.kind == "F":
        return [("F", route, pos - 1, op.microbatch)] if pos > 0 else []
    if op.kind == "W":
        return [("I", route, pos, op.microbatch)]
    last = pos == place.positions[route] - 1
    own = ("Fdone", route, pos, op.microbatch)
    return [own] if last else [("G", route, pos + 1, op.microbatch), own]


def op_outputs(place: Placement, rank: int, op) -> list[tuple[tuple, int | None]]:
    """(output key, the rank it goes to, None for the rank's own use) of each output of an op."""
    route, pos = place.route_pos[rank][op.chunk]
    mb = op.microbatch
    if op.kind == "F":
        out: list[tuple[tuple, int | None]] = [(("Fdone", route, pos, mb), None)]
        if pos + 1 < place.positions[route]:
            out.append((("F", route, pos, mb), place.at(route, pos + 1)[0]))
        return out
    if op.kind in ("I", "B"):
        out = [(("I", route, pos, mb), None)]
        if pos > 0:
            out.append((("G", route, pos, mb), place.at(route, pos - 1)[0]))
        return out
    return []


@dataclass
class _Builder:
    """Turns each rank's items into tasks; ``key`` names what an op produces: ('F'|'G'|'I', route,
    position, micro-batch) = activations out of, gradient out of, input gradient done at.
    ``explicit``: the schedule posts its own sends and receives (:class:`Post`, :class:`Commit`)."""

    tasks: Tasks
    place: Placement | None
    """Where the chunks sit; None for a builder of one item alone (its inputs are ready and its
    outputs go nowhere: :class:`_Lone`, batch.py's ``_Alone``)."""
    times: StepTimes
    explicit: bool = False
    pending: dict = field(default_factory=dict)
    posts: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)
    made: dict = field(default_factory=dict)

    def layers(self, rank: int, chunk: int) -> tuple[LayerTimes, ...]:
        return self.times.chunks[rank][chunk]

    @property
    def placed(self) -> Placement:
        """:attr:`place`, for what reads the pipeline around an op (a builder of one item alone
        overrides those reads)."""
        if self.place is None:
            raise ValueError("a builder of one item alone has no pipeline placement to read")
        return self.place

    def inputs(self, rank: int, op) -> list:
        return op_inputs(self.placed, rank, op)

    def produced(self, rank: int, op, done: list[int]) -> None:
        """Register the op's outputs: at once where the consumer is on the same rank; through a
        send otherwise (posted now, or at the schedule's own :class:`Post` and :class:`Commit`)."""
        for key, dst in op_outputs(self.placed, rank, op):
            if dst is None:
                self.tasks.outputs[key] = done
            else:
                self.hand_over(rank, key, dst, done)

    def hand_over(self, src: int, key: tuple, dst: int, done: list[int]) -> None:
        t = self.times
        if src == dst or (t.p2p <= 0.0 and not self.explicit):
            self.tasks.outputs[key] = done
        elif self.explicit:
            self.made[key] = done
        else:
            stream = f"p2p:{dst}" if t.p2p_overlap else COMPUTE
            self.tasks.outputs[key] = [self.tasks.add(src, stream, t.p2p, done, "p2p")]

    def post(self, rank: int, item: Post) -> None:
        """Queue a send or receive for the rank's next commit (no-op without a peer elsewhere)."""
        place = self.placed
        route, pos = place.route_pos[rank][item.chunk]
        send = item.what.startswith("send")
        other = pos + 1 if item.what in ("sendF", "recvG") else pos - 1
        if not 0 <= other < place.positions[route] or place.at(route, other)[0] == rank:
            return
        src_pos = pos if send else other
        key = ("F" if item.what.endswith("F") else "G", route, src_pos, item.microbatch)
        self.pending.setdefault(rank, []).append((key, "send" if send else "recv"))
        if send:
            self.links[key] = (rank, place.at(route, other)[0])

    def commit(self, rank: int) -> None:
        """Post the queued sends and receives together, then wait for all of them."""
        queued = self.pending.pop(rank, [])
        if not queued:
            return
        posted = self.tasks.add(rank, COMPUTE, 0.0, [], "post")
        for key, side in queued:
            self.posts.setdefault(key, {})[side] = posted
        self.tasks.add(rank, COMPUTE, 0.0, [("X", *key) for key, _ in queued], "wait")

    def transfers(self) -> None:
        """Each matched send and receive: it runs once both sides posted and the data exists."""
        for key, sides in self.posts.items():
            if set(sides) != {"send", "recv"} or key not in self.made:
                raise ValueError(f"unmatched pipeline transfer {key}: posted {sorted(sides)}")
            src, dst = self.links[key]
            deps = [sides["send"], sides["recv"], *self.made[key]]
            xf = self.tasks.add(src, f"p2p:{dst}", self.times.p2p, deps, "p2p")
            self.tasks.outputs[("X", *key)] = self.tasks.outputs[key] = [xf]

    def join(self, rank: int, *chains: Chain) -> None:
        """The compute stream waits for the item's communication (``StepTimes.join_items``)."""
        ends = [t for ch in chains for t in ch.last if self.tasks.stream[t] != COMPUTE]
        if self.times.join_items and ends:
            self.tasks.add(rank, COMPUTE, 0.0, ends, "join")

    def op(self, rank: int, op, join: bool = True) -> None:
        layers = self.layers(rank, op.chunk)
        segs = _forward_pieces(layers) if op.kind == "F" else _backward_pieces(layers, op.kind)
        ch = Chain(self.tasks, rank, self.inputs(rank, op) + self.tasks.issue_point(rank), op)
        for stream, dur in _merged(segs):
            ch.run(stream, dur, op.kind if stream == COMPUTE else stream)
        self.produced(rank, op, ch.close())
        if join:
            self.join(rank, ch)

    def pair(self, rank: int, item: Pair) -> None:
        """Megatron's layer-by-layer interleave of a forward and a backward (layer i of the
        forward with layer n-1-i of the backward), then the layers left over of the longer one."""
        if not self.times.pair_overlap:
            self.op(rank, item.fwd)
            self.op(rank, item.bwd)
            return
        f_layers, b_layers = self.layers(rank, item.fwd.chunk), self.layers(rank, item.bwd.chunk)
        # Both micro-batches' receives are waited for before the pair's first layer (Megatron's
        # pre_forward / pre_backward in ModelChunkSchedulePlan.run; DualPipe's commit-and-wait).
        start = self.inputs(rank, item.fwd) + self.inputs(rank, item.bwd) + self.tasks.issue_point(rank)
        f = Chain(self.tasks, rank, start, item.fwd)
        b = Chain(self.tasks, rank, start, item.bwd)
        full, delay = item.bwd.kind == "B", self.times.delay_wgrad
        rev = list(reversed(b_layers))
        for j in range(min(len(f_layers), len(rev))):
            lf, lb = f_layers[j], rev[j]
            b.run(A2A, lb.combine_b, A2A)
            f.run(COMPUTE, lf.attn_f)
            b.run(COMPUTE, lb.mlp_b + (full and not delay) * lb.mlp_w)
            f.run(A2A, lf.dispatch_f, A2A)
            if full and delay:
                b.side(lb.mlp_w, "B")
            b.run(A2A, lb.dispatch_b, A2A)
            f.run(COMPUTE, lf.mlp_f)
            f.run(A2A, lf.combine_f, A2A)
            b.run(COMPUTE, lb.attn_b + (full and not delay) * lb.attn_w)
            if full and delay:
                b.side(lb.attn_w, "B")
        n = min(len(f_layers), len(rev))
        for stream, dur in _merged(_backward_pieces(tuple(reversed(rev[n:])), item.bwd.kind)):
            b.run(stream, dur, item.bwd.kind if stream == COMPUTE else stream)
        for stream, dur in _merged(_forward_pieces(f_layers[n:])):
            f.run(stream, dur, "F" if stream == COMPUTE else stream)
        self.produced(rank, item.fwd, f.close())
        self.produced(rank, item.bwd, b.close())
        self.join(rank, f, b)


def build(items_per_rank, place: Placement, times: StepTimes, builder: type | None = None) -> Tasks:
    """The task graph of one step: each rank's items in order (``builder``: what an item becomes,
    :class:`_Builder`'s tasks per layer piece by default)."""
    explicit = any(isinstance(i, (Post, Commit)) for items in items_per_rank for i in items)
    bld = (builder or _Builder)(Tasks(), place, times, explicit)
    for rank, items in enumerate(items_per_rank):
        for item in items:
            if isinstance(item, Pair):
                bld.pair(rank, item)
            elif isinstance(item, Post):
                bld.post(rank, item)
            elif isinstance(item, Commit):
                bld.commit(rank)
            else:
                bld.op(rank, item)
    if explicit:
        bld.transfers()
    return bld.tasks


def simulate(tasks: Tasks) -> tuple[list[float], list[float]]:
    """(start, finish) of every task: each stream in issue order, each task once its stream is
    free and its dependencies are done, processed in order of start time."""
    n = len(tasks.dur)
    deps = [tasks.resolved(t) for t in range(n)]
    prev_on_stream: dict[tuple[int, str], int] = {}
    waits = [0] * n
    after: list[list[int]] = [[] for _ in range(n)]
    for t in range(n):
        key = (tasks.rank[t], tasks.stream[t])
        for d in deps[t] + ([prev_on_stream[key]] if key in prev_on_stream else []):
            after[d].append(t)
            waits[t] += 1
        prev_on_stream[key] = t
    ready_at = [0.0] * n
    start, finish = [float("nan")] * n, [float("nan")] * n
    heap = [(0.0, t) for t in range(n) if waits[t] == 0]
    heapq.heapify(heap)
    done = 0
    while heap:
        s, t = heapq.heappop(heap)
        start[t], finish[t] = s, s + seconds(tasks.dur[t])
        done += 1
        for u in after[t]:
            ready_at[u] = max(ready_at[u], finish[t])
            waits[u] -= 1
            if waits[u] == 0:
                heapq.heappush(heap, (ready_at[u], u))
    if done < n:
        stuck = sorted({(tasks.rank[t], tasks.cause[t]) for t in range(n) if waits[t] > 0})[:8]
        raise ValueError(f"the schedule deadlocks: {n - done} tasks never start (rank, op): {stuck}")
    return start, finish


class _Lone(_Builder):
    """One item on an idle rank with its inputs ready and its outputs unused."""

    def inputs(self, rank: int, op) -> list:
        return []

    def produced(self, rank: int, op, done: list[int]) -> None:
        return None


def item_seconds(item, chunks: tuple[tuple[LayerTimes, ...], ...], times: StepTimes | None = None) -> float:
    """How long one item takes alone on a rank whose chunks are ``chunks``: an op's F, I, W or B
    with its all-to-all exposed, or an overlapped pair's F&B (DualPipe's README term)."""
    times = times or StepTimes((chunks,))
    bld = _Lone(Tasks(), None, dataclasses.replace(times, chunks=(chunks,)))
    bld.pair(0, item) if isinstance(item, Pair) else bld.op(0, item)
    return max(simulate(bld.tasks)[1], default=0.0)
