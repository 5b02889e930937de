"""Every pipeline schedule planner knows, one :class:`Schedule` record each (issue 44).

A record carries every fact about its schedule: the name plans use, the launchers' names for it,
the virtual stages it runs, when it takes a micro-batch count, where its stages sit on the ranks,
its in-flight shape (chunks per rank, a split backward, parameter copies), the closed form the
search estimates its bubble with and the op-order generator the walk runs. The rules, the search,
the launchers and the cost model read these fields; nothing else keys a table by a schedule's
name. The record sits in ``planner.specs`` because the specs (plan strings, layouts) need it and
may not import the cost model: the cost facts are therefore named by kind (:data:`OrderKind`,
:data:`BubbleKind`), each kind's implementation living in ``planner.cost.schedules``
(``orders.GENERATORS``, ``batch.BUBBLES``), which a test checks covers every kind used here.

Adding a schedule: one record in :data:`REGISTRY` (plus its tests); a new op order or closed
form also adds its generator to ``planner.cost.schedules``. Who runs which schedule, with which
flags: docs/research/schedules.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Placement = Literal["loop", "v", "dual"]
"""Which rank holds each stage (planner.specs.layout): Megatron's loop over the ranks, a V over 2p
stages (stage s and 2p - 1 - s on one rank), or DualPipe's two directions (stage r and p - 1 - r)."""

OrderKind = Literal["megatron", "combined", "zb-h1", "zbv", "dualpipe", "dualpipev"]
"""The op-order generator of planner.cost.schedules.orders a schedule runs."""

BubbleKind = Literal["megatron", "combined", "zb", "dual"]
"""The closed form planner.cost.schedules.batch.pipeline_estimate takes for the bubble: Megatron's
(planner.cost.pipeline, no estimate needed), combined 1F1B's fill, ZB-H1's (p - 1) max(F + I - W, F, I)
or the DualPipe README's (PP/2 - 1)(F&B + B - 3W)."""

Target = Literal["megatron", "torchtitan", "any"]


def _always(p, m):
    return m == m  # an array of True where m is one, so callers may mask with it


def _dualpipe_runs(p, m):
    # DualPipe.step asserts an even pp and an even micro-batch count of at least 2 pp
    # (deepseek-ai/DualPipe dualpipe/dualpipe.py, DualPipe.step).
    return (p % 2 == 0) & (m % 2 == 0) & (m >= 2 * p)


def _dualpipev_runs(p, m):
    # DualPipeV.step (deepseek-ai/DualPipe dualpipe/dualpipev.py) and torch's ScheduleDualPipeV
    # (torch/distributed/pipelining/schedules.py) need one micro-batch per stage of the V.
    return m >= 2 * p


