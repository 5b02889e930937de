"""Ties are ties: the model's resolution on one job, and the robust order of plans it cannot tell apart.

Why a resolution. A search ranks plans by predicted step time, but two predictions 2 % apart say little
when the model is off by about 10 % on a run. The per-run error band of a class
(results/validation/error-bands.json, planner.validate.bands) is the wrong yardstick for comparing two
plans of one job, though: much of a run's error (the kernels' achieved rates, the software release, the
cluster) is shared by every plan of that job, and cancels in their ratio. What matters is the error of
the predicted *ratio* of two plans of one job.

The derivation (:func:`resolution_of`), from the published validation runs
(results/validation/published-runs.json, written by ``planner validate``):

1. ``within``: over the ranking series of the report (planner.validate.ranking: jobs that ran several
   plans), the median over pairs of plans of one series of |log(predicted ratio / measured ratio)|.
2. ``across``: the same median over every pair of evaluated runs, whatever their job:
   |log(1 + e_a) - log(1 + e_b)| for signed errors e (predicted / measured - 1). For unrelated runs the
   ratio error is the difference of their errors.
3. ``factor = within / across``: the share of a pair's error that plans of one job do not have in
   common (1 would be independent errors; 0 a model whose errors cancel exactly within a job).
4. Per class (MoE or dense x GPU generation x precision, as the bands): the median |log(1 + e_a) -
   log(1 + e_b)| over pairs of the class's validation runs, times ``factor``. A class without
   validation runs takes the pooled validation runs' value (and says so).

The result is the median error of the step-time ratio of two plans of one job of that class: half the
pairs of plans the validation runs compared were predicted at least this far off in their ratio, so a
predicted difference below it is an order the model cannot vouch for. (On the bundled runs the factor
is about 0.59: the ratio error within a job is about 8 % where the per-run band spans about +-13 %.)

The order among ties (:func:`tie_order`). Starting from the fastest plan not yet placed, every plan
whose step is within the resolution of it forms one tie group; the group is ordered by
:func:`robustness` first and step time last; then the next group starts at the fastest plan left. So no
plan moves ahead of one outside its group, and within a group the robust plan comes first: no runtime
risk (software/risks/runtime.yaml), no offload, the plain distributed optimizer (or DDP) before
Megatron-FSDP variants (for Megatron: torchtitan's FSDP2 is its plain path), less recompute, headroom that is not tight, fewer parallel dimensions,
then the faster step.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from planner.files import read_text

from planner.specs.catalog import catalog_root

from planner.validate.bands import plan_class

REPORT_FILE = "results/validation/published-runs.json"
"""The validation report the resolution is derived from, relative to the catalog root."""

TIGHT_HEADROOM = 0.05
"""Headroom below this share of a GPU's memory counts as tight. planner's own threshold: the
allocator's fragmentation and an MoE's routing imbalance from step to step move the real peak by a few
per cent of HBM, which the estimated peak does not carry; a plan inside it may fail where one with
room does not."""

ROBUSTNESS_ORDER = ("no runtime risk", "no offload", "distributed optimizer or DDP before FSDP variants (Megatron)",
                    "less recompute", "headroom not tight", "fewer parallel dimensions", "faster step")
"""The order within a tie group, most important first (the JSON's ``ties.order``)."""

_RECOMPUTE_RANK = {"none": 0, "selective": 1, "op": 1, "full": 2}
"""Less recompute first: none, then selective modules (or torchtitan's per-op), then full layers."""
FSDP_SHARDINGS = ("zero2", "fsdp", "hsdp")
"""Sharding kinds that are Megatron-FSDP (Megatron) or FSDP2 (torchtitan): the parameter or gradient
buffers are sharded and gathered around each layer, more moving parts than the distributed optimizer."""
_DIMS = ("tp", "cp", "pp", "ep", "dp")


@dataclass(frozen=True)
class Resolution:
    """The model's resolution on one job: steps closer than ``relative`` are ties."""

    relative: float
    """Relative step-time difference (e.g. 0.088): plans within it of a faster one tie with it."""
    klass: str | None
    """The validation class it was derived for (None: the pooled runs)."""
    class_pair_error: float
    """Median |log ratio error| over pairs of the class's validation runs (unrelated runs)."""
    factor: float
    """Within-series pair error over the unrelated-pair error (the part of an error plans of one job
    do not share)."""
    series: int
    """Ranking series the factor was measured on."""
    basis: str
    """How it was derived, one sentence."""

    def to_json(self) -> dict:
        return {"resolution": self.relative, "class": self.klass, "class_pair_error": self.class_pair_error,
                "within_job_factor": self.factor, "series": self.series, "basis": self.basis,
                "order": list(ROBUSTNESS_ORDER)}


NO_RESOLUTION = Resolution(0.0, None, 0.0, 0.0, 0, "no validation report found: every difference counts")


def _log_error(e: float) -> float:
    return math.log1p(e)


def _median_abs_pair_diff(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.median(abs(a - b) for a, b in itertools.combinations(values, 2))


def within_series_error(ranking: dict) -> tuple[float | None, int]:
    """Median |log(predicted ratio / measured ratio)| over pairs of plans within each ranking series
    of a validation report's ``ranking`` object, and the number of series."""
    errs = []
    for s in ranking.get("series", []):
        cs = s["configurations"]
        for a, b in itertools.combinations(cs, 2):
            pred = a["predicted_tokens_per_s_per_gpu"] / b["predicted_tokens_per_s_per_gpu"]
            meas = a["measured_tokens_per_s_per_gpu"] / b["measured_tokens_per_s_per_gpu"]
            errs.append(abs(math.log(pred / meas)))
    return (statistics.median(errs) if errs else None), len(ranking.get("series", []))


def _throughput_error(r: dict) -> float | None:
    if r.get("status") != "evaluated":
        return None
    e = (r.get("errors") or {}).get("throughput")
    return None if e is None else float(e)


def resolution_of(report: dict, klass: str | None) -> Resolution:
    """The resolution for plans of ``klass`` from a ``planner validate`` report (module docstring)."""
    within, n_series = within_series_error(report.get("ranking", {}))
    evaluated = [e for r in report.get("runs", []) if (e := _throughput_error(r)) is not None]
    across = _median_abs_pair_diff([_log_error(e) for e in evaluated])
    if within is None or not across:
        return NO_RESOLUTION
    factor = min(within / across, 1.0)  # errors within a job are never less shared than across jobs
    validation = [r for r in report["runs"] if _throughput_error(r) is not None and r.get("counted", True)
                  and r.get("subset") == "validation"]
    of_class = [_log_error(e) for r in validation if r.get("class") == klass and (e := _throughput_error(r)) is not None]
    spread = _median_abs_pair_diff(of_class)
    used: str | None = klass
    if spread is None:
        spread = _median_abs_pair_diff([_log_error(e) for r in validation if (e := _throughput_error(r)) is not None])
        used = None
    if spread is None:
        return NO_RESOLUTION
    rel = float(f"{math.expm1(spread * factor):.3g}")
    where = (f"{len(of_class)} validation runs of {klass}" if used is not None
             else f"the {len(validation)} validation runs of every class ({klass or 'this GPU generation'} has none)")
    basis = (f"median ratio error of two runs of {where} ({spread:.3f} in log), times {factor:.3f}: the ratio error "
             f"of two plans of one job ({within:.3f}, median over the pairs of {n_series} ranking series) over that "
             f"of two unrelated runs ({across:.3f}, median over pairs of {len(evaluated)} evaluated runs)")
    return Resolution(rel, used, float(f"{spread:.4g}"), float(f"{factor:.4g}"), n_series, basis)


@lru_cache(maxsize=1)
def load_report() -> dict | None:
    """The committed validation report, or None where it is not installed."""
    path = catalog_root() / REPORT_FILE
    if not path.is_file():
        return None
    # own: planner's committed report, which `planner results` regenerates after its searches read it.
    return json.loads(read_text(path, "validation report", limit=64 * 2**20, own=True))


def job_resolution(model, hw, precision: str) -> Resolution:
    """The resolution of a job's plans of ``precision`` on ``hw``."""
    report = load_report()
    if report is None:
        return NO_RESOLUTION
    return resolution_of(report, plan_class(model, hw, precision))


# ---- the order among ties ------------------------------------------------------------------------

@dataclass(frozen=True)
class Robustness:
    """What makes a plan robust, as the ranking compares it (smaller is more robust)."""

    risks: tuple[str, ...]
    offload: bool
    fsdp: bool
    recompute: int
    tight: bool
    dims: int

    def key(self) -> tuple:
        return (bool(self.risks), self.offload, self.fsdp, self.recompute, self.tight, self.dims)


def robustness(plan, headroom_bytes: float, capacity_bytes: float, risks: Sequence[str] = (),
               target: str = "megatron") -> Robustness:
    """The robustness of a typed ``Plan`` with its headroom and the names of the runtime risks it
    matches. The sharding counts for Megatron only: torchtitan's data parallelism is FSDP2 (its plain,
    default path), and under --target any an FSDP plan is the one torchtitan's export takes."""
    off = plan.offload
    return Robustness(
        risks=tuple(risks),
        offload=bool(off.optimizer or off.activations),
        fsdp=target == "megatron" and plan.sharding.kind in FSDP_SHARDINGS,
        recompute=_RECOMPUTE_RANK[plan.recompute.kind],
        tight=headroom_bytes < TIGHT_HEADROOM * capacity_bytes,
        dims=sum(1 for k in _DIMS if (getattr(plan, k) or 1) > 1),
    )


T = TypeVar("T")


def tie_order(items: Sequence[T], step: Callable[[T], float], robust: Callable[[T], tuple],
              resolution: float) -> list[tuple[int, T]]:
    """``items`` in tie order with each one's tie group (1-based): from the fastest item left, the
    items within ``resolution`` of its step form a group, ordered by ``robust`` then step (then the
    given order); then the next group starts at the fastest item left. Returns (group, item) pairs."""
    left = sorted(range(len(items)), key=lambda i: (step(items[i]), i))
    out: list[tuple[int, T]] = []
    group = 0
    while left:
        group += 1
        edge = step(items[left[0]]) * (1 + resolution)
        members = [i for i in left if step(items[i]) <= edge]
        members.sort(key=lambda i: (robust(items[i]), step(items[i]), i))
        out += [(group, items[i]) for i in members]
        chosen = set(members)
        left = [i for i in left if i not in chosen]
    return out
