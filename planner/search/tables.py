"""Integer cost tables over structural keys and lever groups.

Memory and time separate into terms that each depend on the structural key and a few levers:

    peak(stage r) = W[r](sharding, moments, offload) + C[r](sharding, dispatcher, ep_overlap)
                    + max(A[r](recompute, precision, offload, ep_overlap), OT(moments, precision))
    step time     = TP(recompute, precision, dispatcher, ep_overlap, offload)
                    + TD(sharding, precision, recompute) + TO(sharding, moments, offload, precision)

W is constant memory (weights, gradients, optimizer), C communication and FSDP buffers, A the
activation-and-transient peak over the schedule, OT optimizer-step temporaries; TP the pipeline
(compute, exposed TP/CP/EP/PP communication, bubble), TD exposed data-parallel communication, TO
the optimizer step and offload traffic. Each entry is computed with the cost model's own functions
(planner.cost) on a setup carrying those lever values, so the tables and `explain` agree. Memory is
in MiB rounded up, time in microseconds rounded; CP-SAT and the exhaustive oracle read the same
integers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from planner.search.space import LEVERS, Space, Struct, make_plan

MiB = 2**20

GROUPS: dict[str, tuple[str, ...]] = {
    "W": ("sharding", "moments", "offload"),
    "C": ("sharding", "dispatcher", "ep_overlap"),
    "A": ("recompute", "precision", "offload", "ep_overlap"),
    "OT": ("moments", "precision"),
    "TP": ("recompute", "precision", "dispatcher", "ep_overlap", "offload"),
    "TD": ("sharding", "precision", "recompute"),
    "TO": ("sharding", "moments", "offload", "precision"),
}
RULE_GROUPS = {
    "R1": ("recompute", "offload", "ep_overlap", "dispatcher"),
    "R2": ("sharding", "precision", "moments", "offload"),
}


def combos(space: Space, group: tuple[str, ...]) -> list[tuple]:
    """Value combinations of a lever group, in mixed-radix order (first lever most significant)."""
    return list(itertools.product(*(space.levers[k] for k in group)))


def combo_index(space: Space, group: tuple[str, ...], lever_idx: dict[str, int]) -> int:
    idx = 0
    for k in group:
        idx = idx * len(space.levers[k]) + lever_idx[k]
    return idx


class TimeTerms:
    """Splits the time model's step time into the pipeline, data-parallel and optimizer terms."""

    def terms(self, setup) -> tuple[float, float, float]:
        from planner.cost.time import time_terms

        t = time_terms(setup)
        return t.pipeline, t.data_parallel, t.optimizer


@dataclass
class Tables:
    space: Space
    structs: list[Struct]
    W: np.ndarray  # (S, R, |W|) MiB
    C: np.ndarray  # (S, R, |C|) MiB
    A: np.ndarray  # (S, R, |A|) MiB
    HW: np.ndarray  # (S, R, |W|) MiB of host memory
    HA: np.ndarray  # (S, R, |A|) MiB of host memory
    OT: np.ndarray  # (|OT|,) MiB
    TP: np.ndarray  # (S, |TP|) microseconds
    TD: np.ndarray  # (S, |TD|)
    TO: np.ndarray  # (S, |TO|)
    R1: np.ndarray  # (S, |R1|) bool: launcher accepts
    R2: np.ndarray  # (S, |R2|) bool
    cap_mib: int
    """Allocated-memory limit: (usable HBM - CUDA context - user margin) / (1 + allocator fraction)."""
    host_cap_mib: int
    stages_kept: list[list[int]] = field(default_factory=list)
    """For each structural key, the pipeline ranks whose constraints are not dominated."""

    @property
    def n_levers(self) -> int:
        return self.space.lever_product_size


def _variant(setup, **changes):
    """The setup with some plan keys changed (no re-validation: the values come from the
    space's own option lists, already checked)."""
    d = {k: v for k, v in setup.plan.__dict__.items() if k in setup.plan.model_fields}
    d.update(changes)
    from planner.specs.plan import Plan

    return dataclasses.replace(setup, plan=Plan.model_construct(**d))


def _mib(x: float) -> int:
    return int(math.ceil(x / MiB - 1e-9))


def _us(x: float) -> int:
    return int(round(x * 1e6))


