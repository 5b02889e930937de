"""The op order of each pipeline rank, one function per schedule, transcribed from the code that
runs it (facts from the sources named in each docstring; the code is planner's own).

Micro-batch numbers count per chunk (the n-th forward of chunk c is micro-batch n of that chunk),
as torch's and DualPipe's counters do; for Megatron's schedules they are the global micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.cost.schedule import Op, chunk_order, rank_ops, warmup_count
from planner.cost.schedules.ops import Commit, Pair, Post
from planner.specs.schedule import OrderKind


def megatron_1f1b(p: int, v: int, m: int, rank: int) -> tuple:
    """Megatron-Core's 1F1B (v = 1) or interleaved 1F1B (v > 1): planner.cost.schedule.rank_ops,
    unchanged (forward_backward_pipelining_without_interleaving / _with_interleaving)."""
    return rank_ops(p, v, m, rank)


def check_combined(p: int, v: int) -> None:
    """Megatron refuses the combined 1F1B without virtual pipeline stages when PP > 1."""
    if p > 1 and v == 1:
        raise ValueError("Megatron's combined 1F1B needs virtual pipeline stages when PP > 1 (TransformerConfig)")


def megatron_overlap(p: int, v: int, m: int, rank: int) -> tuple:
    """Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): the interleaved order
    with one more warm-up forward (get_pp_rank_microbatches adds 1 so that every steady step's
    forward and backward are independent), each steady step one overlapped forward+backward
    (combined_1f1b_schedule_for_interleaved_pipelining); with p = 1 the same shape
    (combined_1f1b_schedule_for_no_pipelining: first forward alone, then F(i+1)&B(i), last backward
    alone). Megatron requires v > 1 when p > 1 (TransformerConfig), and so does this order."""
    check_combined(p, v)
    order = chunk_order(m, v, p)
    fwd = [Op("F", c, mb) for mb, c in order]
    bwd = [Op("B", v - 1 - c, mb) for mb, c in order]
    w = min(warmup_count(p, v, m, rank) + 1, m * v)
    items: list = list(fwd[:w])
    items += [Pair(fwd[w + i], bwd[i]) for i in range(len(fwd) - w)]
    items += bwd[len(fwd) - w:]
    return tuple(items)


def zb_h1(p: int, v: int, m: int, rank: int) -> tuple:
    """Zero-bubble H1 (ZB1P; Qi et al. 2023 sec. 2.1) as torch.distributed.pipelining runs it
    (ScheduleInterleavedZeroBubble, _get_1f1b_rank_ops with enable_zero_bubble): the 1F1B warm-up
    (p-1-r forwards, plus (v-1) rounds with v chunks), then F, I and, after the first r steady
    steps, the W of the oldest pending backward; the cool-down runs I then W; the W still pending
    come last. Chunk order follows rounds of ``m // max(1, m // p)`` micro-batches, which must
    divide m (ScheduleInterleavedZeroBubble raises otherwise)."""
    rounds = max(1, m // p)
    if m % rounds:
        raise ValueError(f"zero bubble needs the micro-batches ({m}) a multiple of the rounds ({rounds}), "
                         "as torch checks")
    per_round = m // rounds
    warm = min((v - 1) * per_round + (p - 1 - rank), m * v)
    total = m * v
    steady = total - warm
    fwd_chunk = lambda step: (step // per_round) % v  # noqa: E731
    bwd_chunk = lambda step: v - 1 - ((step - warm) // per_round) % v  # noqa: E731
    nxt = {"F": [0] * v, "I": [0] * v, "W": [0] * v}
    items: list = []
    pending: list[int] = []  # chunks of backwards whose W is still to run, oldest first

    def take(kind: str, c: int) -> None:
        items.append(Op(kind, c, nxt[kind][c]))
        nxt[kind][c] += 1

    for op in range(warm + steady + warm):
        if op < warm + steady:
            take("F", fwd_chunk(op))
        if op >= warm:
            c = bwd_chunk(op)
            take("I", c)
            pending.append(c)
            if op - warm >= rank:
                take("W", pending.pop(0))
    while pending:
        take("W", pending.pop(0))
    return tuple(items)


def zbv(p: int, m: int, rank: int) -> tuple:
    """ZB-V (Qi et al. 2023 sec. 6) as torch runs it (ScheduleZBVZeroBubble
    ._calculate_single_rank_operations): chunk 0 is stage r, chunk 1 stage 2p-1-r; warm-up of
    2(p-r)-1 chunk-0 forwards, r (F1, F0) pairs and p-r (F1, I1, W1); a steady F0 I0 W0 F1 I1 W1;
    a cool-down of r (I0, I1), p-r (I0, W0), then the pending W1 and W0. Counters run over
    max(2p-1, m) micro-batches and the surplus is dropped, as in torch."""
    n = max(2 * p - 1, m)
    cnt = {("F", 0): 0, ("F", 1): 0, ("I", 0): 0, ("I", 1): 0, ("W", 0): 0, ("W", 1): 0}
    items: list = []

    def take(*ops: str) -> None:
        """Run ops in the docstring's notation, kind then chunk ('F0', 'I1', ...)."""
        for op in ops:
            kind, c = op[0], int(op[1])
            mb = cnt[kind, c]
            if mb < m:
                items.append(Op(kind, c, mb))
            cnt[kind, c] = mb + 1

    for _ in range(2 * (p - rank) - 1):
        take("F0")
    for _ in range(rank):
        take("F1", "F0")
    for _ in range(p - rank):
        take("F1", "I1", "W1")
    while cnt["F", 1] < cnt["F", 0] or cnt["F", 0] < n:
        if cnt["F", 0] < n:
            take("F0")
        take("I0", "W0", "F1", "I1", "W1")
    for _ in range(rank):
        take("I0", "I1")
    for _ in range(p - rank):
        take("I0", "W0")
    while cnt["W", 1] < cnt["I", 1]:
        take("W1")
    while cnt["W", 0] < cnt["I", 0]:
        take("W0")
    return tuple(items)


