"""Plan: how a job is parallelized, in the key=value form of DESIGN.md section 6.

``Plan.parse("tp=1,pp=4,vpp=4,ep=64,mbs=1")`` reads the string form; the JSON form is an object
with the same keys. Values the user gave are kept as given; derived degrees (dp, edp) are computed
by :meth:`Plan.degrees` and never written over a value the user set (a given dp is checked).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, PlainSerializer, PlainValidator, ValidationError, WithJsonSchema, field_validator

from planner.errors import PlannerError, PlanRuleError, excerpt, suggest
from planner.specs.common import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LAYERS, GpuCount, NotBool, Spec
from planner.specs.layout import parse_layout
from planner.specs.schedule import Schedule as ScheduleRecord
from planner.specs.schedule import default_schedule as default_record, nameable, schedule_named

MAX_PLAN_TEXT = 16384
"""Longest plan string read (a layout of 128 stages written out is about 1,000 characters)."""

Degree = GpuCount
"""A parallel degree: at most the largest GPU count planner accepts (2^20)."""

RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts")
"""Megatron's --recompute-modules choices that planner models (megatron-core 0.19)."""

SHARDINGS = ("dist_opt", "ddp", "zero2", "fsdp", "hsdp")
OFFLOADS = ("none", "optimizer", "activations", "optimizer+activations")
DISPATCHERS = ("alltoall", "deepep", "hybridep")

# Order of keys in the canonical string form.
KEY_ORDER = (
    "tp", "cp", "pp", "vpp", "dp", "ep", "etp", "edp", "mbs", "sharding", "recompute", "offload",
    "precision", "moments", "grad_reduce", "param_gather", "layout", "stage_recompute", "dispatcher", "ep_overlap",
    "schedule", "cuda_graphs",
)

SCHEDULES = nameable()
"""Pipeline schedules a plan can name (their records: planner.specs.schedule.REGISTRY)."""


if TYPE_CHECKING:
    ScheduleName = str
else:
    # pydantic checks a plan's schedule against the registry's names (its message lists them)
    ScheduleName = Literal[SCHEDULES]


def default_schedule(pp: int, vpp: int) -> str | None:
    """The name of the schedule a plan without ``schedule`` runs (planner.specs.schedule.default_schedule)."""
    s = default_record(pp, vpp)
    return None if s is None else s.name


class _Named:
    """A typed plan value that equals its string form (``Recompute("full") == "full"``), so names
    read from a command line or a file compare with it directly."""

    def _text(self) -> str:
        """``str(self)``, formed once: the cost model's memo keys hash and compare these values
        tens of thousands of times per search (the subclasses are frozen)."""
        try:
            return self.__dict__["_text_cache"]
        except KeyError:
            text = str(self)
            object.__setattr__(self, "_text_cache", text)
            return text

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self._text() == other
        if type(other) is type(self):
            return self._text() == other._text()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._text())


@dataclass(frozen=True, eq=False)
class Recompute(_Named):
    """Parsed form of the ``recompute`` key."""

    kind: Literal["none", "selective", "full", "op"]
    """'op' is torchtitan's per-op selective activation checkpointing (activation_checkpoint mode
    'selective', selective_ac_option 'op'): each block saves the outputs of its matmuls, attention
    kernels and reduce-scatters except every second matmul, and recomputes the rest."""
    modules: tuple[str, ...] = ()
    layers: int | None = None
    """For ``full:N``: layers recomputed per (virtual) stage, block method; None means all."""

    def __str__(self) -> str:
        if self.kind in ("none", "op"):
            return self.kind
        if self.kind == "full":
            return "full" if self.layers is None else f"full:{self.layers}"
        return "+".join(self.modules)