def build_tables(space: Space, *, assumptions=None, time_terms: TimeTerms | None = None) -> Tables:
    """Evaluate every structural key's lever-group tables with the cost model."""
    from planner.cost.constant import constant_memory
    from planner.cost.memory import activation_peak, comm_buffers, optimizer_transient, stage_chunks
    from planner.cost.setup import Assumptions, resolve_setup
    from planner.search.rulecheck import lever_allowed

    _RG = RULE_GROUPS

    assumptions = assumptions or Assumptions()
    time_terms = time_terms or TimeTerms()
    base_levers = {k: v[0] for k, v in space.levers.items()}
    g = {name: combos(space, grp) for name, grp in GROUPS.items()}
    structs = space.structs
    nS = len(structs)
    maxR = max((s.pp for s in structs), default=1)
    W = np.zeros((nS, maxR, len(g["W"])), dtype=np.int64)
    C = np.zeros((nS, maxR, len(g["C"])), dtype=np.int64)
    A = np.zeros((nS, maxR, len(g["A"])), dtype=np.int64)
    HW = np.zeros_like(W)
    HA = np.zeros_like(A)
    OT = np.zeros(len(g["OT"]), dtype=np.int64)
    TP = np.zeros((nS, len(g["TP"])), dtype=np.int64)
    TD = np.zeros((nS, len(g["TD"])), dtype=np.int64)
    TO = np.zeros((nS, len(g["TO"])), dtype=np.int64)
    R1 = np.zeros((nS, len(combos(space, _RG["R1"]))), dtype=bool)
    R2 = np.zeros((nS, len(combos(space, _RG["R2"]))), dtype=bool)
    rule_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    kept: list[list[int]] = []
    eff_setup = None
    for si, s in enumerate(structs):
        setup = resolve_setup(space.model, space.hw, space.job, make_plan(s, base_levers), assumptions)
        eff_setup = eff_setup or setup
        for r in range(s.pp):
            for ci, values in enumerate(g["W"]):
                v = _variant(setup, **dict(zip(GROUPS["W"], values)))
                cm = constant_memory(v, r)
                W[si, r, ci] = _mib(cm.total)
                HW[si, r, ci] = _mib(cm.host_optimizer)
            for ci, values in enumerate(g["C"]):
                v = _variant(setup, **dict(zip(GROUPS["C"], values)))
                C[si, r, ci] = _mib(comm_buffers(v) + constant_memory(v, r).fsdp_buffers)
            for ci, values in enumerate(g["A"]):
                v = _variant(setup, **dict(zip(GROUPS["A"], values)))
                chunks = stage_chunks(v, r)
                A[si, r, ci] = _mib(activation_peak(v, r, chunks))
                if v.plan.offloads_activations:
                    from planner.cost.schedule import max_inflight

                    HA[si, r, ci] = _mib(max_inflight(s.pp, s.vpp, s.micro_batches, r) * max(c.kept for c in chunks))
        kept.append(_undominated(W[si, : s.pp], C[si, : s.pp], A[si, : s.pp], HW[si, : s.pp], HA[si, : s.pp]))
        for name, table in (("TP", TP), ("TD", TD), ("TO", TO)):
            part = {"TP": 0, "TD": 1, "TO": 2}[name]
            for ci, values in enumerate(g[name]):
                v = _variant(setup, **dict(zip(GROUPS[name], values)))
                table[si, ci] = _us(time_terms.terms(v)[part])
        sig = s.signature()
        if sig not in rule_cache:
            rule_cache[sig] = (
                np.array(list(lever_allowed(space, s, _RG["R1"]).values()), dtype=bool),
                np.array(list(lever_allowed(space, s, _RG["R2"]).values()), dtype=bool),
            )
        R1[si], R2[si] = rule_cache[sig]
        if s.ep == 1 and space.model.is_moe:
            # Dispatcher and EP overlap do nothing without EP: keep only their first values so the
            # same canonical plan is not listed twice.
            for ci, values in enumerate(combos(space, _RG["R1"])):
                d = dict(zip(_RG["R1"], values))
                if d["dispatcher"] != space.levers["dispatcher"][0] or d["ep_overlap"] != "off":
                    R1[si, ci] = False
    for ci, values in enumerate(g["OT"]):
        if eff_setup is not None:
            OT[ci] = _mib(optimizer_transient(_variant(eff_setup, **dict(zip(GROUPS["OT"], values))), None))
    cap, host_cap = _capacities(space, eff_setup, assumptions)
    return Tables(space, structs, W, C, A, HW, HA, OT, TP, TD, TO, R1, R2, cap, host_cap, kept)


def _undominated(W, C, A, HW, HA) -> list[int]:
    """Ranks whose memory constraint another rank's does not imply (all of its tables <= the
    other's, entry by entry); ties keep the lower rank."""
    n = W.shape[0]
    keep = []
    for r in range(n):
        dominated = False
        for q in range(n):
            if q == r:
                continue
            ge = (np.all(W[q] >= W[r]) and np.all(C[q] >= C[r]) and np.all(A[q] >= A[r])
                  and np.all(HW[q] >= HW[r]) and np.all(HA[q] >= HA[r]))
            eq = (np.array_equal(W[q], W[r]) and np.array_equal(C[q], C[r]) and np.array_equal(A[q], A[r])
                  and np.array_equal(HW[q], HW[r]) and np.array_equal(HA[q], HA[r]))
            if ge and (not eq or q < r):
                dominated = True
                break
        if not dominated:
            keep.append(r)
    return keep


def _capacities(space: Space, setup, assumptions) -> tuple[int, int]:
    if setup is None:
        return 0, 0
    mem = setup.efficiency.memory
    usable = space.hw.gpu.hbm_usable_bytes.value - mem.cuda_context_bytes.value - space.job.memory_margin_bytes
    frac = mem.allocator_fraction.value
    if assumptions is not None and assumptions.allocator_margin_bytes is not None:
        usable -= assumptions.allocator_margin_bytes
        frac = 0.0
    cap = int(math.floor(usable / (1 + frac) / MiB))
    host = int(math.floor(space.hw.host.host_memory_bytes.value / MiB))
    return cap, host


def lever_indices(space: Space, flat: int) -> dict[str, int]:
    """Mixed-radix decode of a lever-product index (LEVERS order, first most significant)."""
    out = {}
    for k in reversed(LEVERS):
        n = len(space.levers[k])
        out[k] = flat % n
        flat //= n
    return out


def lever_values(space: Space, idx: dict[str, int]) -> dict:
    return {k: space.levers[k][i] for k, i in idx.items()}
