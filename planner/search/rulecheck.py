"""Launcher rules for the search, evaluated with the real rule functions (each launcher's record in
planner.launchers.registry composes the shared rules with its own).

Structural keys are checked one by one. Lever rules (which recompute, offload, overlap,
dispatcher, sharding and precision combinations a launcher accepts) depend on a few structural
properties only (the signature), so they are evaluated once per signature and lever group. The
search's outputs are checked against the full rule set again (tests do that too)."""

from __future__ import annotations

import itertools

from planner.launchers.registry import launcher_violations
from planner.rules import Target
from planner.specs.plan import Recompute, Sharding


def rule_violations(model, hw, job, plan, target: Target, torchtitan_config: str | None = None,
                    release=None) -> list:
    """All violations of ``plan`` for ``target``: the model's shape rules and the launcher's
    (``torchtitan_config``: the user's config_registry function, --torchtitan-config; ``release``:
    the --software release, whose own rules apply where they differ by release)."""
    return launcher_violations(plan, model=model, job=job, hw=hw, target=target, torchtitan_config=torchtitan_config,
                               release=release)


# Lever values tried, in order, to check a structural key on its own: the first combination a
# launcher accepts (torchtitan, for one, has no distributed optimizer, only FSDP).
_NEUTRAL: list[dict] = [
    {},
    {"sharding": Sharding("fsdp")},
    {"sharding": Sharding("fsdp"), "recompute": Recompute("full")},
]


def neutral_levers(model, hw, job, s, target: Target, torchtitan_config: str | None = None,
                   release=None) -> tuple[dict | None, list[str]]:
    """The first neutral lever choice under which the launcher accepts structural key ``s``
    (None and the rule names of the first rejection when none does)."""
    from planner.search.space import make_plan  # noqa: PLC0415  # cycle: space imports struct_violations from here

    first: list[str] = []
    for levers in _NEUTRAL:
        found = rule_violations(model, hw, job, make_plan(s, levers), target, torchtitan_config, release)
        if not found:
            return levers, []
        if not first:
            first = [v.rule for v in found]
    return None, first


def struct_violations(model, hw, job, s, target: Target, torchtitan_config: str | None = None,
                      release=None) -> list[str]:
    """Rule names that reject structural key ``s`` under every neutral lever choice."""
    return neutral_levers(model, hw, job, s, target, torchtitan_config, release)[1]


LEVER_GROUPS = (
    ("recompute", "offload", "ep_overlap", "dispatcher", "cuda_graphs"),
    ("sharding", "precision", "moments", "offload", "grad_reduce", "param_gather"),
)


def lever_allowed(space, rep_struct, group: tuple[str, ...]) -> dict[tuple, bool]:
    """For one signature's representative structural key: which value combinations of a lever
    group the launcher accepts (other levers at their first option)."""
    from planner.search.space import make_plan  # noqa: PLC0415  # cycle: space imports struct_violations from here

    neutral, _ = neutral_levers(space.model, space.hw, space.job, rep_struct, space.target, space.torchtitan_config,
                                space.software)
    base = {**space.pinned, **{k: v[0] for k, v in space.levers.items()}}
    for k, v in (neutral or {}).items():
        if v in space.levers.get(k, ()):
            base[k] = v
    out = {}
    for values in itertools.product(*(space.levers[k] for k in group)):
        levers = dict(base, **dict(zip(group, values)))
        plan = make_plan(rep_struct, levers)
        out[values] = not rule_violations(space.model, space.hw, space.job, plan, space.target, space.torchtitan_config,
                                          space.software)
    return out