@functools.lru_cache(maxsize=1024)  # pure, and called per lever combination by the search tables
def parse_recompute(text: str) -> Recompute:
    text = text.strip()
    if text in ("", "none"):
        return Recompute("none")
    if text == "op":
        return Recompute("op")
    if text == "full" or text.startswith("full:"):
        if text == "full":
            return Recompute("full")
        n = text.split(":", 1)[1]
        if not re.fullmatch(r"[0-9]{1,6}", n) or int(n) > MAX_LAYERS:
            raise ValueError(f"full:N needs a layer count from 0 to {MAX_LAYERS}, got '{excerpt(text)}'")
        return Recompute("full", layers=int(n)) if int(n) else Recompute("none")
    mods = [m.strip() for m in text.split("+") if m.strip()]
    bad = [m for m in mods if m not in RECOMPUTE_MODULES]
    if bad:
        raise ValueError(
            f"unknown recompute module '{excerpt(bad[0])}'; choose 'none', 'full', 'full:N', 'op' (torchtitan's "
            "per-op selective AC) or modules from "
            + "+".join(RECOMPUTE_MODULES)
        )
    ordered = tuple(m for m in RECOMPUTE_MODULES if m in mods)
    return Recompute("selective", modules=ordered)


@dataclass(frozen=True, eq=False)
class Sharding(_Named):
    """Parsed form of the ``sharding`` key."""

    kind: Literal["dist_opt", "ddp", "zero2", "fsdp", "hsdp"]
    group: int | None = None
    """For hsdp:N, the size of the sharding group (replicated across DP/N groups); None for the
    other kinds, which have no group."""

    def __post_init__(self) -> None:
        # Readers narrow ``group`` with ``kind == "hsdp" and group is not None``: the two go together.
        if (self.kind == "hsdp") != (self.group is not None):
            raise ValueError(f"sharding {self.kind} {'needs' if self.kind == 'hsdp' else 'takes no'} a group size")

    def __str__(self) -> str:
        return f"hsdp:{self.group}" if self.kind == "hsdp" else self.kind


@functools.lru_cache(maxsize=256)
def parse_sharding(text: str) -> Sharding:
    text = text.strip()
    if text.startswith("hsdp"):
        m = re.fullmatch(r"hsdp:([0-9]{1,8})", text)
        if not m or not 1 <= int(m.group(1)) <= MAX_GPUS:
            raise ValueError(f"hsdp needs a sharding-group size, e.g. 'hsdp:8'; got '{excerpt(text)}'")
        return Sharding("hsdp", int(m.group(1)))
    if text not in SHARDINGS:
        raise ValueError(f"unknown sharding '{excerpt(text)}'; choose one of dist_opt, ddp, zero2, fsdp, hsdp:N")
    return Sharding(text)  # type: ignore[arg-type]


class Precision(StrEnum):
    """Compute precision: bf16, the hardware's FP8 recipe (blockwise on Hopper, MXFP8 on
    Blackwell), or NVFP4 (Transformer Engine's NVFP4BlockScaling recipe, Megatron --fp4-format e2m1
    --fp4-recipe nvfp4: linear-layer GEMMs in FP4 on GPUs with FP4 tensor cores; never a default,
    it changes numerics). A str enum: it compares equal to its name."""

    BF16 = "bf16"
    FP8 = "fp8"
    NVFP4 = "nvfp4"


@dataclass(frozen=True, eq=False)
class Offload(_Named):
    """Parsed form of the ``offload`` key: what moves to host memory."""

    optimizer: bool = False
    """Optimizer states (Megatron --optimizer-cpu-offload)."""
    activations: bool = False
    """Saved activations (Megatron fine-grained activation offloading)."""

    def __str__(self) -> str:
        parts = [name for name, on in (("optimizer", self.optimizer), ("activations", self.activations)) if on]
        return "+".join(parts) or "none"


GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron's --cuda-graph-modules choices (megatron/training/arguments.py, megatron-core 0.19;
the deprecated --cuda-graph-scope names the whole layer 'full'), in canonical order."""


@dataclass(frozen=True, eq=False)
class CudaGraphs(_Named):
    """Parsed form of the ``cuda_graphs`` key (docs/research/levers-2026.md section 1, "Plan key"):
    ``none`` (eager, Megatron's default), ``scoped:<modules>`` (per-layer graphs of the modules
    joined by '+'; ``scoped:layer`` the whole layer: --cuda-graph-impl transformer_engine with
    --cuda-graph-modules, or none for the layer) or ``full_iteration`` (the whole forward-backward
    captured: --cuda-graph-impl full_iteration)."""

    kind: Literal["none", "scoped", "full_iteration"] = "none"
    modules: tuple[str, ...] = ()
    """The captured modules of scoped graphs, canonical order; empty: the whole layer."""

    def __str__(self) -> str:
        if self.kind != "scoped":
            return self.kind
        return "scoped:" + ("+".join(self.modules) if self.modules else "layer")

    def __bool__(self) -> bool:
        return self.kind != "none"

    @property
    def layers_captured(self) -> bool:
        """Whole decoder layers replay as graphs (no host work per kernel inside them)."""
        return self.kind == "full_iteration" or (self.kind == "scoped" and not self.modules)

    def captures(self, module: str) -> bool:
        """Whether ``module`` (one of GRAPH_MODULES) runs inside a graph."""
        return self.layers_captured or module in self.modules


@functools.lru_cache(maxsize=64)
def parse_cuda_graphs(text: str) -> CudaGraphs:
    """'none', 'full_iteration', 'scoped:<modules>' or 'scoped:layer'; the module list alone
    ('attn+moe_router+moe_preprocess', 'layer') is read as scoped."""
    text = text.strip()
    if text in ("none", "full_iteration"):
        return CudaGraphs(text)  # type: ignore[arg-type]
    # 'scoped-te:' / 'scoped-local:' name the implementation (levers-2026.md); planner writes TE's.
    body = text.removeprefix("scoped-te:").removeprefix("scoped-local:").removeprefix("scoped:")
    mods = [m.strip() for m in body.split("+") if m.strip()]
    if mods == ["layer"]:
        return CudaGraphs("scoped")
    bad = [m for m in mods if m not in GRAPH_MODULES]
    if not mods or bad:
        raise ValueError(f"unknown cuda_graphs '{excerpt(text)}'; choose none, full_iteration, scoped:layer or "
                         f"scoped:<modules> with modules from {', '.join(GRAPH_MODULES)} joined by '+'")
    return CudaGraphs("scoped", tuple(m for m in GRAPH_MODULES if m in mods))


@functools.lru_cache(maxsize=64)
def parse_offload(text: str) -> Offload:
    text = text.strip()
    if text not in OFFLOADS:
        raise ValueError(f"unknown offload '{excerpt(text)}'; choose one of {', '.join(OFFLOADS)}")
    return Offload(optimizer="optimizer" in text, activations="activations" in text)


def parse_on_off(value) -> bool:
    """'on'/'off' (the plan's string form) or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip() in ("on", "off"):
        return value.strip() == "on"
    raise ValueError(f"expected 'on' or 'off', got {excerpt(repr(value))}")


class EpOverlap(StrEnum):
    """The ``ep_overlap`` key: the EP all-to-all of one micro-batch hidden under another's compute.

    ``on``: Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) under Megatron's
    schedules, DualPipe's overlapped forward-and-backward chunks under ``dualpipe``/``dualpipev``;
    ``wgrad``: the Megatron overlap with --delay-wgrad-compute as well (the experts' weight
    gradient after the backward dispatch is issued). One key with three values rather than a
    second key: --delay-wgrad-compute is refused without the overlap (TransformerConfig), so the
    combination a second key would allow cannot run. Truthy when the overlap is on."""

    OFF = "off"
    ON = "on"
    WGRAD = "wgrad"

    def __bool__(self) -> bool:
        return self is not EpOverlap.OFF


def parse_ep_overlap(value) -> EpOverlap:
    """'on', 'off', 'wgrad' (the plan's string form) or a boolean."""
    if isinstance(value, EpOverlap):
        return value
    if isinstance(value, bool):
        return EpOverlap.ON if value else EpOverlap.OFF
    if isinstance(value, str) and value.strip() in ("on", "off", "wgrad"):
        return EpOverlap(value.strip())
    raise ValueError(f"expected 'on', 'off' or 'wgrad', got {excerpt(repr(value))}")


def parse_stage_recompute(text: str) -> tuple[int, ...]:
    parts = text.split("/")
    if not all(re.fullmatch(r"[0-9]{1,6}", p) and int(p) <= MAX_LAYERS for p in parts):
        raise ValueError(f"stage_recompute must be '/'-separated layer counts (0 to {MAX_LAYERS}), got '{excerpt(text)}'")
    return tuple(int(p) for p in parts)


def _typed(parse, kind: type, fmt=str, schema: dict | None = None):
    """A plan value held typed inside planner, read from its string form (or taken as is) and
    written back as that string: the edges see strings, the model sees ``kind``."""

    def validate(value):
        if isinstance(value, kind):
            return value
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {excerpt(repr(value))}")
        if len(value) > MAX_PLAN_TEXT:
            raise ValueError(f"{len(value):,} characters; at most {MAX_PLAN_TEXT:,}")
        return parse(value)

    return (PlainValidator(validate), PlainSerializer(fmt, return_type=str),
            WithJsonSchema(schema or {"type": "string"}))


RecomputeValue = Annotated[Recompute, *_typed(parse_recompute, Recompute)]
ShardingValue = Annotated[Sharding, *_typed(parse_sharding, Sharding)]
OffloadValue = Annotated[Offload, *_typed(parse_offload, Offload)]
CudaGraphsValue = Annotated[CudaGraphs, *_typed(parse_cuda_graphs, CudaGraphs)]
OnOff = Annotated[bool, PlainValidator(parse_on_off), PlainSerializer(lambda b: "on" if b else "off", return_type=str),
                  WithJsonSchema({"enum": ["on", "off"]})]
EpOverlapValue = Annotated[EpOverlap, PlainValidator(parse_ep_overlap), PlainSerializer(str, return_type=str),
                          WithJsonSchema({"enum": ["off", "on", "wgrad"]})]
StageRecompute = Annotated[tuple[int, ...], *_typed(parse_stage_recompute, tuple, lambda t: "/".join(map(str, t)))]


@dataclass(frozen=True)
class Degrees:
    """All parallel degrees of a plan on a given GPU count (derived ones filled in)."""

    tp: int
    cp: int
    pp: int
    vpp: int
    dp: int
    ep: int
    etp: int
    edp: int
    """Expert data-parallel degree: gpus / (etp * ep * pp) (Megatron's parallel folding)."""


def parse_pairs(text: str | None, what: str = "plan") -> dict[str, str]:
    """'key=value,key=value' as a dict of plan keys to their strings. Layout strings may contain
    commas; a comma only separates pairs when a 'key=' follows it."""
    text = (text or "").strip()
    values: dict[str, str] = {}
    if not text:
        return values
    if len(text) > MAX_PLAN_TEXT:
        where = "The plan" if what == "plan" else what
        raise PlannerError(f"{where} is {len(text):,} characters long; planner reads at most {MAX_PLAN_TEXT:,}.",
                           hint="Example: --plan \"tp=2,pp=4,ep=8,mbs=1\".")
    for part in re.split(r",(?=\s*[A-Za-z_]+\s*=)", text):
        where = "Plan" if what == "plan" else what
        if "=" not in part:
            raise PlannerError(
                f"{where} item '{excerpt(part.strip())}' is not of the form key=value.",
                hint="Example: --plan \"tp=2,pp=4,ep=8,mbs=1,recompute=full\".",
            )
        key, value = (s.strip() for s in part.split("=", 1))
        if key not in Plan.model_fields:
            raise PlannerError(f"Unknown plan key '{excerpt(key)}'" + ("" if what == "plan" else f" in {what}") + ".",
                               hint=suggest(key, Plan.model_fields))
        if key in values:
            raise PlannerError(f"Plan key '{key}' is given twice" + ("" if what == "plan" else f" in {what}") + ".")
        values[key] = value
    return values


class Plan(Spec):
    """A parallel layout and its memory levers. Omitted keys take their defaults."""

    tp: Degree = 1
    """Tensor parallelism (with sequence parallelism whenever tp > 1)."""
    cp: Degree = 1
    """Context parallelism (the sequence split across GPUs, ring attention)."""
    pp: Degree = 1
    """Pipeline-parallel stages."""
    vpp: Degree = 1
    """Virtual stages per pipeline rank (interleaved 1F1B); 1 is plain 1F1B."""
    dp: Degree | None = None
    """Data parallelism; derived as gpus / (tp*cp*pp) when omitted, checked when given."""
    ep: Degree = 1
    """Expert parallelism (MoE only)."""
    etp: Degree | None = None
    """Expert tensor parallelism; defaults to tp, as in Megatron."""
    edp: Degree | None = None
    """Expert data parallelism; derived as gpus / (etp*ep*pp) when omitted, checked when given."""
    mbs: Annotated[int, NotBool, Field(gt=0, le=MAX_GLOBAL_BATCH)] = 1
    """Micro-batch size in sequences."""
    sharding: ShardingValue = Sharding("dist_opt")
    """dist_opt (Megatron distributed optimizer), ddp, zero2, fsdp (full shard), hsdp:N."""
    recompute: RecomputeValue = Recompute("none")
    """none; Megatron modules joined by '+'; full (all layers) or full:N (N layers per stage)."""
    offload: OffloadValue = Offload()
    """What moves to host memory: none, optimizer, activations, optimizer+activations."""
    precision: Precision | None = None
    """Compute precision; fp8 is the hardware's recipe (blockwise on Hopper, MXFP8 on Blackwell),
    nvfp4 the NVFP4 recipe (Blackwell). None means the job's default."""
    moments: Literal["fp32", "bf16"] = "fp32"
    """Adam moment precision."""
    grad_reduce: Literal["fp32", "bf16"] = "fp32"
    """Dtype of the main-gradient buffer and of the data-parallel gradient reduction: fp32 is
    Megatron's default, bf16 is --grad-reduce-in-bf16 (half the gradient memory and traffic)."""
    param_gather: Literal["bf16", "fp8", "fp4"] = "bf16"
    """Dtype of the data-parallel parameter all-gather: fp8 is Megatron's --fp8-param-gather (FP8
    primary weights, gathered in FP8; needs precision=fp8 and a sharded optimizer); fp4 is
    --fp4-param-gather (NVFP4 primary weights; needs precision=nvfp4 and a sharded optimizer)."""
    layout: str | None = Field(None, max_length=MAX_PLAN_TEXT)
    """A Megatron pipeline layout, e.g. 'Ettt|(tttt|)*14ttmL'; None spreads layers evenly."""
    stage_recompute: StageRecompute | None = None
    """Per-stage full-recompute layer counts, '/'-separated (e.g. '4/2/0/0'): advisory, no launcher
    expresses it directly (search --target any)."""
    dispatcher: Literal["alltoall", "deepep", "hybridep"] | None = None
    """MoE token dispatcher; None means the hardware's default."""
    ep_overlap: EpOverlapValue = EpOverlap.OFF
    """Overlap EP all-to-all with compute: off, on (Megatron --overlap-moe-expert-parallel-comm;
    DualPipe's overlapped chunks), wgrad (Megatron's overlap with --delay-wgrad-compute)."""
    schedule: ScheduleName | None = None
    """Pipeline schedule; None runs Megatron's default (interleaved with vpp > 1, else 1F1B).
    zbv and dualpipev hold two stages per rank in a V (vpp=2), dualpipe the stages r and pp-1-r
    of one layout of pp stages (vpp=1, two parameter copies per pipeline)."""

    cuda_graphs: CudaGraphsValue = CudaGraphs()
    """CUDA graphs: none, scoped:<modules> (per-layer graphs; scoped:layer the whole layer) or
    full_iteration (Megatron --cuda-graph-impl, --cuda-graph-modules)."""

    @field_validator("layout")
    @classmethod
    def _layout(cls, v: str | None) -> str | None:
        if v is None:
            return None
        try:
            parse_layout(v)  # syntax only; the layer count is checked against the model later
        except PlannerError as exc:  # a field error, so that the message names the 'layout' key
            raise ValueError(exc.paragraph()) from None
        return v.replace(" ", "")

    # ---- derived views ---------------------------------------------------------------------
    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def schedule_record(self) -> ScheduleRecord | None:
        """The record of the schedule the plan runs: its ``schedule`` (a name, as plan strings,
        JSON and launchers spell it) resolved here, at the edge, or Megatron's default for its
        pp and vpp; the cost model and the search take this record, never the name."""
        return schedule_named(self.schedule) if self.schedule else default_record(self.pp, self.vpp)

    @property
    def sequence_parallel(self) -> bool:
        """planner always pairs TP with sequence parallelism (Megatron's recommended setting)."""
        return self.tp > 1

    def degrees(self, gpus: int) -> Degrees:
        """Fill in dp and edp for ``gpus`` GPUs; errors name the rule that fails (the first of
        :meth:`degree_errors`)."""
        errors, deg = self.degree_errors(gpus)
        if errors:
            raise errors[0]
        return deg

    def degree_errors(self, gpus: int) -> tuple[list[PlanRuleError], Degrees]:
        """Every degree rule the plan breaks on ``gpus`` GPUs, in the order :meth:`degrees` checks
        them, and the degrees with dp (edp) 0 where the GPUs do not divide into the dense
        (expert) grid: planner check reports the rules that need no dp beside these."""
        errors: list[PlanRuleError] = []
        dense = self.tp * self.cp * self.pp
        dp = 0 if gpus % dense else gpus // dense
        if not dp:
            errors.append(PlanRuleError(
                "world-divisibility",
                f"{gpus} GPUs are not divisible by tp*cp*pp = {self.tp}*{self.cp}*{self.pp} = {dense}.",
                hint="Pick degrees whose product divides the GPU count.",
            ))
        elif self.dp is not None and self.dp != dp:
            errors.append(PlanRuleError(
                "dp-mismatch",
                f"The plan gives dp={self.dp}, but {gpus} GPUs / (tp*cp*pp = {dense}) = {dp}.",
                hint="Leave dp out to have it derived.",
            ))
        expert = self.expert_tp * self.ep * self.pp
        edp = 0 if gpus % expert else gpus // expert
        # Without EP or a separate expert TP the expert grid is tp*pp, a factor of the dense one:
        # its failure repeats world-divisibility and is not listed beside it.
        repeats = not dp and self.ep == 1 and self.expert_tp == self.tp
        if not edp and not repeats:
            errors.append(PlanRuleError(
                "expert-world-divisibility",
                f"{gpus} GPUs are not divisible by etp*ep*pp = {self.expert_tp}*{self.ep}*{self.pp} = {expert}"
                " (Megatron's expert grid, parallel_state.initialize_model_parallel).",
            ))
        elif self.edp is not None and self.edp != edp:
            errors.append(PlanRuleError(
                "edp-mismatch",
                f"The plan gives edp={self.edp}, but {gpus} GPUs / (etp*ep*pp = {self.expert_tp}*{self.ep}*{self.pp} = "
                f"{expert}) = {edp}.",
                hint="Leave edp out to have it derived.",
            ))
        return errors, Degrees(self.tp, self.cp, self.pp, self.vpp, dp, self.ep, self.expert_tp, edp)

    def check_given_degrees(self, deg: Degrees, gpus: int) -> None:
        """A dp or edp the user gave must equal the derived one (``deg``, from the canonical
        plan, which drops both): the error names the given and the derived value."""
        if self.dp is not None and self.dp != deg.dp:
            raise PlanRuleError(
                "dp-mismatch",
                f"The plan gives dp={self.dp}, but {gpus} GPUs / (tp*cp*pp = {deg.tp}*{deg.cp}*{deg.pp} = "
                f"{deg.tp * deg.cp * deg.pp}) = {deg.dp}.",
                hint="Leave dp out to have it derived.",
            )
        if self.edp is not None and self.edp != deg.edp:
            raise PlanRuleError(
                "edp-mismatch",
                f"The plan gives edp={self.edp}, but {gpus} GPUs / (etp*ep*pp = {deg.etp}*{deg.ep}*{deg.pp} = "
                f"{deg.etp * deg.ep * deg.pp}) = {deg.edp}.",
                hint="Leave edp out to have it derived.",
            )

    # ---- string form -----------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Plan:
        """Read 'key=value,key=value' (see :func:`parse_pairs`)."""
        return cls.from_mapping(parse_pairs(text))

    @classmethod
    def given(cls, text: str, what: str = "plan") -> dict:
        """The keys a 'key=value,...' text gives, with their typed values (what --fix pins)."""
        pairs = parse_pairs(text, what)
        plan = cls.from_mapping(pairs)
        return {k: getattr(plan, k) for k in pairs}

    @classmethod
    def from_mapping(cls, values: dict) -> Plan:
        """Build from a dict (JSON form or parsed string), with errors that name the key."""
        unknown = [k for k in values if k not in cls.model_fields]
        if unknown:
            raise PlannerError(f"Unknown plan key '{excerpt(str(unknown[0]))}'.", hint=suggest(unknown[0], cls.model_fields))
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"]) or "plan"
            msg = err["msg"].removeprefix("Value error, ").rstrip(".")
            raise PlannerError(f"Plan key '{key}' has a bad value {excerpt(repr(values.get(key)))}: {msg}.") from None

    def to_string(self) -> str:
        """Non-default keys in a fixed order (the canonical string when the plan is canonical)."""
        default = Plan()
        text = self.to_json()
        parts = [f"{key}={text[key]}" for key in KEY_ORDER
                 if getattr(self, key) != getattr(default, key) and getattr(self, key) is not None]
        return ",".join(parts) if parts else "tp=1"

    def __str__(self) -> str:
        return self.to_string()

    def to_json(self) -> dict:
        """The JSON form: every key that has a value, lever values as their strings."""
        dumped = self.model_dump(mode="json")
        return {k: dumped[k] for k in KEY_ORDER if dumped[k] is not None}

    def replace(self, **changes) -> Plan:
        return Plan.model_validate({**self.model_dump(), **changes})

    def canonical_for(self, model, hw, job) -> Plan:
        """The canonical plan on this model, hardware (its default dispatcher; alltoall without
        hardware) and job (its default precision)."""
        return self.canonical(is_moe=model.is_moe,
                              default_dispatcher=hw.default_dispatcher if hw is not None else "alltoall",
                              default_precision=job.default_precision)

    def canonical(self, *, is_moe: bool, default_dispatcher: str | None = None,
                  default_precision: str | None = None) -> Plan:
        """Normalize so that plans which run identically compare equal: vpp=1 without PP, no expert
        keys on dense models, etp written out, dp dropped (derived), the dispatcher and precision
        made explicit, EP overlap off where there is no EP, the default schedule left out. A plan
        that is canonical already is returned as it is (plans are immutable; most plans the search
        checks are, and validating an equal copy was most of the time its rule checks took)."""
        given = self.model_dump()
        d = dict(given)
        d["dp"] = d["edp"] = None
        if d["pp"] == 1:
            d["vpp"] = 1
        if not is_moe:
            d.update(ep=1, etp=None, dispatcher=None, ep_overlap=EpOverlap.OFF)
        else:
            d["etp"] = self.expert_tp
            if d["ep"] == 1:
                d["ep_overlap"] = EpOverlap.OFF
            if d["dispatcher"] is None:
                d["dispatcher"] = default_dispatcher
            if d["ep"] == 1:
                d["dispatcher"] = None
        if d["precision"] is None:
            d["precision"] = default_precision
        if d["schedule"] == default_schedule(d["pp"], d["vpp"]):
            d["schedule"] = None  # the default is never written out (pp=1 keeps one: rule schedule-needs-pp)
        if d["etp"] == d["tp"] and not is_moe:
            d["etp"] = None
        return self if d == given else Plan.model_validate(d)
