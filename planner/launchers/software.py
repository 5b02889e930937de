"""Which framework release a plan source runs on: ``--software``, a saved search's, what a read
launch says (planner's own export header; a Megatron-Bridge launch; a torchtitan TOML or 0.3.0
command line; Megatron flags that only exist from some release on), else the newest release of
the launcher, said as an assumption. check and explain take this one route.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import PlannerError
from planner.files import read_text
from planner.launchers.common import software_record
from planner.rules import Violation
from planner.specs.software import FEATURES, first_release_with

if TYPE_CHECKING:
    from planner.specs.software import SoftwareProfile

_SOFTWARE_LINE = re.compile(r"^# software: (?P<name>[A-Za-z0-9][A-Za-z0-9_.+-]{0,80})(?:\s|$)")

MEGATRON_FLAG_FEATURES: dict[str, str] = {
    "overlap_moe_expert_parallel_comm": "ep_overlap",
    "delay_wgrad_compute": "delay_wgrad",
    "moe_flex_dispatcher_backend": "dispatcher_hybridep",
    "fine_grained_activation_offloading": "fine_grained_activation_offload",
    "offload_modules": "fine_grained_activation_offload",
    "moe_paged_stash": "paged_stash",
    "moe_expert_rank_capacity_factor": "expert_rank_capacity",
    "use_transformer_engine_op_fuser": "te_op_fuser",
    "cuda_graph_modules": "cuda_graph_modules",
    "fp4": "nvfp4",
}
"""Megatron argparse dests whose flag exists only from some megatron-core release on, and the
feature of software/<name>.yaml that dates it (moe_flex_dispatcher_backend: the flex backend
choice arrived with HybridEP in 0.16, transformer_config.py at core_v0.16.0; the others: the
feature's own source)."""

FLAG_WORDS: dict[str, str] = {
    "moe_flex_dispatcher_backend": "the flex dispatcher's backend choice (deepep or hybridep; earlier releases "
                                   "set DeepEP with --moe-enable-deepep)",
    "offload_modules": "fine-grained activation offload modules",
}
"""How a refusal names a flag whose feature's own words would mislead."""


def header_software(text: str) -> str | None:
    """The profile a planner export's header names (``# software: NAME``), from its leading
    comment lines only; None for any other file."""
    for line in text.splitlines()[:20]:
        if line and not line.startswith("#"):
            break
        m = _SOFTWARE_LINE.match(line)
        if m:
            return m["name"]
    return None


@dataclass
class SoftwareChoice:
    """The release a command uses, where it came from, and what a read launch says of it."""

    profile: SoftwareProfile | None
    origin: str
    launch_needs: list[tuple[str, str]] = field(default_factory=list)
    """(flag dest, feature) of the launch's flags that exist only from some release on."""
    flags: set[str] = field(default_factory=set)
    """Every --flag the launch text writes (for the release's flags_absent)."""

    def record(self) -> dict | None:
        if self.profile is None:
            return None
        out = software_record(self.profile, self.origin)
        if self.launch_needs:
            needs = []
            for dest, feature in self.launch_needs:
                first = first_release_with(feature, self.profile)
                needs.append(f"--{dest.replace('_', '-')}" + (f" (from {first.title})" if first else ""))
            out["launch_flags_dated"] = needs
        return out

    def violations(self) -> list:
        """A ``software-flag`` violation per launch flag the release does not have."""
        if self.profile is None:
            return []
        out = []
        dated = {f"--{dest.replace('_', '-')}" for dest, _ in self.launch_needs}
        absent = self.profile.flags_absent
        unparsed = sorted(f for f in self.flags if absent is not None and f in absent.flags and f not in dated)
        if unparsed and absent is not None:
            out.append(Violation(
                "software-flag",
                f"the launch sets {', '.join(unparsed)}, which {self.profile.title} ({self.profile.name}) does not parse "
                f"({absent.source.split(':')[0]}).",
                hint="Give --software the release the launch runs on (see 'planner software')."))
        for dest, feature in self.launch_needs:
            if self.profile.has(feature):
                continue
            first = first_release_with(feature, self.profile)
            since = f" (first in {first.title})" if first is not None else ""
            out.append(Violation(
                "software-flag",
                f"the launch sets --{dest.replace('_', '-')}, {FLAG_WORDS.get(dest, FEATURES[feature])}{since}, which "
                f"{self.profile.title} "
                f"({self.profile.name}) does not have.",
                hint="Give --software the release the launch runs on (see 'planner software')."))
        return out


def read_launch_text(src) -> str | None:
    """The text of a read launch file (for its header), None where there is none."""
    if src.launch is None:
        return None
    read = src.launch.job
    path = Path(str(read.source))
    try:
        return read_text(path, "launch script") if path.is_file() else None
    except PlannerError:
        return None


def script_flag_violations(text: str, profile) -> list:
    """``software-flag`` violations for the dated Megatron flags an exported script writes that
    ``profile`` lacks: planner's Megatron writer writes megatron-core 0.19's flags, so a script for
    an older release that needs a newer flag is refused instead of written."""
    if profile is None or profile.framework != "megatron-core":
        return []
    used = script_flags(text)
    needs = [(dest, feature) for dest, feature in MEGATRON_FLAG_FEATURES.items() if f"--{dest.replace('_', '-')}" in used]
    return SoftwareChoice(profile, "", needs, used).violations()


def script_flags(text: str) -> set[str]:
    """Every --flag a launch text writes (comments left out: the export header's plan is no flag)."""
    lines = [line.split("#", 1)[0] for line in text.splitlines() if not line.lstrip().startswith("#")]
    return set(re.findall(r"(?<![A-Za-z0-9-])(--[a-z0-9][a-z0-9-]*)", "\n".join(lines)))
