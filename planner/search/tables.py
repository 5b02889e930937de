"""Integer cost tables over structural keys and lever groups.

Memory and time separate into terms that each depend on the structural key and a few levers:

    peak(stage r) = W[r](sharding, moments, offload) + C[r](sharding, dispatcher, ep_overlap)
                    + max(A[r](recompute, precision, offload, ep_overlap),
                          OT[r](sharding, moments, offload, precision))
    step time     = TP(recompute, precision, dispatcher, ep_overlap, offload)
                    + TD(sharding, precision, recompute, dispatcher, ep_overlap)
                    + TO(sharding, moments, offload, precision)

W is constant memory (weights, gradients, optimizer), C communication and FSDP buffers, A the
activation-and-transient peak over the schedule, OT optimizer-step temporaries; TP the pipeline
(compute, exposed TP/CP/EP/PP communication, bubble), TD exposed data-parallel communication, TO
the optimizer step and offload traffic. Every entry is read from the one composition
(:func:`planner.cost.compose.evaluate_batch`): per pipeline layout, one batch of its structural keys
per lever combination of the term's group. Memory is in MiB rounded up, time in microseconds
rounded; CP-SAT and the exhaustive oracle read the same integers.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from planner.search.space import LEVERS, Space, Struct

MiB = 2**20

GROUPS: dict[str, tuple[str, ...]] = {
    "W": ("sharding", "moments", "offload"),
    "C": ("sharding", "dispatcher", "ep_overlap"),
    "A": ("recompute", "precision", "offload", "ep_overlap"),
    "OT": ("sharding", "moments", "offload", "precision"),
    "TP": ("recompute", "precision", "dispatcher", "ep_overlap", "offload"),
    "TD": ("sharding", "precision", "recompute", "dispatcher", "ep_overlap"),
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


@dataclass
class Tables:
    """The integer cost tables of a set of structural keys (see the module docstring): S keys,
    R pipeline ranks (the deepest key's), one column per value combination of each term's lever
    group (GROUPS, mixed radix, first lever most significant)."""

    space: Space
    structs: list[Struct]
    """The structural keys, one row each."""
    W: np.ndarray
    """(S, R, |W|) MiB: weights, gradients and optimizer states of each rank."""
    C: np.ndarray
    """(S, R, |C|) MiB: communication and FSDP buffers."""
    A: np.ndarray
    """(S, R, |A|) MiB: the activation-and-transient peak over the rank's schedule."""
    HW: np.ndarray
    """(S, R, |W|) MiB of host memory: offloaded optimizer state."""
    HA: np.ndarray
    """(S, R, |A|) MiB of host memory: offloaded activations in flight at the end of the warm-up."""
    OT: np.ndarray
    """(S, R, |OT|) MiB: the optimizer step's temporaries."""
    TP: np.ndarray
    """(S, |TP|) microseconds: the pipeline phase (compute, exposed TP/CP/EP/PP communication, bubble)."""
    TD: np.ndarray
    """(S, |TD|) microseconds: exposed data-parallel and FSDP communication."""
    TO: np.ndarray
    """(S, |TO|) microseconds: the optimizer step (or the offloaded one)."""
    R1: np.ndarray
    """(S, |R1|) bool: the launcher accepts this combination of its rule group's levers."""
    R2: np.ndarray
    """(S, |R2|) bool: the same for the second rule group."""
    cap_mib: int
    """Allocated-memory limit: (usable HBM - CUDA context - user margin) / (1 + allocator fraction)."""
    host_cap_mib: int
    """Host memory per GPU."""
    stages_kept: list[list[int]] = field(default_factory=list)
    """For each structural key, the pipeline ranks whose constraints are not dominated."""
    ids: np.ndarray | None = None
    """Global index of each structural key in the space (the objective's tie-break)."""

    def __post_init__(self):
        if self.ids is None:
            self.ids = np.arange(len(self.structs))

    def subset(self, rows) -> "Tables":
        """The tables of some structural keys only (same global ids)."""
        rows = np.asarray(rows, dtype=int)
        return Tables(self.space, [self.structs[i] for i in rows], self.W[rows], self.C[rows], self.A[rows],
                      self.HW[rows], self.HA[rows], self.OT[rows], self.TP[rows], self.TD[rows], self.TO[rows],
                      self.R1[rows], self.R2[rows], self.cap_mib, self.host_cap_mib,
                      [self.stages_kept[i] for i in rows], self.ids[rows])

    @property
    def n_total(self) -> int:
        """Structural keys in the whole space (the objective's radix)."""
        return len(self.space.structs)

    def time_lower_bound(self) -> np.ndarray:
        """Per structural key, a lower bound on step time (us): each time term at its minimum."""
        return self.TP.min(axis=1) + self.TD.min(axis=1) + self.TO.min(axis=1)

    def may_fit(self) -> np.ndarray:
        """Per structural key, a necessary condition for some lever choice to fit: every kept
        stage's smallest constant, communication and activation terms within capacity."""
        ok = np.ones(len(self.structs), dtype=bool)
        for i, kept in enumerate(self.stages_kept):
            for r in kept:
                low = max(self.A[i, r].min(), self.OT[i, r].min())
                if self.W[i, r].min() + self.C[i, r].min() + low > self.cap_mib:
                    ok[i] = False
                    break
        return ok

    @property
    def n_levers(self) -> int:
        return self.space.lever_product_size


MAX_TABLE_US = 2**35
"""Time entries are capped at 2^35 us (9.5 hours per step), and a plan at the cap is no plan: the
search's objective multiplies step time by up to 2^27 (layouts x lever combinations) and must stay
inside int64 and CP-SAT's range. A step that long means the job or hardware is far outside what
planner models (see planner.search.driver._too_slow for the message)."""

MAX_TABLE_MIB = 2**31 - 1
"""Memory entries (int32 MiB) are capped here (2 PiB, beyond any GPU): a term that overflows does
not wrap around into a small or negative number that would look like it fits."""


def _mib(x) -> np.ndarray:
    """Bytes to MiB, rounded up (the memory constraints never round a peak down), capped."""
    mib = np.ceil(np.asarray(x, dtype=float) / MiB - 1e-9)
    return np.minimum(np.nan_to_num(mib, nan=MAX_TABLE_MIB, posinf=MAX_TABLE_MIB, neginf=0.0),
                      MAX_TABLE_MIB).astype(np.int64)


def _us(x) -> np.ndarray:
    """Seconds to microseconds, rounded to nearest (half to even), capped at MAX_TABLE_US."""
    us = np.rint(np.asarray(x, dtype=float) * 1e6)
    return np.minimum(np.nan_to_num(us, nan=MAX_TABLE_US, posinf=MAX_TABLE_US, neginf=0.0),
                      MAX_TABLE_US).astype(np.int64)


def lever_setting(values: dict):
    """Typed levers from one value of each of the space's levers."""
    from planner.cost.compose import Levers

    offload = values["offload"]
    return Levers(values["recompute"], values["precision"], values["moments"], values["sharding"], offload.optimizer,
                  offload.activations, values["dispatcher"], values["ep_overlap"])


ROW = ("recompute", "precision", "dispatcher", "ep_overlap")
"""The levers a batch evaluates side by side (planner.cost.compose.ROW_LEVERS); the others are
looped over, one batch per value combination."""


def _plan(space: Space, group: tuple[str, ...]) -> list[tuple[list, np.ndarray]]:
    """How to fill a table over ``group``: per combination of its batch levers, the variants (typed
    levers of each combination of its row levers) and each variant's column in the table."""
    base = {k: v[0] for k, v in space.levers.items()}
    row = tuple(k for k in group if k in ROW)
    rest = tuple(k for k in group if k not in ROW)
    index = {values: ci for ci, values in enumerate(combos(space, group))}
    out = []
    for b in combos(space, rest):
        variants, cols = [], []
        for v in combos(space, row):
            values = {**base, **dict(zip(rest, b)), **dict(zip(row, v))}
            variants.append(lever_setting(values))
            cols.append(index[tuple(values[k] for k in group)])
        out.append((variants, np.array(cols)))
    return out


def fill_tables(space: Space, structs: list[Struct], assumptions, T: dict[str, np.ndarray]) -> None:
    """Fill every cost table ``T`` (name -> array) for ``structs`` from the one composition: per
    pipeline layout, one batch per value combination of the table's batch levers, every
    combination of its row levers side by side."""
    from planner.cost.compose import CostContext, evaluate_batch, layout_batches

    ctx = CostContext.for_structs(space.model, space.hw, space.job, assumptions, structs)
    base = lever_setting({k: v[0] for k, v in space.levers.items()})
    plans = {name: _plan(space, grp) for name, grp in GROUPS.items()}
    terms = {
        "TP": lambda c: _us(c.pipeline_s()),
        "TD": lambda c: _us(c.data_parallel().exposed),
        "TO": lambda c: _us(c.optimizer().seconds),
    }
    per_rank = {
        "W": lambda c, r: _mib(c.constant(r).total), "HW": lambda c, r: _mib(c.constant(r).host_optimizer),
        "C": lambda c, r: _mib(c.comm_buffers() + c.constant(r).fsdp_buffers),
        "A": lambda c, r: _mib(c.activation_peak(r)), "OT": lambda c, r: _mib(c.optimizer_transient(r)),
        "HA": lambda c, r: _mib(c.host_activation_bytes(r)) if c.lv.offload_activations else 0,
    }
    for batch in layout_batches(ctx, structs, base):
        rows, n = batch.key_rows, batch.n_keys
        for name, fn in terms.items():
            for variants, cols in plans[name]:
                vals = np.broadcast_to(fn(evaluate_batch(batch.with_variants(variants))), (len(cols) * n,))
                T[name][rows[None, :], cols[:, None]] = vals.reshape(len(cols), n)
        for name, fn in per_rank.items():
            grp = "W" if name == "HW" else "A" if name == "HA" else name
            for variants, cols in plans[grp]:
                c = evaluate_batch(batch.with_variants(variants))
                for r in range(batch.pp):
                    vals = np.broadcast_to(fn(c, r), (len(cols) * n,))
                    T[name][rows[None, :], r, cols[:, None]] = vals.reshape(len(cols), n)
        ctx.forget(batch.group)


def rule_tables(space: Space, structs: list[Struct], R1, R2) -> None:
    """Which lever combinations the launcher accepts, per structural signature (planner.rules)."""
    from planner.search.rulecheck import lever_allowed

    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    # Dispatcher and EP overlap do nothing without EP: keys with ep=1 keep only their first values,
    # so the same canonical plan is not listed twice.
    no_ep = np.array([d == space.levers["dispatcher"][0] and not o
                      for d, o in (tuple(dict(zip(RULE_GROUPS["R1"], v))[k] for k in ("dispatcher", "ep_overlap"))
                                   for v in combos(space, RULE_GROUPS["R1"]))], dtype=bool)
    for si, s in enumerate(structs):
        sig = (s.signature(), s.ep == 1 and space.model.is_moe)
        if sig not in cache:
            r1 = np.array(list(lever_allowed(space, s, RULE_GROUPS["R1"]).values()), dtype=bool)
            cache[sig] = (r1 & no_ep if sig[1] else r1,
                          np.array(list(lever_allowed(space, s, RULE_GROUPS["R2"]).values()), dtype=bool))
        R1[si], R2[si] = cache[sig]


def build_tables(space: Space, *, assumptions=None, structs: list[Struct] | None = None) -> Tables:
    """Evaluate the structural keys' lever-group tables with the cost model."""
    from planner.cost.setup import Assumptions

    assumptions = assumptions or Assumptions()
    structs = space.structs if structs is None else structs
    g = {name: combos(space, grp) for name, grp in GROUPS.items()}
    nS = len(structs)
    maxR = max((s.pp for s in structs), default=1)
    # MiB fit int32 (up to 2 PiB per GPU); microseconds stay int64.
    T = {name: np.zeros((nS, maxR, len(g[name])), dtype=np.int32) for name in ("W", "C", "A", "OT")}
    T["HW"], T["HA"] = np.zeros_like(T["W"]), np.zeros_like(T["A"])
    T.update({name: np.zeros((nS, len(g[name])), dtype=np.int64) for name in ("TP", "TD", "TO")})
    R1 = np.zeros((nS, len(combos(space, RULE_GROUPS["R1"]))), dtype=bool)
    R2 = np.zeros((nS, len(combos(space, RULE_GROUPS["R2"]))), dtype=bool)
    if structs:
        fill_tables(space, structs, assumptions, T)
    rule_tables(space, structs, R1, R2)
    kept = undominated_stages(structs, *(T[k] for k in ("W", "C", "A", "OT", "HW", "HA")))
    cap, host_cap = _capacities(space, assumptions)
    return Tables(space, structs, T["W"], T["C"], T["A"], T["HW"], T["HA"], T["OT"], T["TP"], T["TD"], T["TO"],
                  R1, R2, cap, host_cap, kept)


def undominated_stages(structs, W, C, A, OT, HW, HA, chunk: int = 256) -> list[list[int]]:
    """Per structural key, the pipeline ranks whose memory constraint another rank's does not
    imply: rank r is dropped when some rank q has every table entry >= r's (ties keep the lower
    rank). Vectorized over keys with the same pipeline depth."""
    out: list[list[int]] = [[] for _ in structs]
    by_pp: dict[int, list[int]] = {}
    for i, s in enumerate(structs):
        by_pp.setdefault(s.pp, []).append(i)
    for pp, rows in by_pp.items():
        order = np.arange(pp)
        lower = order[:, None] < order[None, :]  # q < r
        for a in range(0, len(rows), chunk):
            idx = np.array(rows[a : a + chunk])
            X = np.concatenate([T[idx, :pp] for T in (W, C, A, OT, HW, HA)], axis=2)  # (n, pp, K)
            ge = (X[:, :, None, :] >= X[:, None, :, :]).all(axis=3)  # ge[i, q, r]: q >= r everywhere
            eq = (X[:, :, None, :] == X[:, None, :, :]).all(axis=3)
            beats = ge & (~eq | lower[None]) & ~np.eye(pp, dtype=bool)[None]
            dominated = beats.any(axis=1)  # (n, r)
            for k, i in enumerate(idx):
                out[i] = [r for r in range(pp) if not dominated[k, r]]
    return out


def _capacities(space: Space, assumptions) -> tuple[int, int]:
    """(allocated-memory limit, host memory) in MiB: the reserved capacity of the composition over
    one plus the allocator fraction, rounded down."""
    from planner.cost.compose import memory_limits

    capacity, fraction = memory_limits(space.hw, space.job, assumptions)
    cap = int(math.floor(capacity / (1 + fraction) / MiB))
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
