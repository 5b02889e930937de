"""Ranking quality: does planner order the plans of one job as the measurements do?

A search is only as good as the order it puts plans in, which a per-run error does not show (a model
that is 20 % fast on every plan ranks perfectly). The published runs hold jobs that ran several plans:
the same model (and model overrides), hardware, GPU count, global batch and sequence length. Such a
*ranking series* is found from the data by that identity. Runs of one series with equal planner inputs
(software versions or optimization steps planner cannot see) are one configuration with one vote, the
newest (the last in the runs file), as the class statistics count a series (``evaluate_runs``); a
series needs two configurations.

Per series and pooled over all series:

- ordered right: of the pairs of configurations whose measured throughputs differ by more than
  :data:`DECISIVE` (the faster over the slower), the share that planner predicts in the same order
  (a predicted tie is not an order);
- Kendall's tau-b over the configurations (measured against predicted tokens/s per GPU, ties in
  either counted as tau-b does). Pooled, it is tau-b over the pairs within a series (pairs across
  series compare different jobs): the sums of its numerator and of both tie-corrected pair counts.

Both are computed from the throughputs as the report prints them (six significant digits), so the
JSON reproduces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.validate.evaluate import RunResult

DECISIVE = 0.05
"""A pair counts for 'ordered right' when its measured throughputs differ by more than this (faster /
slower - 1): closer pairs are within run-to-run and software-version noise of the published numbers."""


@dataclass(frozen=True)
class TauTerms:
    """Kendall's tau-b of one sample as sums over its pairs: sum of sign(dx) * sign(dy), and the pairs
    not tied in x and not tied in y. Terms of several samples add up to the tau-b of their pairs."""

    signed: int
    untied_x: int
    untied_y: int

    def __add__(self, other: TauTerms) -> TauTerms:
        return TauTerms(self.signed + other.signed, self.untied_x + other.untied_x, self.untied_y + other.untied_y)

    @property
    def tau_b(self) -> float | None:
        """(concordant - discordant) / sqrt((n0 - ties in x) (n0 - ties in y)); None when either side
        has no untied pair (every value equal: no order to compare)."""
        if self.untied_x == 0 or self.untied_y == 0:
            return None
        return self.signed / math.sqrt(self.untied_x * self.untied_y)


NO_PAIRS = TauTerms(0, 0, 0)


def tau_terms(x, y) -> TauTerms:
    """The tau-b terms of paired samples x, y, from the matrices of pairwise signs (each unordered
    pair appears twice, hence the halving): a sign product of +1 is concordant, -1 discordant, 0 a tie."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("tau_terms takes two one-dimensional samples of one length")
    sx = np.sign(x[:, None] - x[None, :]).astype(int)
    sy = np.sign(y[:, None] - y[None, :]).astype(int)
    return TauTerms(int((sx * sy).sum()) // 2, int(np.abs(sx).sum()) // 2, int(np.abs(sy).sum()) // 2)


def kendall_tau_b(x, y) -> float | None:
    """Kendall's tau-b of paired samples (None where one of them is constant)."""
    return tau_terms(x, y).tau_b


@dataclass(frozen=True)
class Config:
    """One configuration of a series: the run that votes, and the runs with its planner inputs."""

    name: str
    measured: float
    predicted: float
    same_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pair:
    """Two configurations whose measured throughputs differ by more than DECISIVE."""

    faster: Config
    """Faster as measured."""
    slower: Config

    @property
    def measured_ratio(self) -> float:
        return self.faster.measured / self.slower.measured

    @property
    def predicted_ratio(self) -> float:
        return self.faster.predicted / self.slower.predicted

    @property
    def right(self) -> bool:
        return self.faster.predicted > self.slower.predicted


@dataclass(frozen=True)
class Series:
    model: str
    hardware: str
    gpus: int
    global_batch: int
    seq_len: int
    configs: tuple[Config, ...]

    @property
    def label(self) -> str:
        return f"{self.model} on {self.gpus} x {self.hardware}, batch {self.global_batch} x {self.seq_len}"

    @property
    def pairs(self) -> int:
        n = len(self.configs)
        return n * (n - 1) // 2

    @property
    def decisive(self) -> list[Pair]:
        return decisive_pairs(self.configs)

    @property
    def terms(self) -> TauTerms:
        return tau_terms([c.measured for c in self.configs], [c.predicted for c in self.configs])


def decisive_pairs(configs) -> list[Pair]:
    """The pairs whose measured throughputs differ by more than DECISIVE, faster first."""
    out = []
    for i, a in enumerate(configs):
        for b in configs[i + 1:]:
            fast, slow = (a, b) if a.measured >= b.measured else (b, a)
            if fast.measured > slow.measured * (1 + DECISIVE):
                out.append(Pair(fast, slow))
    return out


def _r6(x: float) -> float:
    return float(f"{x:.6g}")


def ranking_series(results: list[RunResult]) -> list[Series]:
    """The ranking series of evaluated runs, in the order their first run appears."""
    groups: dict[tuple, dict[tuple, list[RunResult]]] = {}
    for r in results:
        if not r.evaluated or r.signature is None:  # an evaluated run always has its inputs' signature
            continue
        run = r.run
        job = (run.model, repr(sorted(run.model_overrides.items())), run.hardware, run.gpus, run.global_batch,
               run.seq_len)
        groups.setdefault(job, {}).setdefault(r.signature, []).append(r)
    out = []
    for (model, _, hardware, gpus, batch, seq), by_inputs in groups.items():
        if len(by_inputs) < 2:
            continue
        configs = []
        for same in by_inputs.values():
            newest = same[-1]
            configs.append(Config(newest.name, _r6(newest.measured["tokens_per_s_per_gpu"]),
                                  _r6(newest.predicted["tokens_per_s_per_gpu"]), tuple(s.name for s in same[:-1])))
        out.append(Series(model, hardware, gpus, batch, seq, tuple(configs)))
    return out


def _share(right: int, of: int) -> float | None:
    return None if of == 0 else _r6(right / of)


def _tau(terms: TauTerms) -> float | None:
    t = terms.tau_b
    return None if t is None else _r6(t)


def ranking_json(results: list[RunResult]) -> dict:
    """The report's 'ranking' object: the definition, the pooled numbers and every series."""
    series = ranking_series(results)
    rows: list[dict[str, Any]] = []
    for s in series:
        dec = s.decisive
        right = sum(p.right for p in dec)
        rows.append({
            "model": s.model, "hardware": s.hardware, "gpus": s.gpus, "global_batch": s.global_batch,
            "seq_len": s.seq_len,
            "configurations": [{"run": c.name, "measured_tokens_per_s_per_gpu": c.measured,
                                "predicted_tokens_per_s_per_gpu": c.predicted, "same_inputs": list(c.same_inputs)}
                               for c in s.configs],
            "pairs": s.pairs, "decisive_pairs": len(dec), "ordered_right": right,
            "ordered_right_share": _share(right, len(dec)), "kendall_tau_b": _tau(s.terms),
            "misordered": [{"faster_measured": p.faster.name, "slower_measured": p.slower.name,
                            "measured_ratio": _r6(p.measured_ratio), "predicted_ratio": _r6(p.predicted_ratio)}
                           for p in dec if not p.right],
        })
    decisive = sum(r["decisive_pairs"] for r in rows)
    right = sum(r["ordered_right"] for r in rows)
    pooled = sum((s.terms for s in series), NO_PAIRS)
    return {
        "definition": (f"ranking series: evaluated runs of one model, hardware, GPU count, global batch and sequence "
                       f"length with two or more planner inputs (runs with equal inputs vote once, as the newest); "
                       f"ordered right: pairs whose measured tokens/s per GPU differ by more than {DECISIVE:.0%} that "
                       f"planner predicts in the same order; Kendall's tau-b of predicted against measured tokens/s "
                       f"per GPU, overall over the pairs within a series"),
        "decisive_difference": DECISIVE,
        "overall": {"series": len(rows), "configurations": sum(len(s.configs) for s in series),
                    "pairs": sum(r["pairs"] for r in rows), "decisive_pairs": decisive, "ordered_right": right,
                    "ordered_right_share": _share(right, decisive), "kendall_tau_b": _tau(pooled)},
        "series": rows,
    }


__all__ = ["DECISIVE", "TauTerms", "tau_terms", "kendall_tau_b", "Config", "Pair", "Series", "decisive_pairs",
           "ranking_series", "ranking_json"]
