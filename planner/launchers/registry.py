"""Every launcher planner writes, reads and checks for: one :class:`Launcher` record each, in
:data:`LAUNCHERS`. Commands, the search and the exports find a launcher's formats, rules, reader,
schedules and software here by its name; nothing outside this module switches on launcher names.

Adding a launcher is its package (``write.py``, ``read.py``, ``rules.py`` with ``own_violations``)
and one record below.

Names: a launcher's ``name`` is what ``--target`` takes where it is searchable (``megatron``,
``torchtitan``; ``any`` is no launcher, the shared rules only); Megatron-Bridge runs Megatron-Core,
so its plans are Megatron's (``rules_of``) plus its own rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import PlannerError, Violation
from planner.files import MAX_SCRIPT_BYTES, read_text
from planner.launchers.bridge import rules as bridge_rules
from planner.launchers.bridge import readback as bridge_readback
from planner.launchers.bridge.read import job_from_bridge
from planner.launchers.bridge.recipes import BRIDGE_RELEASE
from planner.launchers.bridge.write import export_bridge
from planner.launchers.checks import OwnRules, check_with, violations_with
from planner.launchers.json_export import export_json
from planner.launchers.megatron import rules as megatron_rules
from planner.launchers.megatron import readback as megatron_readback
from planner.launchers.megatron.read import job_from_script
from planner.launchers.megatron.write import export_megatron
from planner.launchers.torchtitan import rules as torchtitan_rules
from planner.launchers.torchtitan import readback as torchtitan_readback
from planner.launchers.torchtitan.read import job_from_torchtitan
from planner.launchers.software import (
    SoftwareChoice, header_software, read_launch_text, script_flag_violations, script_flags,
)
from planner.launchers.torchtitan.toml import (
    TOML_RELEASE, check_toml_release, export_torchtitan_toml, reads_toml, toml_own_violations,
)
from planner.launchers.torchtitan.write import export_torchtitan
from planner.specs.catalog import load_software, newest_release
from planner.specs.software import software_violations

if TYPE_CHECKING:
    from planner.cost.setup import Setup
    from planner.specs.model import ModelSpec
    from planner.specs.plan import Plan
    from planner.specs.software import SoftwareProfile

ANY = "any"
"""The target that is no launcher: the shared rules only (``--target any``)."""


@dataclass(frozen=True)
class ExportRequest:
    """What ``planner export`` passes every writer (each reads what its launcher needs)."""

    predictions: dict
    nproc_per_node: int | None = None
    torchtitan_config: str | None = None
    bridge_recipe: str | None = None


@dataclass(frozen=True)
class Format:
    """One ``export --format``: what it writes and the launcher whose rules it obeys."""

    name: str
    write: Callable[[Setup, ExportRequest], str]
    extra_rules: Callable[[ModelSpec, Plan, ExportRequest], list[Violation]] | None = None
    """Rules of the format itself, beyond its launcher's (Bridge's recipe)."""
    release: str | None = None
    """The release it is written for when none is given (None: the launcher's newest)."""
    check_release: Callable[[SoftwareProfile], None] | None = None
    """Refuses a given release the format cannot be written for (a PlannerError)."""
    release_in_rules: bool = True
    """Whether the release's levers are checked with the launcher's rules (False: after writing,
    by ``written_rules``, where the writer checks the release's own rules first)."""
    written_rules: Callable[[str, Plan, SoftwareProfile | None], list[Violation]] | None = None
    """Rules on the written text and the release (Megatron's dated flags)."""
    json: bool = False
    """Its output is a JSON object (the release goes in as a key, not a header line)."""


@dataclass(frozen=True)
class CheckContext:
    """What ``planner check`` knows of a read launch when a launcher adds its own report fields."""

    model: ModelSpec
    hw: object
    job: object
    plan: Plan
    """The plan as read (the launcher's own reader canonicalized it)."""
    target: str
    profile: SoftwareProfile | None


@dataclass(frozen=True)
class ReadBack:
    """A launcher's launch read back to a job: what ``--launch FILE`` (its launcher found by
    :func:`sniffed`, or named by ``--launch-format``) and the launcher's own option take.

    ``reader(path, model=, hw=, gpus=, ..., environ=, script_args=)`` returns the read job: an
    object with ``model``, ``hardware``, ``job``, ``plan``, ``source``, ``model_source``,
    ``hardware_source`` and ``gpus_source``; every other hook takes that object."""

    reader: Callable[..., Any]
    option: str
    """Its own option, kept for compatibility: an alias of ``--launch FILE --launch-format NAME``."""
    sniff: Callable[[str, str], bool]
    """(text, file name) -> whether the file is one of its launches (cheap text tests, no parsing)."""
    title: str
    """What messages call its files ('Megatron-LM launch scripts and argument lists')."""
    model_set: bool = False
    """Whether ``--set`` model overrides reach its reader (``model_overrides=``)."""
    assumptions: Callable[[Any], dict] = lambda read: dict(getattr(read, "assumptions", {}) or {})
    """The modeling Assumptions fields the launch sets (FP8 recipe, CUDA graphs, ...)."""
    check: Callable[[Any, list[Violation], CheckContext], tuple[dict, list[Violation]]] | None = None
    """check's report fields of the launch (source, unknown flags, notes, ...) and its violations
    (the list given, with the launcher's own rules on the launch's text added or in place)."""
    release: Callable[[Any], tuple[str, str] | None] | None = None
    """The software release the launch runs on when nothing names one: (profile name, why)."""
    flag_features: Callable[[Any], list[tuple[str, str]]] | None = None
    """The dated flags the launch sets, (dest, feature): they date its release (Megatron's)."""
    torchtitan_config: Callable[[Any, ModelSpec], str | None] | None = None
    """The --torchtitan-config the launch names, for check's torchtitan rules."""
    explain: Callable[[Any], dict] | None = None
    """explain's extra JSON fields of the launch (``unknown_megatron_flags``)."""


@dataclass(frozen=True)
class Launcher:
    name: str
    label: str
    """How messages name it (``Megatron-LM would reject this plan: ...``)."""
    rules: OwnRules | None
    """Its own start-up rules, on top of the shared ones (planner.launchers.checks)."""
    rules_of: str
    """The searchable launcher whose rules its plans obey (itself, or Megatron for Bridge)."""
    formats: tuple[Format, ...]
    reads: ReadBack | None
    """How check and explain read its launch back (``--launch``, or its own option); None: never."""
    framework: str | None
    """The software framework whose newest release it defaults to (planner/specs/software.py)."""
    schedules: tuple[str, ...] = ()
    """Pipeline schedules it names (planner's name -> its own), for the exporters and readers."""
    release_rules: Callable[[SoftwareProfile], OwnRules | None] | None = None
    """The own rules of a release whose start-up checks differ from :attr:`rules` (None: the same),
    e.g. torchtitan's TOML-era releases, where FP8 is a converter the job file names."""

    def rules_for(self, release: SoftwareProfile | None) -> OwnRules | None:
        """Its own rules as ``release`` (one of its framework's) runs them."""
        if release is not None and self.release_rules is not None:
            found = self.release_rules(release)
            if found is not None:
                return found
        return self.rules

    @property
    def searchable(self) -> bool:
        return self.rules_of == self.name


def _release_lacks(text: str, plan, profile) -> list[Violation]:
    return software_violations(plan, profile) if profile is not None else []


def _bridge_rules(model, plan, req: ExportRequest) -> list[Violation]:
    return bridge_rules.bridge_violations(model, req.bridge_recipe, plan)


LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("megatron", "Megatron-LM", megatron_rules.own_violations, "megatron",
             (Format("megatron", lambda s, r: export_megatron(s, predictions=r.predictions,
                                                              nproc_per_node=r.nproc_per_node),
                     written_rules=lambda text, plan, profile: script_flag_violations(text, profile)),),
             ReadBack(job_from_script, "--megatron-args", megatron_readback.sniff,
                      "Megatron-LM launch scripts and argument lists", model_set=True,
                      assumptions=megatron_readback.assumptions, check=megatron_readback.check,
                      flag_features=megatron_readback.flag_features, explain=megatron_readback.explain),
             "megatron-core"),
    Launcher("bridge", "Megatron-Bridge", megatron_rules.own_violations, "megatron",
             (Format("bridge", lambda s, r: export_bridge(s, predictions=r.predictions, recipe=r.bridge_recipe,
                                                          nproc_per_node=r.nproc_per_node),
                     extra_rules=_bridge_rules, release=BRIDGE_RELEASE),),
             ReadBack(job_from_bridge, "--bridge", bridge_readback.sniff,
                      "Megatron-Bridge run_recipe.py launches, KEY=VALUE override lists and ConfigContainer YAML",
                      check=bridge_readback.check, release=bridge_readback.release),
             "megatron-bridge"),
    Launcher("torchtitan", "torchtitan", torchtitan_rules.own_violations, "torchtitan",
             (Format("torchtitan", lambda s, r: export_torchtitan(s, predictions=r.predictions,
                                                                  torchtitan_config=r.torchtitan_config,
                                                                  nproc_per_node=r.nproc_per_node)),
              Format("torchtitan-toml", lambda s, r: export_torchtitan_toml(s, predictions=r.predictions,
                                                                            torchtitan_config=r.torchtitan_config),
                     release=TOML_RELEASE, check_release=check_toml_release, release_in_rules=False,
                     written_rules=_release_lacks)),
             ReadBack(job_from_torchtitan, "--torchtitan", torchtitan_readback.sniff,
                      "torchtitan TOML job files and 0.3.0 --module/--config launches or argument lists",
                      check=torchtitan_readback.check, release=torchtitan_readback.release,
                      torchtitan_config=torchtitan_readback.torchtitan_config),
             "torchtitan", tuple(torchtitan_rules.TORCHTITAN_SCHEDULES),
             release_rules=lambda p: toml_own_violations if reads_toml(p) else None),
)

