"""How sure a prediction is: the validation error band of a plan's class.

The bundled published runs (tests/data/published_runs.yaml, reported in
results/validation/published-runs.json) give, per class (MoE or dense x Hopper or Blackwell x
precision), the signed errors of planner's throughput on the runs of the validation subset (the
calibration subset is left out: constants may be fit on it). ``planner results`` writes their
median and spread to results/validation/error-bands.json (checked byte for byte by
``--check``); ``explain`` and ``search`` print the band of each plan's class next to its
predicted step time and put it in their JSON under ``time.error_band``.

Sign convention (the report's): signed error = predicted / measured - 1 on tokens/s per GPU, so a
positive error means planner predicts the run faster than it ran; for the same tokens the measured
step time is the predicted one times (1 + error).
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from pathlib import Path

BANDS_FILE = "results/validation/error-bands.json"
"""Where the bands are, relative to the catalog root (planner.specs.catalog.catalog_root)."""
GENERATIONS = {"hopper": "Hopper", "blackwell": "Blackwell", "blackwell_ultra": "Blackwell"}
"""Hardware catalog ``gpu.generation`` to the report's generation; others have no published runs."""


def _q(x: float) -> float:
    return float(f"{x:.4g}")


def band_of(errors: list[float]) -> dict:
    """Median and spread of signed errors: quartiles (the middle half) and range."""
    errs = sorted(errors)
    if len(errs) >= 2:
        p25, _, p75 = statistics.quantiles(errs, n=4, method="inclusive")
    else:
        p25 = p75 = errs[0]
    return {"n": len(errs), "median_signed_error": _q(statistics.median(errs)), "p25_signed_error": _q(p25),
            "p75_signed_error": _q(p75), "min_signed_error": _q(errs[0]), "max_signed_error": _q(errs[-1])}


def bands_from_report(report: dict) -> dict:
    """The bands of a `planner validate` report JSON: per class over its counted, evaluated
    validation runs, and over all of them."""
    rows = [r for r in report["runs"] if r["status"] == "evaluated" and r.get("counted", True)
            and r["subset"] == "validation" and r["errors"].get("throughput") is not None]
    classes: dict[str, list[float]] = {}
    for r in rows:
        classes.setdefault(r["class"], []).append(r["errors"]["throughput"])
    return {
        "source": f"planner validate {report.get('runs_file', '')}: the validation subset "
                  "(results/validation/published-runs.json)",
        "sign_convention": "signed error = predicted / measured - 1 on tokens/s per GPU (positive: planner predicts "
                           "faster than measured; measured step = predicted step x (1 + error))",
        "all": band_of([r["errors"]["throughput"] for r in rows]),
        "classes": {k: band_of(v) for k, v in sorted(classes.items())},
    }


@lru_cache(maxsize=1)
def load_bands() -> dict | None:
    """The committed bands, or None where the file is not installed."""
    import json

    from planner.specs.catalog import catalog_root

    path = Path(catalog_root()) / BANDS_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def plan_class(model, hw, precision: str) -> str | None:
    """The report's class of a plan, or None for a GPU generation with no published runs."""
    g = hw.generation
    gen = GENERATIONS.get(getattr(g, "value", g))
    if gen is None:
        return None
    return f"{'MoE' if model.is_moe else 'dense'} / {gen} / {precision}"


def error_band(model, hw, precision: str, step_time_s: float | None = None, bands: dict | None = None) -> dict:
    """The ``time.error_band`` object of one plan: its class's validation band (``n`` 0 when no
    validation run is of its class), and with ``step_time_s`` the measured step time the
    quartiles imply."""
    bands = bands if bands is not None else load_bands()
    klass = plan_class(model, hw, precision)
    out: dict = {"class": klass, "subset": "validation"}
    band = None if bands is None or klass is None else bands["classes"].get(klass)
    if band is None:
        out["n"] = 0
        out["note"] = ("no published validation run of this class" if bands is not None
                       else f"{BANDS_FILE} not found")
        return out
    out.update(band)
    if step_time_s is not None:
        out["measured_step_time_s_p25_p75"] = [step_time_s * (1 + band["p25_signed_error"]),
                                               step_time_s * (1 + band["p75_signed_error"])]
    return out


def band_text(band: dict | None) -> str:
    """One line for the terminal: the class, its median and middle half, and the run count."""
    if not band:
        return ""
    if not band.get("n"):
        return f"error band: none ({band.get('class') or 'this GPU generation'}: {band.get('note', '')})"
    pct = lambda x: f"{100 * x:+.0f} %"  # noqa: E731
    text = (f"error band ({band['class']}, {band['n']} validation runs): planner {pct(band['median_signed_error'])} "
            f"median, middle half {pct(band['p25_signed_error'])} to {pct(band['p75_signed_error'])}, "
            f"range {pct(band['min_signed_error'])} to {pct(band['max_signed_error'])} "
            f"(+: predicted faster than measured)")
    rng = band.get("measured_step_time_s_p25_p75")
    if rng:
        from planner.units import fmt_time

        text += f"; measured step likely {fmt_time(rng[0])} to {fmt_time(rng[1])}"
    return text


def attach_band(evaluation: dict, setup) -> dict:
    """Put the plan's class band into its evaluation's ``time`` object (where time is modeled)."""
    tj = evaluation.get("time")
    if tj is not None and tj.get("modeled", True) and tj.get("step_time_s") is not None:
        precision = setup.plan.precision or setup.job.default_precision
        tj["error_band"] = error_band(setup.model, setup.hw, str(getattr(precision, "value", precision)),
                                      tj["step_time_s"])
    return evaluation