def _zb_runs(p, m):
    # torch's ScheduleInterleavedZeroBubble raises unless m is whole rounds of m // p.
    return m % ((m // p) + (m < p)) == 0  # at least one round


@dataclass(frozen=True)
class RunsRule:
    """A schedule's own check on (pp, micro-batches), whatever the levers, and what a plan breaking
    it is told (``message(p, m)``)."""

    check: Callable
    """(p, m) -> bool or a bool array (m may be an integer array: the search masks keys with it)."""
    rule: str
    message: Callable[[int, int], str]


@dataclass(frozen=True, eq=False, repr=False)
class Schedule:
    """Every fact about one pipeline schedule. The records of :data:`REGISTRY` are the only ones:
    one is equal to itself alone and hashes by identity, so the cost model's caches keyed by a
    record cost no more than keyed by its name (a field-by-field hash would hash its callables and
    rules on every lookup)."""

    name: str
    """The name in plan strings, JSON and the CLI (``schedule=...``)."""
    nameable: bool
    """Whether a plan may name it; False for Megatron's combined 1F1B, which the ep_overlap lever
    selects inside Megatron's 1F1B."""
    vpp: tuple[int, int | None]
    """The plan's vpp it runs: (least, most; None: any). Megatron's 1F1B one chunk and interleaved
    several (megatron/core/pipeline_parallel/schedules.py); torch's ZBVZeroBubble and DualPipeV
    exactly two in a V (torch/distributed/pipelining/schedules.py 3247-3252, 3434-3437); DualPipe
    one layout of pp stages, of which each rank holds two (its own and its mirror's)."""
    placement: Placement
    order: OrderKind
    bubble: BubbleKind
    splits_backward: bool
    """Whether weight gradients run as their own W ops (and hold memory between I and W)."""
    parameter_copies: int
    """Copies of the model's parameters the PP group holds."""
    overlap_pairs: bool
    """Whether it has forward-and-backward pairs an EP all-to-all can hide in (the ep_overlap lever)."""
    megatron: bool
    """Whether Megatron-Core 0.19.2 runs it (pipeline_parallel/schedules.py
    get_forward_backward_func: 1F1B, interleaved with virtual stages)."""
    torchtitan: str | None
    """--parallelism.pipeline_parallel_schedule for it (torch 2.13 get_schedule_class); None: not
    among torch.distributed.pipelining's schedules."""
    runs_under: str
    """Where it runs, for the Megatron rule's message when Megatron does not."""
    searched_under: tuple[Target, ...] = ()
    """The --target searches that try it beyond Megatron's default for the degrees."""
    runs: RunsRule | None = None
    torchtitan_min_vpp: int = 1
    """Stages per rank torchtitan needs (its multi-stage schedules take two or more)."""
    software_feature: str | None = None
    """The feature of a framework release (software/<name>.yaml) a plan on it needs; None: every
    release runs it (planner.specs.software.LEVER_FEATURES)."""

    def fits_vpp(self, vpp) -> bool:
        lo, hi = self.vpp
        return vpp >= lo and (hi is None or vpp <= hi)

    @property
    def vpp_text(self) -> str:
        """The vpp it runs, as the schedule-vpp rule's message says it."""
        lo, hi = self.vpp
        return f"vpp={lo}" if lo == hi else f"vpp > {lo - 1}"

    def chunks(self, v: int) -> int:
        """Chunks per rank for a plan's vpp (DualPipe: a rank holds two stages of a one-chunk layout)."""
        if self.placement == "dual":
            return 2
        lo, hi = self.vpp
        return lo if lo == hi else v

    def takes(self, p, m):
        """Whether it takes ``m`` micro-batches on ``p`` stages (``m`` an integer or an array)."""
        return _always(p, m) if self.runs is None else self.runs.check(p, m)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Schedule({self.name!r})"


REGISTRY: tuple[Schedule, ...] = (
    Schedule("1f1b", True, (1, 1), "loop", "megatron", "megatron", False, 1, True, True, "1F1B",
             "Megatron-Core"),
    Schedule("interleaved", True, (2, None), "loop", "megatron", "megatron", False, 1, True, True,
             "Interleaved1F1B", "Megatron-Core", software_feature="schedule_interleaved"),
    Schedule("zb-h1", True, (1, None), "loop", "zb-h1", "zb", True, 1, False, False, "InterleavedZeroBubble",
             "torchtitan (InterleavedZeroBubble)", ("torchtitan", "any"),
             RunsRule(_zb_runs, "zero-bubble-rounds",
                      lambda p, m: f"Zero bubble runs rounds of micro-batches: {m} micro-batches are not a multiple "
                      f"of the {max(1, m // p)} rounds (torch's ScheduleInterleavedZeroBubble raises)."),
             torchtitan_min_vpp=2, software_feature="schedule_zb_h1"),
    Schedule("zbv", True, (2, 2), "v", "zbv", "zb", True, 1, False, False, "ZBVZeroBubble",
             "torchtitan (ZBVZeroBubble)", ("torchtitan", "any"), software_feature="schedule_zbv"),
    Schedule("dualpipe", True, (1, 1), "dual", "dualpipe", "dual", True, 2, True, False, None,
             "deepseek-ai/DualPipe only (no launcher planner exports to)", ("any",),
             RunsRule(_dualpipe_runs, "dualpipe-shape",
                      lambda p, m: "DualPipe needs an even pp, an even micro-batch count and at least 2 pp "
                      f"micro-batches (DualPipe.step asserts); the plan has pp={p} and {m} micro-batches.")),
    Schedule("dualpipev", True, (2, 2), "v", "dualpipev", "dual", True, 1, True, False, "DualPipeV",
             "torchtitan (DualPipeV) or deepseek-ai/DualPipe", ("torchtitan", "any"),
             RunsRule(_dualpipev_runs, "dualpipev-microbatches",
                      lambda p, m: f"DualPipeV needs at least 2 pp = {2 * p} micro-batches, one per stage "
                      f"(DualPipeV.step; torch's ScheduleDualPipeV); the plan has {m}."),
             software_feature="schedule_dualpipev"),
    Schedule("combined-1f1b", False, (1, None), "loop", "combined", "combined", False, 1, True, True, None,
             "Megatron-Core (--overlap-moe-expert-parallel-comm)"),
)
"""Every schedule, in the order plan strings list them (the search tries those of a --target in
:func:`searched` order)."""

SEARCH_ORDER = ("zb-h1", "zbv", "dualpipev", "dualpipe")
"""The order the search tries schedules in after Megatron's default (the key table's schedule
index follows it, so it stays fixed when a record is added)."""

_BY_NAME = {s.name: s for s in REGISTRY}

COMBINED_1F1B = _BY_NAME["combined-1f1b"]
"""The schedule Megatron's 1F1B and interleaved run under the ep_overlap lever (the
``combined_1f1b`` path of megatron/core/pipeline_parallel/schedules.py
forward_backward_pipelining_with_interleaving, selected by --overlap-moe-expert-parallel-comm):
the cost model walks it in their place, so it needs the record itself, not a plan's name."""


def schedule_named(name: str) -> Schedule:
    """The record of a schedule name, read once where a name enters (plan strings, JSON, launch
    reads, the CLI); the search and the cost model take the record from there on."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown pipeline schedule {name!r}; known: {', '.join(_BY_NAME)}") from None


def nameable() -> tuple[str, ...]:
    """The names a plan may give (planner.specs.plan.SCHEDULES)."""
    return tuple(s.name for s in REGISTRY if s.nameable)


def default_schedule(pp: int, vpp: int) -> Schedule | None:
    """The schedule a plan without ``schedule`` runs: Megatron's interleaved 1F1B with virtual
    stages, its 1F1B otherwise (megatron/core/pipeline_parallel/schedules.py
    get_forward_backward_func); none without pipeline parallelism."""
    if pp <= 1:
        return None
    return _BY_NAME["interleaved" if vpp > 1 else "1f1b"]


def searched(target: str) -> tuple[Schedule, ...]:
    """The schedules a --target search tries beyond Megatron's default, in search order."""
    rank = {n: i for i, n in enumerate(SEARCH_ORDER)}
    hits = [s for s in REGISTRY if target in s.searched_under]
    return tuple(sorted(hits, key=lambda s: rank.get(s.name, len(rank))))


def by_torchtitan_name(name: str) -> Schedule | None:
    """The record for a torch.distributed.pipelining schedule name, matched without case as
    torchtitan's get_schedule_class does; None for those planner does not model."""
    return next((s for s in REGISTRY if s.torchtitan is not None and s.torchtitan.lower() == name.lower()), None)
