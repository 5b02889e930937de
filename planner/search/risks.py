"""Runtime risks: lever combinations a framework release accepts at start-up but is documented to fail
on at run time (software/risks/runtime.yaml, each with its source). A plan matching one stays valid;
within a tie it ranks after the plans that match none (planner.search.ties), and ``explain`` names it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.errors import PlannerError

from planner.specs.catalog import catalog_root, read_yaml

RISKS_FILE = "software/risks/runtime.yaml"
"""The risk list, relative to the catalog root."""

_WHEN_KEYS = {"launchers", "moe", "sharding", "min_pp"}


@dataclass(frozen=True)
class Risk:
    name: str
    text: str
    source: str
    launchers: tuple[str, ...] = ()
    """Exports the failure is in; empty: every one."""
    moe: bool | None = None
    sharding: tuple[str, ...] = ()
    min_pp: int = 1

    def applies(self, model, plan, target: str) -> bool:
        """Whether a typed ``Plan`` of ``model`` searched or checked for ``target`` matches. Under
        --target any the plan may be exported to any launcher, so every launcher's risk applies."""
        if self.launchers and target != "any" and target not in self.launchers:
            return False
        if self.moe is not None and bool(model.is_moe) != self.moe:
            return False
        if self.sharding and plan.sharding.kind not in self.sharding:
            return False
        return (plan.pp or 1) >= self.min_pp

    def to_json(self) -> dict:
        return {"name": self.name, "text": self.text, "source": self.source}


def parse_risks(data: dict, origin: str) -> tuple[Risk, ...]:
    """The risks of the file's mapping; a malformed entry is a PlannerError naming it."""
    out = []
    for i, entry in enumerate(data.get("risks") or []):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry[k]
                                                  for k in ("name", "text", "source")):
            raise PlannerError(f"{origin}: risk #{i + 1} needs a name, a text and a source (strings).")
        when = entry.get("when") or {}
        unknown = set(when) - _WHEN_KEYS
        if unknown:
            raise PlannerError(f"{origin}: risk '{entry['name']}' has unknown 'when' keys {sorted(unknown)}.",
                               hint=f"Known: {', '.join(sorted(_WHEN_KEYS))}.")
        min_pp = when.get("min_pp", 1)
        if isinstance(min_pp, bool) or not isinstance(min_pp, int) or min_pp < 1:
            raise PlannerError(f"{origin}: risk '{entry['name']}': min_pp must be a positive integer.")
        out.append(Risk(entry["name"], " ".join(entry["text"].split()), entry["source"],
                        tuple(when.get("launchers") or ()), when.get("moe"), tuple(when.get("sharding") or ()),
                        min_pp))
    return tuple(out)


@lru_cache(maxsize=1)
def load_risks() -> tuple[Risk, ...]:
    """The bundled runtime-risk list (empty where it is not installed)."""
    path = catalog_root() / RISKS_FILE
    if not path.is_file():
        return ()
    return parse_risks(read_yaml(path, "runtime-risk list"), RISKS_FILE)


def plan_risks(model, plan, target: str, risks: tuple[Risk, ...] | None = None) -> list[Risk]:
    """The runtime risks a typed ``Plan`` matches."""
    return [r for r in (load_risks() if risks is None else risks) if r.applies(model, plan, target)]