class _DualPipeRank:
    """The bookkeeping of one rank of deepseek-ai/DualPipe's ``step``: per-module counters of
    forwards, backwards, sends and receives, the WeightGradStore FIFO of deferred weight
    gradients, and the module each phase maps to (``flip``: DualPipe's second half of the ranks)."""

    def __init__(self, flip: bool):
        self.flip = flip
        self.n = {k: [0, 0] for k in ("F", "B", "sendF", "recvF", "sendG", "recvG")}
        self.queue: list[Op] = []
        self.items: list = []

    def _next(self, counter: str, phase: int) -> tuple[int, int]:
        c = phase ^ self.flip
        mb = self.n[counter][c]
        self.n[counter][c] += 1
        return c, mb

    def post(self, what: str, phase: int) -> None:
        """``_recv_forward`` / ``_send_forward`` / ``_recv_backward`` / ``_send_backward``."""
        self.items.append(Post(what, *self._next(what, phase)))

    def commit(self) -> None:
        self.items.append(Commit())

    def _compute(self, kind: str, phase: int) -> Op:
        return Op(kind, *self._next("F" if kind == "F" else "B", phase))

    def f(self, phase: int, recv: bool = True, send: bool = True) -> None:
        """``_forward_chunk``."""
        if recv:
            self.post("recvF", phase)
        self.commit()
        self.items.append(self._compute("F", phase))
        if send:
            self.post("sendF", phase)

    def b(self, phase: int, zb: bool = False, recv: bool = True, send: bool = True) -> None:
        """``_backward_chunk``; with zero bubble on (WeightGradStore enabled) only the input
        gradient, the weight gradient queued for a later :meth:`w`."""
        if recv:
            self.post("recvG", phase)
        self.commit()
        op = self._compute("I" if zb else "B", phase)
        self.items.append(op)
        if zb:
            self.queue.append(Op("W", op.chunk, op.microbatch))
        if send:
            self.post("sendG", phase)

    def w(self) -> None:
        """``_weight_chunk``."""
        self.commit()
        self.items.append(self.queue.pop(0))

    def fb(self, f_phase: int, b_phase: int, recv0: bool = True) -> None:
        """``_forward_backward_chunk``: an overlapped forward and full backward."""
        if recv0:
            self.post("recvF", f_phase)
        self.post("recvG", b_phase)
        self.commit()
        fwd = self._compute("F", f_phase)
        self.items.append(Pair(fwd, self._compute("B", b_phase)))
        self.post("sendF", f_phase)
        self.post("sendG", b_phase)


