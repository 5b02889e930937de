"""The composition of the rules every launcher shares (``planner.rules``) with one launcher's own.

A launcher's own rules are one function of the shared check's result (:class:`OwnRules`); its
registry record names it (``planner.launchers.registry``) and its writer checks with it before
writing. This module knows no launcher by name."""

from __future__ import annotations

from collections.abc import Callable

from planner.errors import Violation
from planner.rules import Checked, shared_violations, unique_violations, violations_error
from planner.specs.software import software_violations

OwnRules = Callable[[Checked, str | None], list[Violation]]
"""A launcher's own start-up rules on a plan the shared rules have checked (the second argument:
--torchtitan-config, the config_registry function the torchtitan rules read)."""


def violations_with(own: OwnRules | None, setup_or_plan, model=None, job=None, *, hw=None,
                    torchtitan_config: str | None = None, software=None) -> list[Violation]:
    """Every rule broken: the shared rules, then ``own`` (None: the shared rules only, the plans
    some launcher, or none yet, could run). Arguments as :func:`planner.rules.shared_violations`;
    ``software`` (a :class:`planner.specs.software.SoftwareProfile` of the same launcher) adds one
    ``software-lever`` violation per plan lever that release lacks."""
    checked = shared_violations(setup_or_plan, model, job, hw=hw)
    found = checked.violations + (own(checked, torchtitan_config) if own is not None else [])
    if software is not None:
        found += software_violations(checked.plan, software, found)
    return unique_violations(found)


def check_with(own: OwnRules | None, launcher: str, setup_or_plan, model=None, job=None, *, hw=None,
               torchtitan_config: str | None = None) -> None:
    """Raise every violation as one PlanRuleError naming the first rule (``launcher``: the name
    the message gives the launcher)."""
    found = violations_with(own, setup_or_plan, model, job, hw=hw, torchtitan_config=torchtitan_config)
    if found:
        raise violations_error(found, launcher)
