"""How check reads a torchtitan job back (the registry's ``ReadBack`` record's hooks)."""

from __future__ import annotations

import re

from planner.errors import PlanRuleError, Violation
from planner.launchers.torchtitan.read import TorchtitanJob
from planner.launchers.torchtitan.rules import torchtitan_config_for
from planner.launchers.torchtitan.toml import _REPLACED, TOML_RELEASE, toml_violations
from planner.specs.software import software_violations

# A TOML job file opens with a [section] (torchtitan <= 0.2.2, train_configs/*.toml); a 0.3.0
# launch names --module and --config (torchtitan/config/manager.py ConfigManager), or sets
# --section.field overrides of its config dataclasses, or names a TOML with --job.config_file.
_TOML = re.compile(r"\s*(#.*\n\s*)*\[[A-Za-z_.]+\]")
_CLI = re.compile(r"(?<![\w-])--(?:module|config|job\.config_file)(?:[\s=])|(?<![\w-])--(?:parallelism|training|"
                  r"activation_checkpoint|compile|quantize|model)\.[a-z_]+")


def sniff(text: str, name: str) -> bool:
    """Whether ``text`` is a torchtitan TOML job file or a 0.3.0 launch / argument list."""
    return name.endswith(".toml") or _TOML.match(text) is not None or _CLI.search(text) is not None


def release(tj: TorchtitanJob) -> tuple[str, str]:
    if tj.args.kind == "toml":
        return TOML_RELEASE, "a torchtitan TOML job file: the newest such release, torchtitan 0.2.2 (give --software otherwise)"
    return "torchtitan-0.3.0", "a torchtitan --module/--config launch: torchtitan 0.3.0 (give --software otherwise)"


def torchtitan_config(tj: TorchtitanJob, model) -> str | None:
    """The registry function a 0.3.0 launch names, as --torchtitan-config (None: planner's own table's)."""
    a = tj.args
    if a.kind != "cli" or not a.module or not a.config:
        return None
    return None if torchtitan_config_for(model) == (a.module, a.config) else f"{a.module}:{a.config}"


def check(tj: TorchtitanJob, found: list[Violation], ctx) -> tuple[dict, list[Violation]]:
    """check's fields of a read torchtitan job. A TOML job checked for torchtitan is checked by the
    0.2.2 release's own rules (torchtitan.toml.toml_violations) in place of 0.3.0's."""
    a = tj.args
    if a.kind == "toml" and ctx.target == "torchtitan":
        # Local (start-up): the registry imports this module, and 'planner software' must not load the
        # cost model (numpy) to list releases.
        from planner.cost.setup import resolve_setup  # noqa: PLC0415

        try:
            found = toml_violations(resolve_setup(ctx.model, ctx.hw, ctx.job, ctx.plan))
        except PlanRuleError:  # a plan resolve_setup refuses: the list given has every rule it breaks
            found = [v for v in found if v.rule not in _REPLACED]
        if ctx.profile is not None and not any(v.rule == "software-lever" for v in found):
            found = found + software_violations(ctx.plan, ctx.profile, found)
    fields = {
        "source": str(tj.source), "model_source": tj.model_source,
        "launcher": "torchtitan <= 0.2.2 (TOML)" if a.kind == "toml" else "torchtitan 0.3.0",
        "unknown_flags": a.unknown, "ignored_flags": a.ignored, "unresolved_variables": a.unresolved,
        "not_run": [], "notes": tj.notes, "defaults_used": tj.defaults_used}
    return fields, found
