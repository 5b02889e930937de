"""What every part of :class:`planner.cost.compose.Costs` reads: the batch and its memo, the
variants' row levers, the keys' degrees, spans and parameters, and which plans a walked schedule
covers (the in-flight memory and the pipeline phase both follow it)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.cost.arrays import Num
from planner.cost.constant import RankParams, rank_params_of
from planner.cost.topology import GroupSpan
from planner.cost.walked import walk_schedule
from planner.specs.plan import Degrees, EpOverlap
from planner.specs.schedule import Schedule

if TYPE_CHECKING:
    from planner.cost.compose import PlanBatch


def at(obj, idx):
    """The numbers of some plans (an index array) or of one plan (an int) in a batch result:
    array fields of dataclasses and tuples taken at ``idx``, everything else kept."""
    kind = type(obj)
    if kind is np.ndarray:
        return obj[idx]
    if kind is tuple:
        return tuple([at(x, idx) for x in obj])
    names = _FIELDS.get(kind)
    if names is None:  # first sight of this type (the search indexes block costs by the thousand)
        if isinstance(obj, np.ndarray):
            return obj[idx]
        if isinstance(obj, tuple):
            return kind(*(at(x, idx) for x in obj))
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(obj)) \
            if dataclasses.is_dataclass(obj) else ()
    if not names:
        return obj
    return kind(**{n: at(getattr(obj, n), idx) for n in names})


_INTERNED = itertools.count()
"""Ids of TermsBase._interned keys (unique in the process, so across contexts too)."""

_FIELDS: dict[type, tuple[str, ...]] = {float: (), int: (), str: (), bool: (), type(None): ()}


def _column(x, n: int) -> np.ndarray:
    """A per-plan value as a float array of the batch's length (scalars are shared by all)."""
    return x if isinstance(x, np.ndarray) and x.shape == (n,) else np.full(n, x, dtype=float)


def memory_schedule(schedule: Schedule | None, levers, vpp: int) -> Schedule | None:
    """The schedule whose in-flight vectors a plan's memory follows (planner.cost.schedules.inflight),
    None for Megatron's 1F1B and interleaved without EP overlap (planner.cost.schedule): the
    schedule the time walk runs (:func:`planner.cost.walked.walk_schedule`)."""
    return walk_schedule(schedule, levers, vpp)


