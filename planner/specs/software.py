"""SoftwareProfile: one release of a training framework (megatron-core, megatron-bridge, torchtitan)
as an input, kept as data in ``software/<name>.yaml`` beside ``models/`` and ``hw_specs/``.

A profile says which optimizations the release has (``features``, each with the file and version
that shows it), which of them its recipes turn on by default (``default_levers``) and the launcher
rules it carries (``rules``, as text with their sources). Plan levers map to the features they need
(:data:`LEVER_FEATURES`); :meth:`SoftwareProfile.offers` answers whether a release can run a lever
value, and :func:`software_violations` turns a plan's missing levers into launcher-rule violations
that name the first release planner knows with the feature.

The same layout moved 24-50 % between releases (issue 39): a plan priced without knowing the
release is priced for a stack nobody launches.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator

from planner.errors import Violation
from planner.specs.common import Spec
from planner.specs.model import Name
from planner.specs.plan import KEY_ORDER, default_schedule
from planner.specs.schedule import REGISTRY as SCHEDULE_REGISTRY

if TYPE_CHECKING:
    from planner.specs.plan import Plan

Framework = Literal["megatron-core", "megatron-bridge", "torchtitan"]
Launcher = Literal["megatron", "torchtitan"]
"""The ``--target`` whose launch a release runs (Megatron-Bridge launches Megatron-Core)."""

FEATURES: dict[str, str] = {
    "dist_opt": "the distributed optimizer (ZeRO-1 over data-parallel ranks)",
    "fsdp": "fully sharded data parallelism (Megatron-FSDP; torchtitan's FSDP2)",
    "hsdp": "hybrid sharded data parallelism (shard groups replicated)",
    "precision_aware_optimizer": "the precision-aware optimizer (bf16 Adam moments)",
    "grad_reduce_bf16": "gradient reduction in bf16",
    "fp8_param_gather": "FP8 parameter all-gather (FP8 primary weights)",
    "fp8": "FP8 compute",
    "mxfp8": "the MXFP8 recipe (Blackwell)",
    "nvfp4": "NVFP4 compute (Blackwell)",
    "optimizer_cpu_offload": "optimizer CPU offload",
    "activation_offload_layers": "layer-wise activation CPU offload",
    "fine_grained_activation_offload": "fine-grained (per-module) activation offload",
    "dispatcher_alltoall": "the all-to-all MoE token dispatcher",
    "dispatcher_deepep": "the DeepEP MoE token dispatcher",
    "dispatcher_hybridep": "the HybridEP MoE token dispatcher",
    "fused_permute": "fused MoE token permutation",
    "ep_overlap": "EP all-to-all overlap with compute (combined 1F1B)",
    "delay_wgrad": "delayed expert weight gradients under the EP overlap",
    "recompute_modules": "selective recompute of named modules",
    "recompute_shared_experts": "recompute of the shared experts (module 'shared_experts')",
    "recompute_op": "per-op selective activation checkpointing",
    "cuda_graphs_local": "Megatron's local CUDA graphs (per layer)",
    "cuda_graphs_transformer_engine": "Transformer Engine CUDA graphs (scoped capture)",
    "cuda_graphs_full_iteration": "full-iteration CUDA graphs",
    "cuda_graph_modules": "--cuda-graph-modules (per-module capture scopes)",
    "cuda_graphs": "CUDA graphs of the compiled model",
    "paged_stash": "the MoE paged stash (static expert activation buffers)",
    "expert_rank_capacity": "a per-rank expert token capacity",
    "te_op_fuser": "Transformer Engine's operation fuser",
    "schedule_interleaved": "the interleaved 1F1B pipeline schedule",
    "schedule_zb_h1": "the zero-bubble (ZB-H1) pipeline schedule",
    "schedule_zbv": "the zero-bubble V pipeline schedule",
    "schedule_dualpipev": "the DualPipeV pipeline schedule",
}
"""Every feature a profile can list, with what it is (the words of the refusal)."""

Feature = Annotated[str, Field(min_length=1, max_length=64)]


def _require(plan_key: str, value: str) -> tuple[str, ...]:
    return LEVER_FEATURES.get((plan_key, value), ())


LEVER_FEATURES: dict[tuple[str, str], tuple[str, ...]] = {
    ("sharding", "dist_opt"): ("dist_opt",),
    ("sharding", "fsdp"): ("fsdp",),
    ("sharding", "hsdp"): ("hsdp",),
    ("moments", "bf16"): ("precision_aware_optimizer",),
    ("grad_reduce", "bf16"): ("grad_reduce_bf16",),
    ("param_gather", "fp8"): ("fp8_param_gather",),
    ("precision", "fp8"): ("fp8",),
    # --fp4-param-gather came with --fp4-format (megatron/training/arguments.py, core_v0.15.0).
    ("precision", "nvfp4"): ("nvfp4",),
    ("param_gather", "fp4"): ("nvfp4",),
    ("offload", "optimizer"): ("optimizer_cpu_offload",),
    ("offload", "activations"): ("activation_offload_layers",),
    ("dispatcher", "alltoall"): ("dispatcher_alltoall",),
    ("dispatcher", "deepep"): ("dispatcher_deepep",),
    ("dispatcher", "hybridep"): ("dispatcher_hybridep",),
    ("ep_overlap", "on"): ("ep_overlap",),
    ("ep_overlap", "wgrad"): ("ep_overlap", "delay_wgrad"),
    ("recompute", "selective"): ("recompute_modules",),
    ("recompute", "shared_experts"): ("recompute_shared_experts",),
    ("recompute", "op"): ("recompute_op",),
    # planner writes scoped graphs as Transformer Engine's (--cuda-graph-impl transformer_engine;
    # releases before --cuda-graph-modules name the scope with --cuda-graph-scope)
    ("cuda_graphs", "scoped"): ("cuda_graphs_transformer_engine",),
    ("cuda_graphs", "full_iteration"): ("cuda_graphs_full_iteration",),
    # each schedule's own feature (planner.specs.schedule.Schedule.software_feature)
    **{("schedule", s.name): (s.software_feature,) for s in SCHEDULE_REGISTRY if s.software_feature},
}
"""(plan key, value) -> the features the value needs. Values not listed need nothing a release
could lack (ddp, recompute full, fp32 moments, the 1F1B schedule, ...). ``sharding=hsdp:N`` is
looked up as 'hsdp'; a module list as 'selective' plus one entry per module with its own
feature. DualPipe (two parameter copies) and zero2 are refused by the launcher rules of every
release planner knows, so no feature stands for them here."""


class Sourced(Spec):
    """A fact of the release with where it is read (file and function or field, and version)."""

    source: str = Field(min_length=8, max_length=600)
    note: str | None = Field(None, max_length=600)


class DefaultLever(Sourced):
    """A lever value the release's recipes turn on by default."""

    value: str = Field(min_length=1, max_length=200)
    scope: str | None = Field(None, max_length=200)
    """Which recipes set it (None: every recipe of the release)."""