JSON_FORMAT = Format("json", lambda s, r: export_json(s, predictions=r.predictions,
                                                      verdicts=verdicts(s, r.torchtitan_config)), json=True)
"""The one format of no launcher: the plan, its predictions and every searchable launcher's verdict."""

_BY_NAME = {launcher.name: launcher for launcher in LAUNCHERS}


def launcher(name: str) -> Launcher:
    """The record of launcher ``name`` (a PlannerError naming the known ones otherwise)."""
    found = _BY_NAME.get(str(getattr(name, "value", name)))
    if found is None:
        raise PlannerError(f"Unknown launcher {name!r}.", hint="Choose " + ", ".join(_BY_NAME) + ".")
    return found


def searchable() -> tuple[Launcher, ...]:
    """The launchers ``--target`` names, in registry order."""
    return tuple(x for x in LAUNCHERS if x.searchable)


def targets() -> tuple[str, ...]:
    """``--target``'s values: every searchable launcher, then ``any``."""
    return tuple(x.name for x in searchable()) + (ANY,)


def formats() -> tuple[tuple[Format, Launcher | None], ...]:
    """Every ``export --format`` with its launcher (None for JSON), in registry order, JSON last."""
    return tuple((f, x) for x in LAUNCHERS for f in x.formats) + ((JSON_FORMAT, None),)