class TermsBase:
    """The batch a :class:`~planner.cost.compose.Costs` composes and what all its parts share."""

    def __init__(self, batch: PlanBatch):
        self.batch = batch
        self.ctx = batch.ctx
        self.lv = batch.levers
        self.n = batch.n_keys * len(batch.variants)
        """Plans in the batch (keys x variants)."""
        self._rows: dict[tuple, Any] = {}

    def _memo(self, term: str, *levers, fn):
        return self.ctx.cached((self.batch.group, term, *levers), fn)

    def _row(self, *fields) -> tuple:
        """The variants' values of some row levers (a memo key; formed once per batch, as every
        term's lookup reads one)."""
        hit = self._rows.get(fields)
        if hit is None:
            hit = self._rows[fields] = tuple(tuple(getattr(v, f) for f in fields) for v in self.batch.variants)
        return hit

    def _per_variant(self, fn) -> np.ndarray:
        """``fn(levers)`` over the batch's keys for each variant, side by side (plan order)."""
        n = self.batch.n_keys
        return np.concatenate([_column(fn(v), n) for v in self.batch.variants])

    def _per_variant_by(self, fields: tuple[str, ...], fn) -> np.ndarray:
        """:meth:`_per_variant` for an ``fn`` that reads only the levers ``fields``: evaluated once
        per distinct value of them (the memory tables' C batches list 42 variants, 3 dispatchers
        among them), the same arrays side by side."""
        n = self.batch.n_keys
        seen: dict[tuple, np.ndarray] = {}
        cols = []
        for v, k in zip(self.batch.variants, self._row(*fields)):
            col = seen.get(k)
            if col is None:
                col = seen[k] = _column(fn(v), n)
            cols.append(col)
        return np.concatenate(cols)

    def _tile(self, x) -> np.ndarray:
        """A value of the batch's keys (the same under every variant) for every plan."""
        return np.tile(_column(x, self.batch.n_keys), len(self.batch.variants))

    def _key_spans(self) -> dict[str, GroupSpan]:
        return self._memo("key_spans", fn=lambda: self.ctx.keys.spans(self.batch.key_rows))

    def spans(self) -> dict[str, GroupSpan]:
        """Where each plan's process groups sit (GroupSpans with array fields)."""
        return self._memo("spans", len(self.batch.variants), fn=lambda: self.ctx.keys.spans(self.batch.rows))

    def _buckets(self, values: np.ndarray, name: str) -> list[tuple[int, np.ndarray]]:
        """(value, the plans that have it) for a per-plan integer (schedule profiles are shared)."""
        return self._memo("buckets", name, len(self.batch.variants),
                          fn=lambda: [(int(v), np.flatnonzero(values == v)) for v in np.unique(values)])

    def _compute_levers(self) -> int:
        return self._interned(("compute",), lambda: self._row("recompute", "stage_recompute", "precision",
                                                              "dispatcher", "ep_overlap", "cuda_graphs"))

    def _memory_levers(self, r: int) -> int:
        """The variants' levers the in-flight memory of rank ``r`` reads (recompute and its
        layers on the rank, precision, EP overlap), as a memo key."""
        return self._interned(("memory", r), lambda: tuple(
            (v.recompute, v.memory_full_layers(r), v.precision, v.ep_overlap) for v in self.batch.variants))

    def _interned(self, name: tuple, key) -> int:
        """A memo key of the variants' levers (``key()``, formed once per batch) as a small int,
        equal ints for equal keys in one context: a key of 42 variants hashes each variant's
        Recompute whenever it is looked up (1.2 million __hash__ calls in the default search)."""
        hit = self._rows.get(name)
        if hit is None:
            hit = self._rows[name] = self.ctx.cached(("interned", key()), lambda: next(_INTERNED))
        return hit

    def key_deg(self) -> Degrees:
        """The degrees of the batch's keys (what no lever changes is computed once per key)."""
        return self._memo("key_deg", fn=lambda: self.ctx.keys.degrees(self.batch.key_rows))

    def _rank_params(self, r: int) -> RankParams:
        """Rank ``r``'s parameters per GPU, per key: one count for its memory, its data-parallel
        volume and its optimizer step (planner.cost.constant.rank_params_of)."""
        b, d = self.batch, self.key_deg()
        return self._memo("rank_params", r, fn=lambda: rank_params_of(self.ctx.model, b.layout, r, d.tp, d.etp, d.ep))

    def rank_params(self, r: int) -> tuple[Num, Num]:
        """(dense, expert) parameters one GPU of rank ``r`` holds, per key."""
        rp = self._rank_params(r)
        return rp.dense, rp.expert

    def schedule_columns(self) -> list[tuple[Schedule, np.ndarray]]:
        """(walked schedule, its plans) for the plans whose schedule the closed forms do not
        cover (:func:`planner.cost.walked.walk_schedule`; EP overlap only counts with EP > 1)."""
        def fn():
            b = self.batch
            nk = b.n_keys
            ep = np.asarray(b.deg.ep)  # Degrees of a batch: one entry per plan
            out: dict[Schedule, list] = {}
            for j, v in enumerate(b.variants):
                for has_ep in (False, True):
                    lv = v if has_ep else dataclasses.replace(v, ep_overlap=EpOverlap.OFF)
                    sched = memory_schedule(b.schedule, lv, b.vpp)
                    sel = j * nk + np.flatnonzero((ep[j * nk:(j + 1) * nk] > 1) == has_ep)
                    if sched is not None and len(sel):
                        out.setdefault(sched, []).append(sel)
            return [(sched, np.concatenate(sels)) for sched, sels in out.items()]

        return self._memo("schedule_cols", self._row("ep_overlap"), fn=fn)