def _dual_steps(s: _DualPipeRank, n: int, h: int, chunks: int, edge: bool, dual: bool) -> tuple:
    """Steps 1-8 of DualPipe.step / DualPipeV.step: ``n`` ranks in the half (DualPipe: p/2;
    DualPipeV: p), ``h`` this rank's position in it, ``chunks`` micro-batches per direction
    (DualPipe: m/2; DualPipeV: m), ``edge`` the rank where the two halves meet (DualPipe: the
    middle ranks; DualPipeV: the last rank), ``dual`` DualPipe's step 2 (the middle ranks send
    their phase-0 forward at once) rather than DualPipeV's."""
    for _ in range((n - h - 1) * 2):  # 1: nF0
        s.f(0)
    s.post("recvF", 0)  # 2: nF0F1
    for i in range(h + 1):
        s.f(0, recv=False, send=dual and edge)
        s.post("recvF", 0)
        s.f(1, send=not edge or i < h)
        if not (dual and edge):
            s.post("sendF", 0)
    for _ in range(n - h - 1):  # 3: nB1W1F1 (zero bubble)
        s.b(1, zb=True)
        s.post("recvF", 1)
        s.w()
        s.f(1, recv=False)
    for i in range(chunks - 2 * n + h + 1):  # 4 (main): nF0B1F1B0
        if i == 0 and edge:  # not overlapped, to shorten the bubble
            s.f(0, recv=False, send=False)
            s.post("sendF", 1)
            s.b(1, send=False)
            s.post("sendF", 0)
            s.post("sendG", 1)
        else:
            s.fb(0, 1, recv0=i > 0)
        s.fb(1, 0)
    for _ in range(n - h - 1):  # 5: nB1F1B0
        s.b(1)
        s.fb(1, 0)
    zb = False
    for i in range(h + 1):  # 6: nB1B0, the second half with zero bubble
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        s.b(1, zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        s.b(0, zb)
    for _ in range(n - h - 1):  # 7: nWB0
        s.w()
        s.b(0, zb=True)
    for _ in range(h + 1):  # 8: nW
        s.w()
    s.commit()
    assert not s.queue
    return tuple(s.items)


def dualpipe(p: int, m: int, rank: int) -> tuple:
    """DualPipe (DeepSeek-V3 report sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py ``step``) with m
    micro-batches, m/2 per direction. Chunk 0 is stage r of the forward direction, chunk 1 stage
    p-1-r of the reverse one; ranks of the second half swap the phases (``phase ^=
    is_in_second_half``). Needs p even, m even and m >= 2p (DualPipe.step asserts)."""
    if p % 2 or m % 2 or m < 2 * p:
        raise ValueError(f"DualPipe needs an even PP, an even micro-batch count and m >= 2 PP; got p={p}, m={m}")
    half = p // 2
    h = min(rank, p - 1 - rank)
    return _dual_steps(_DualPipeRank(rank >= half), half, h, m // 2, h == half - 1, True)


def dualpipev(p: int, m: int, rank: int) -> tuple:
    """DualPipeV, DualPipe cut in half (Sea AI Lab's "cut-in-half"; deepseek-ai/DualPipe
    dualpipev.py ``step``, torch's ScheduleDualPipeV): one direction over 2p stages in a V, chunk 0
    stage r, chunk 1 stage 2p-1-r. Needs m >= 2p (DualPipeV.step asserts; torch requires at least
    as many micro-batches as stages)."""
    if m < 2 * p:
        raise ValueError(f"DualPipeV needs m >= 2 PP micro-batches; got p={p}, m={m}")
    return _dual_steps(_DualPipeRank(False), p, rank, m, rank == p - 1, False)


GENERATORS: dict[OrderKind, Callable[[int, int, int, int], tuple]] = {
    "megatron": megatron_1f1b,
    "combined": megatron_overlap,
    "zb-h1": zb_h1,
    "zbv": lambda p, v, m, rank: zbv(p, m, rank),
    "dualpipe": lambda p, v, m, rank: dualpipe(p, m, rank),
    "dualpipev": lambda p, v, m, rank: dualpipev(p, m, rank),
}
"""The generator of each order kind a schedule record names (planner.specs.schedule.OrderKind),
called with the schedule's chunks per rank (the V and DualPipe orders fix their own two)."""