class AbsentFlags(Sourced):
    """Command-line flags the release's parser lacks that planner's writer can write."""

    flags: list[Annotated[str, Field(pattern=r"^--[a-z0-9][a-z0-9-]{0,80}$")]] = Field(max_length=500)


class SoftwareRule(Sourced):
    """A launcher rule the release carries (minimum versions, incompatible combinations)."""

    name: Name
    text: str = Field(min_length=8, max_length=600)


_VERSION = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){1,3}$")
_RELEASE_NAME = re.compile(r"^(?P<prefix>[a-z][a-z0-9_.+-]*?)-v?(?P<version>[0-9]{1,4}(?:\.[0-9]{1,4}){0,3})$")


def release_prefix(name: str) -> str | None:
    """'megatron-core-0.20.1' -> 'megatron-core' (None: not a name with a release number)."""
    m = _RELEASE_NAME.fullmatch(name.lower())
    return m["prefix"] if m else None


def release_version(name: str) -> tuple[int, ...] | None:
    """'megatron-core-0.20.1' -> (0, 20, 1) (None: not a name with a release number)."""
    m = _RELEASE_NAME.fullmatch(name.lower())
    return tuple(int(x) for x in m["version"].split(".")) if m else None


class SoftwareProfile(Spec):
    """One release of a training framework: what it offers, what its recipes turn on, its rules."""

    name: Name
    aliases: list[Name] = []
    framework: Framework
    version: str = Field(max_length=20)
    """The release, e.g. '0.19.0' (dotted numbers: releases are ordered by them)."""
    launcher: Launcher
    released: str | None = Field(None, max_length=40)
    source: str = Field(min_length=8, max_length=600)
    """Where the release is read: the tag or commit of the framework's repository."""
    megatron_core: str | None = Field(None, max_length=20)
    """For Megatron-Bridge: the megatron-core release it pins (its 3rdparty/Megatron-LM submodule)."""
    description: str | None = Field(None, max_length=600)
    features: dict[Feature, Sourced]
    flags_absent: AbsentFlags | None = None
    """For a Megatron-Core release older than the writer's (0.19): the flags it does not parse."""
    default_levers: dict[str, DefaultLever] = {}
    rules: list[SoftwareRule] = []
    stands_for: str | None = Field(None, max_length=200)
    """Set by planner (planner.specs.catalog.load_software), never in a profile file: the release
    name asked for, which planner has no profile of, that this known release of the same framework
    stands in for (:attr:`stand_in_note` says which and why)."""

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not _VERSION.fullmatch(v):
            raise ValueError(f"'{v[:40]}' is not a release number such as 0.19.0")
        return v

    @field_validator("features")
    @classmethod
    def _known_features(cls, v: dict) -> dict:
        unknown = sorted(set(v) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {', '.join(unknown[:4])}; planner knows {', '.join(FEATURES)}")
        return v

    @field_validator("default_levers")
    @classmethod
    def _known_levers(cls, v: dict) -> dict:
        known = set(KEY_ORDER) | {"cuda_graphs", "fp8_recipe", "tp_comm_overlap", "dp_overlap"}
        unknown = sorted(set(v) - known)
        if unknown:
            raise ValueError(f"unknown lever(s) {', '.join(unknown[:4])}; give plan keys or assumptions "
                             f"({', '.join(sorted(known))})")
        return v

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.version.split("."))

    @property
    def stand_in_note(self) -> str | None:
        """Why this profile is used for another release (None when it is the release asked for)."""
        if self.stands_for is None:
            return None
        return (f"planner has no profile of {self.stands_for}: {self.name}, the nearest {self.framework} release it "
                f"knows{self._stand_in_side()}, stands for it (its features, recipe defaults and rules)")

    def noted(self, origin: str) -> str:
        """``origin`` (where the release choice came from) with :attr:`stand_in_note` when there is one:
        how every report names a stand-in release."""
        return f"{origin}; {self.stand_in_note}" if self.stand_in_note else origin

    def _stand_in_side(self) -> str:
        asked = release_version(self.stands_for or "") or ()
        if asked[:2] == self.version_tuple[:2]:
            return " (a patch release of it)"
        return " (a newer release may offer levers it lacks)"

    @property
    def title(self) -> str:
        """'megatron-core 0.19.0': how messages name the release."""
        return f"{self.framework} {self.version}"

    def has(self, feature: str) -> bool:
        return feature in self.features

    def offers(self, lever: str, value) -> bool:
        """Whether this release can run plan key ``lever`` at ``value`` (a plan value or its
        string form): every feature the value needs is in the release."""
        return not self.missing(lever, value)

    def missing(self, lever: str, value) -> tuple[str, ...]:
        """The features ``lever=value`` needs that this release lacks."""
        return tuple(f for f in lever_features(lever, value) if f not in self.features)

    def default_lever_values(self) -> dict[str, str]:
        """lever -> value the release's recipes turn on by default (the search reads these)."""
        return {k: d.value for k, d in self.default_levers.items()}


