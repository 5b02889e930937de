"""Statistics of the signed errors per class, for the calibration and the validation subsets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from planner.validate.evaluate import RunResult

SUBSETS = ("validation", "calibration")
TARGETS = {"median_abs": 0.10, "worst_abs": 0.25, "class_median": 0.10}
"""Issue 20's acceptance on the validation subset: |signed error| median <= 10 %, worst <= 25 %,
each class's median signed error within +-10 %."""


@dataclass(frozen=True)
class Stats:
    n: int
    median_abs: float | None
    median_signed: float | None
    worst: float | None
    """The signed error of largest magnitude."""
    worst_run: str | None

    def to_json(self) -> dict:
        r = lambda x: None if x is None else float(f"{x:.6g}")  # noqa: E731
        return {"n": self.n, "median_abs_error": r(self.median_abs), "median_signed_error": r(self.median_signed),
                "worst_signed_error": r(self.worst), "worst_run": self.worst_run}


def stats_of(pairs: list[tuple[str, float]]) -> Stats:
    if not pairs:
        return Stats(0, None, None, None, None)
    errs = [e for _, e in pairs]
    name, worst = max(pairs, key=lambda p: (abs(p[1]), p[0]))
    return Stats(len(pairs), statistics.median(abs(e) for e in errs), statistics.median(errs), worst, name)


def class_order(k: str) -> tuple:
    moe, gen, prec = k.split(" / ")
    return (moe != "MoE", gen != "Hopper", prec)


def summarize(results: list[RunResult], metric: str = "throughput") -> dict:
    """{subset: {'all': Stats, 'classes': {class: Stats}}} over the counted, evaluated runs."""
    out: dict = {}
    for subset in SUBSETS:
        rows = [r for r in results if r.evaluated and r.counted and r.subset == subset and metric in r.errors]
        classes: dict[str, list] = {}
        for r in rows:
            classes.setdefault(r.klass, []).append((r.name, r.errors[metric]))
        out[subset] = {"all": stats_of([(r.name, r.errors[metric]) for r in rows]),
                       "classes": {k: stats_of(v) for k, v in sorted(classes.items(), key=lambda kv: class_order(kv[0]))}}
    return out


def targets_met(summary: dict) -> dict[str, bool]:
    """Issue 20's targets on the validation subset."""
    v = summary["validation"]
    a = v["all"]
    return {
        "median_abs_error <= 10%": a.median_abs is not None and a.median_abs <= TARGETS["median_abs"],
        "worst |error| <= 25%": a.worst is not None and abs(a.worst) <= TARGETS["worst_abs"],
        "every class median within +-10%": all(s.median_signed is not None and abs(s.median_signed) <= TARGETS["class_median"]
                                               for s in v["classes"].values()),
    }


__all__ = ["Stats", "stats_of", "summarize", "targets_met", "SUBSETS", "TARGETS", "class_order"]


def pct_text(x: float | None) -> str:
    """A signed share as the reports print it ('+3.1%'; '–' for none)."""
    return "–" if x is None else f"{100 * x:+.1f}%"


def md_cell(text: str) -> str:
    """Text for a Markdown table cell (a pipeline layout's '|' would end the cell)."""
    return text.replace("|", "\\|")
