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

import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.specs.catalog import catalog_root
from planner.units import fmt_time, signed_zero

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
    sb = step_band(step_time_s, out)
    if sb is not None:
        out["measured_step_time_s_p25_p75"] = [sb.low_s, sb.high_s]
        out["expected_step_time_s"] = sb.expected_s
        out["contains_prediction"] = sb.contains_prediction
    return out


@dataclass(frozen=True)
class StepBand:
    """A predicted step and where the measured one likely falls: the one definition the search
    table, ``explain``, ``--markdown`` and the JSON read. ``expected_s`` is the prediction
    corrected by the class's median error; ``low_s``-``high_s`` is the middle half of the class's
    validation runs, applied to the prediction. Because the quartiles bracket the median, the band
    always contains ``expected_s``; it contains ``predicted_s`` only when the class's middle half
    straddles zero error (otherwise ``bias`` says which way the class's runs went)."""

    predicted_s: float
    expected_s: float
    low_s: float
    high_s: float

    @property
    def contains_prediction(self) -> bool:
        return self.low_s <= self.predicted_s <= self.high_s

    @property
    def bias(self) -> str | None:
        """'slower' when even the class's fastest quarter ran slower than predicted (the band lies
        above the prediction), 'faster' when even its slowest quarter ran faster; None otherwise."""
        if self.contains_prediction:
            return None
        return "slower" if self.low_s > self.predicted_s else "faster"

    def cell(self) -> str:
        """The band in a table cell: the measured step's likely range."""
        if self.high_s >= 10:  # three digits are all a quartile of ten runs can say
            return f"{self.low_s:.1f}-{self.high_s:.1f} s"
        return f"{_num(self.low_s)}-{fmt_time(self.high_s)}"

    def sentence(self) -> str:
        """The prediction, the bias-corrected expectation and the band, in words."""
        rng = f"{fmt_time(self.low_s)} to {fmt_time(self.high_s)}"
        if self.bias is None:
            return (f"predicted step {fmt_time(self.predicted_s)}; measured step likely {rng} (median-corrected "
                    f"{fmt_time(self.expected_s)})")
        return (f"predicted step {fmt_time(self.predicted_s)}; this class's validation runs ran {self.bias} than "
                f"predicted (median {_pct(self.expected_s / self.predicted_s - 1)} on the step), so the measured step is "
                f"expected near {fmt_time(self.expected_s)}, likely {rng}")


def _pct(x: float) -> str:
    return f"{signed_zero(100 * x):+.0f} %"


def _num(seconds: float) -> str:
    """The number of fmt_time without its unit (the band's high end carries it)."""
    return fmt_time(seconds).split(" ")[0]


def step_band(step_time_s: float | None, band: dict | None) -> StepBand | None:
    """The StepBand of a plan's predicted step and its ``time.error_band`` (None without a
    prediction or validation runs of its class). Measured step = predicted x (1 + signed error)
    (the module's sign convention)."""
    if step_time_s is None or not band or not band.get("n"):
        return None
    return StepBand(predicted_s=step_time_s, expected_s=step_time_s * (1 + band["median_signed_error"]),
                    low_s=step_time_s * (1 + band["p25_signed_error"]), high_s=step_time_s * (1 + band["p75_signed_error"]))


def band_text(band: dict | None, step_time_s: float | None = None) -> str:
    """One line for the terminal: the class, its median and middle half, and the run count; with
    ``step_time_s``, the StepBand's sentence (prediction, expectation, band)."""
    if not band:
        return ""
    if not band.get("n"):
        return f"error band: none ({band.get('class') or 'this GPU generation'}: {band.get('note', '')})"
    text = (f"error band ({band['class']}, {band['n']} validation runs): planner {_pct(band['median_signed_error'])} "
            f"median, middle half {_pct(band['p25_signed_error'])} to {_pct(band['p75_signed_error'])}, "
            f"range {_pct(band['min_signed_error'])} to {_pct(band['max_signed_error'])} "
            f"(+: predicted faster than measured)")
    sb = step_band(step_time_s, band)
    return text + (f"; {sb.sentence()}" if sb is not None else "")


def attach_band(evaluation: dict, setup) -> dict:
    """Put the plan's class band into its evaluation's ``time`` object (where time is modeled)."""
    tj = evaluation.get("time")
    if tj is not None and tj.get("modeled", True) and tj.get("step_time_s") is not None:
        precision = setup.plan.precision or setup.job.default_precision
        tj["error_band"] = error_band(setup.model, setup.hw, str(getattr(precision, "value", precision)),
                                      tj["step_time_s"])
    return evaluation