def format_named(name: str) -> tuple[Format, Launcher | None] | None:
    return next(((f, x) for f, x in formats() if f.name == name), None)


def label(target: str) -> str:
    """How messages name ``target``'s launcher (``the shared rules`` for any)."""
    target = str(getattr(target, "value", target))
    return "the shared rules" if target == ANY else launcher(target).label


def _own(target: str) -> OwnRules | None:
    target = str(getattr(target, "value", target))
    if target == ANY:
        return None
    found = _BY_NAME.get(target)
    if found is None:
        raise ValueError(f"unknown launcher target {target!r}")
    return found.rules


def default_software(target: str):
    """The newest release planner knows of the ``target`` launcher's framework; None for
    --target any (no launcher, so no release). --target megatron writes Megatron-LM's pretrain
    script, which is megatron-core's release (Bridge is chosen by naming its profile)."""
    target = str(getattr(target, "value", target))
    if target == ANY:
        return None
    framework = launcher(target).framework
    return newest_release(framework) if framework is not None else None


def resolve_software(name: str | None, target, saved: str | None = None):
    """(profile, where it came from) for --software ``name``, else a saved search's profile, else the
    newest release of ``target``'s launcher (None for --target any). A release of another launcher
    than ``target`` is refused: its rules are not the ones that launch checks."""
    t = str(getattr(target, "value", target))
    if name is not None:
        profile, origin = load_software(name), "--software"
    elif saved is not None:
        profile, origin = load_software(saved), "the saved search"
    else:
        profile = default_software(t)
        return profile, (f"assumed: the newest {profile.framework} release planner knows (give --software)"
                         if profile is not None else "none: --target any names no launcher")
    origin = profile.noted(origin)
    if t != ANY and profile.launcher != t:
        raise PlannerError(f"--software {profile.name} is a {profile.launcher} release ({profile.title}), but the "
                           f"plan is checked for --target {t}.",
                           hint=f"Give a {t} release (see 'planner software') or --target {profile.launcher}.")
    return profile, origin