def lever_features(lever: str, value) -> tuple[str, ...]:
    """The features ``lever=value`` needs (value: a plan value or its string form)."""
    if value is None:
        return ()
    if isinstance(value, bool):
        text = "on" if value else "off"
    else:
        text = str(value)
    if lever == "sharding" and text.startswith("hsdp"):
        return _require("sharding", "hsdp")
    if lever == "recompute" and text not in ("none", "full", "op") and not text.startswith("full:"):
        mods = text.split("+")
        need = list(_require("recompute", "selective"))
        for m in mods:
            need += [f for f in _require("recompute", m) if f not in need]
        return tuple(need)
    if lever == "cuda_graphs" and text.startswith("scoped"):
        return _require("cuda_graphs", "scoped")
    if lever == "offload" and "+" in text:
        return tuple(f for part in text.split("+") for f in _require("offload", part))
    return _require(lever, text)


def plan_lever_values(plan: Plan) -> list[tuple[str, str]]:
    """(key, string value) of every lever a plan sets, in the plan's key order; the pipeline
    schedule as it runs (Megatron's default where the plan leaves it out)."""
    out: list[tuple[str, str]] = []
    for key in KEY_ORDER:
        value = getattr(plan, key, None)
        if key == "schedule" and value is None:
            value = default_schedule(plan.pp, plan.vpp)
        if value is None or isinstance(value, int) and not isinstance(value, bool):
            continue
        out.append((key, "on" if value is True else "off" if value is False else str(value)))
    return out


def first_release_with(feature: str, profile: SoftwareProfile) -> SoftwareProfile | None:
    """The oldest release of ``profile``'s framework in the catalog that has ``feature``."""
    from planner.specs.catalog import all_software  # noqa: PLC0415  # cycle: catalog imports SoftwareProfile from here

    found = [p for p in all_software() if p.framework == profile.framework and p.has(feature)]
    return min(found, key=lambda p: p.version_tuple) if found else None


def software_violations(plan: Plan, profile: SoftwareProfile, found: list | None = None) -> list[Violation]:
    """One ``software-lever`` violation per plan lever the release lacks, naming the release and
    the first release planner knows with it. A lever a launcher rule in ``found`` already refuses
    (its message opens with 'key=value') is left to that rule's own words."""

    refused = tuple(v.message for v in found or ())
    out: list[Violation] = []
    for key, text in plan_lever_values(plan):
        missing = profile.missing(key, text)
        if not missing or any(m.startswith(f"{key}={text}") for m in refused):
            continue
        parts = []
        for f in missing:
            first = first_release_with(f, profile)
            since = (f"first in {first.title} among the releases planner knows" if first is not None
                     else f"no {profile.framework} release planner knows has it")
            parts.append(f"{FEATURES.get(f, f)} ({since})")
        out.append(Violation(
            "software-lever",
            f"{key}={text} needs {'; '.join(parts)}, which {profile.title} ({profile.name}) does not have.",
            hint=f"Give --software a newer release (see 'planner software') or a plan without {key}={text}.",
        ))
    return out