def launch_choice(src, target: str, given: str | None) -> SoftwareChoice:
    """The release for plan source ``src`` (planner.options.PlanSource) checked for ``target``."""
    reads = src.launch.launcher.reads if src.launch is not None else None
    job = src.launch.job if src.launch is not None else None
    dating = reads.flag_features if reads is not None else None  # a launch whose flags date its release
    dated = dating is not None
    needs: list[tuple[str, str]] = dating(job) if dating is not None else []
    if given is not None or src.saved is not None and src.saved.software:
        profile, origin = resolve_software(given, target, saved=None if given else src.saved.software)
        text = read_launch_text(src)
        return SoftwareChoice(profile, origin, needs, script_flags(text) if text and dated else set())
    text = read_launch_text(src)
    flags = script_flags(text) if text and dated else set()
    named = header_software(text) if text else None
    own = reads.release(job) if reads is not None and reads.release is not None else None
    if named is not None:
        profile, origin = load_software(named), "the launch's planner export header"
    elif own is not None:
        profile, origin = load_software(own[0]), own[1]
    else:
        profile, origin = resolve_software(None, target)
        if profile is not None and needs:
            origin = (f"assumed: the newest {profile.framework} release planner knows; the launch's flags date it no "
                      "earlier than the releases listed in launch_flags_dated (give --software)")
        return SoftwareChoice(profile, origin, needs, flags)
    if target != ANY and profile.launcher != target:
        profile = default_software(target)
        origin = f"assumed: the newest {profile.framework} release planner knows (the launch's is for another launcher)"
    return SoftwareChoice(profile, origin, needs, flags)


def launcher_violations(setup_or_plan, model=None, job=None, target: str = "megatron", *, hw=None,
                        torchtitan_config: str | None = None, software=None, release=None) -> list[Violation]:
    """Every rule ``target`` breaks: the shared model/plan rules, then the launcher's own.

    ``setup_or_plan`` is a resolved :class:`planner.cost.setup.Setup` (model, hw and job are taken
    from it) or a :class:`Plan` with ``model``, ``job`` and ``hw`` given (it is canonicalized here;
    a Plan that resolve_setup would refuse still gets its full list of violations). ``target='any'``
    keeps only the shared rules (plans some launcher, or none yet, could run). ``software`` (a
    :class:`planner.specs.software.SoftwareProfile`) adds one ``software-lever`` violation per plan
    lever that release lacks, where it is ``target``'s launcher's release. The launcher's own rules
    are those of ``release`` (else ``software``), where they differ by release
    (:attr:`Launcher.release_rules`); ``release`` alone adds no lever check (the search, whose
    levers are the release's already)."""
    target = str(getattr(target, "value", target))
    own_release = software if software is not None and software.launcher == target else None
    rules_release = release if release is not None and release.launcher == target else own_release
    own = _own(target)
    if target != ANY and rules_release is not None:
        own = _BY_NAME[target].rules_for(rules_release)
    return violations_with(own, setup_or_plan, model, job, hw=hw, torchtitan_config=torchtitan_config,
                           software=own_release)


def check_launcher_rules(setup_or_plan, model=None, job=None, target: str = "megatron", **kw) -> None:
    """Raise every violation for ``target`` as one PlanRuleError naming the first rule."""
    check_with(_own(target), label(target), setup_or_plan, model, job, **kw)


def verdicts(setup, torchtitan_config: str | None = None) -> dict[str, list[Violation]]:
    """Per searchable launcher, the rules it would refuse ``setup`` by (empty: its export takes it)."""
    return {x.name: launcher_violations(setup, target=x.name, torchtitan_config=torchtitan_config)
            for x in searchable()}


def readable() -> tuple[Launcher, ...]:
    """The launchers whose launches check and explain read back (``--launch-format``'s values)."""
    return tuple(x for x in LAUNCHERS if x.reads is not None)


def _formats_words() -> str:
    return "; ".join(f"{x.name}: {x.reads.title} (also {x.reads.option} FILE)" for x in readable() if x.reads)


def launch_launcher(path, forced: str | None = None) -> Launcher:
    """The launcher whose launch the file ``path`` is: the one ``forced`` names (--launch-format),
    else the one registered launcher whose sniffer recognizes the file's text. None or several is
    a PlannerError that lists the registered formats."""
    names = [x.name for x in readable()]
    if forced is not None:
        found = next((x for x in readable() if x.name == forced), None)
        if found is None:
            raise PlannerError(f"--launch-format {forced!r} is not a launch format planner reads.",
                               hint="Choose " + ", ".join(names) + ".")
        return found
    text = read_text(path, "launch", MAX_SCRIPT_BYTES)
    name = Path(path).name
    matched = [x for x in readable() if x.reads is not None and x.reads.sniff(text, name)]
    if len(matched) == 1:
        return matched[0]
    what = ("matches none of the launch formats planner reads" if not matched else
            "looks like more than one launch format: " + " and ".join(x.name for x in matched))
    raise PlannerError(f"--launch '{path}' {what}. The formats: {_formats_words()}.",
                       hint="Name its format with --launch-format " + "|".join(names)
                       + (", or give a launch of one of them." if not matched else "."))
