"""The search's time tables, vectorized: the time model's own functions evaluated on numpy arrays.

Step time separates into three terms (see planner.search.tables):

    TP(recompute, precision, dispatcher, ep_overlap, offload)   the pipeline phase
    TD(sharding, precision, recompute, dispatcher, ep_overlap)  exposed data-parallel / FSDP sync
    TO(sharding, moments, offload, precision)                   the optimizer step

The time model is composed from blocks (planner.cost.time): a block's kernels and collectives
depend on the degrees (tp, cp, ep, etp, mbs, and the spans of the groups on the NVLink domains),
on the precision, the dispatcher and the recompute setting; a rank sums its blocks; the schedule
combines the ranks. Here the same functions run on arrays:

1. Block costs over the distinct *block keys* of all structural keys (degrees, micro-batch size
   and group spans): per precision and dispatcher, the kernel inventory and kernel times
   (:func:`planner.cost.compute.kernel_times`) on arrays of degrees; per recompute setting the
   block time (:func:`~planner.cost.compute.block_time_of`); per cause its collectives and
   their exposure (:mod:`planner.cost.comm`), per EP-overlap setting for the all-to-all.
2. Per layout group (pp, vpp, layout; as in the memory tables): each rank's blocks (the model's
   :func:`~planner.cost.pipeline.rank_blocks`), their sum gathered for the group's keys, the
   pipeline p2p (:func:`~planner.cost.pipeline.rank_p2p`), activation offload
   (:func:`~planner.cost.time.activation_offload`) and the schedule
   (:func:`~planner.cost.time.pipeline_phase`), all lever combinations side by side as array
   axes; the data-parallel exposure (:func:`~planner.cost.pipeline.dp_exposure`) and optimizer
   step per rank, the worst rank gating the step, as :func:`~planner.cost.time.evaluate` does.

Categorical settings (precision, dispatcher, implementation, recompute) stay scalars: each call
takes one value, so every branch of the model is taken as in a scalar evaluation. Structural keys
with EP and without it are evaluated apart (the dispatcher and routing imbalance apply only with
EP). Entries are microseconds, rounded as tables._us rounds.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter

import numpy as np

from planner.cost.comm import (
    comm_causes, cp_comm, cp_transfers, ep_comm, ep_transfers, etp_comm, pp_p2p_time, tp_collectives, tp_comm,
)
from planner.cost.compute import block_time_of, kernel_sums, kernel_times
from planner.cost.flops import BF16, model_shape
from planner.cost.pipeline import (
    data_parallel, dp_exposure, local_params, optimizer_shard, optimizer_step_time, param_tensors, rank_blocks, rank_p2p,
    sync_kind,
)
from planner.cost.rates import rates_for
from planner.cost.setup import Setup, resolve_setup
from planner.cost.time import (
    _opt_override, activation_offload, comm_flags, full_layers_per_chunk, p2p_overlaps, pipeline_phase,
    plan_shard, recompute_setting,
)
from planner.cost.topology import GroupSpan, group_spans, resolve_domain_fill
from planner.errors import PlanRuleError
from planner.search.space import Space, Struct, make_plan
from planner.search.tables import GROUPS, _groups, _variant
from planner.specs.layout import build_layout

_FIELDS = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "dp", "edp", "micro_batches")
_SPAN_DIMS = ("tp", "cp", "ep", "etp", "pp", "dpcp", "edp")
_BLOCK_SPANS = ("tp", "cp", "ep", "etp")


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct rows, first row of each, each row's distinct index) of a small-integer matrix:
    the columns folded into one integer key (np.unique(axis=0) sorts a structured view, slower)."""
    key = np.zeros(len(a), dtype=np.int64)
    radix = 1
    for j in range(a.shape[1]):
        u, inv = np.unique(a[:, j], return_inverse=True)
        key = key * len(u) + inv.reshape(-1)
        radix *= len(u)
        if radix > 2**40:
            u, key = np.unique(key, return_inverse=True)
            key, radix = key.reshape(-1), len(u)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return a[first], first, inv.reshape(-1)


def _ep_axis(x):
    """An EP-overlap axis (size 1) before the structural keys of a term that does not depend on it."""
    x = np.asarray(x)
    return x if x.ndim == 0 else np.expand_dims(x, -2)


MAX_TABLE_US = 2**35
"""Time entries are capped at 2^35 us (9.5 hours per step), and a plan at the cap is no plan: the
search's objective multiplies step time by up to 2^27 (layouts x lever combinations) and must stay
inside int64 and CP-SAT's range. A step that long means the job or hardware is far outside what
planner models (see planner.search.driver._too_slow for the message)."""


def _us_arr(values) -> np.ndarray:
    us = np.rint(np.asarray(values, dtype=float) * 1e6)
    return np.minimum(np.nan_to_num(us, nan=MAX_TABLE_US, posinf=MAX_TABLE_US, neginf=0.0), MAX_TABLE_US).astype(np.int64)


def _put(table: np.ndarray, rows: np.ndarray, values: np.ndarray, axes: tuple[str, ...], group: tuple[str, ...],
         sizes: dict[str, int]) -> None:
    """Write seconds ``values`` (one axis per lever named in ``axes``, then the structural keys) into
    ``table[rows]`` as microseconds, in the group's mixed-radix order; levers of the group missing
    from ``axes`` do not change the term."""
    us = _us_arr(values)
    us = us.reshape(us.shape + (1,) * (len(group) - len(axes)))
    names = axes + tuple(k for k in group if k not in axes)
    us = np.moveaxis(us, len(axes), 0)  # structural keys first
    us = np.transpose(us, [0] + [names.index(k) + 1 for k in group])
    if table.flags.c_contiguous:  # write through a view: one pass
        table.reshape((len(table),) + tuple(sizes[k] for k in group))[rows] = us
    else:
        table[rows] = us.reshape(len(rows), -1)


class _Batch:
    """Degrees of every structural key as arrays, their group spans, and the distinct block keys."""

    def __init__(self, space: Space, structs: list[Struct], assumptions):
        hw, job = space.hw, space.job
        rows = np.array(list(map(attrgetter(*_FIELDS), structs)), dtype=np.int64).reshape(len(structs), len(_FIELDS))
        self.col = c = {f: rows[:, i] for i, f in enumerate(_FIELDS)}
        # NVLink-domain fill per distinct (tp, cp, ep, etp), spans per distinct placement.
        u4, _, inv4 = _unique_rows(np.stack([c["tp"], c["cp"], c["ep"], c["etp"]], 1))
        fill = np.array([resolve_domain_fill(hw.domain_size, job.domain_fill, *map(int, r)) for r in u4],
                        dtype=np.int64)[inv4]
        u8, _, inv8 = _unique_rows(np.stack([fill, c["tp"], c["cp"], c["dp"], c["pp"], c["etp"], c["ep"], c["edp"]], 1))
        fields = np.zeros((len(u8), len(_SPAN_DIMS), 2), dtype=np.int64)
        for i, r in enumerate(u8):
            spans = group_spans(assumptions.rank_order, *map(int, r))
            fields[i] = [(spans[d].domains, spans[d].per_domain) for d in _SPAN_DIMS]
        fields = fields[inv8]
        size = {"tp": c["tp"], "cp": c["cp"], "ep": c["ep"], "etp": c["etp"], "pp": c["pp"],
                "dpcp": c["dp"] * c["cp"], "edp": c["edp"]}
        self.span_cols = {d: (size[d], fields[:, j, 0], fields[:, j, 1]) for j, d in enumerate(_SPAN_DIMS)}
        # Block keys: what a block's time and communication depend on besides the levers; and a
        # structural key of each (for the settings a setup derives: dispatcher, imbalance...).
        bk = np.stack([c["tp"], c["cp"], c["ep"], c["etp"], c["mbs"]]
                      + [self.span_cols[d][k] for d in _BLOCK_SPANS for k in (1, 2)], 1)
        self.bk, self.bk_first, self.bk_of = _unique_rows(bk)

    def spans(self, rows: np.ndarray, dims=_SPAN_DIMS) -> dict[str, GroupSpan]:
        """Group spans of some structural keys, as GroupSpans with array fields."""
        return {d: GroupSpan(d, *(x[rows] for x in self.span_cols[d]), 0, 0) for d in dims}

    def block_spans(self, keys: np.ndarray) -> dict[str, GroupSpan]:
        """Group spans of some block keys."""
        b = self.bk[keys]
        return {d: GroupSpan(d, b[:, j], b[:, 5 + 2 * j], b[:, 6 + 2 * j], 0, 0) for j, d in enumerate(_BLOCK_SPANS)}

    def shard(self, sh, rows: np.ndarray):
        """A setup's Shard with the degrees of some structural keys."""
        c = self.col
        return dataclasses.replace(sh, tp=c["tp"][rows], cp=c["cp"][rows], ep=c["ep"][rows], etp=c["etp"][rows],
                                   mbs=c["mbs"][rows])


def _base_setup(space: Space, s: Struct, levers: dict, assumptions) -> Setup:
    """The setup of a plan. A key that breaks a model rule under these levers (hsdp:N not dividing
    dp*cp, say) gets the same setup without the check: its rows are filled all the same, and the
    search drops the key by its rules."""
    plan = make_plan(s, levers)
    try:
        return resolve_setup(space.model, space.hw, space.job, plan, assumptions)
    except PlanRuleError:
        m, hw, job = space.model, space.hw, space.job
        canon = plan.canonical(is_moe=m.is_moe, default_dispatcher=hw.default_dispatcher,
                               default_precision=job.default_precision)
        return Setup(m, hw, job, canon, canon.degrees(job.gpus), build_layout(m, canon.pp, canon.vpp, canon.layout),
                     assumptions)


def time_tables(space: Space, structs: list[Struct], assumptions, TP: np.ndarray, TD: np.ndarray,
                TO: np.ndarray) -> None:
    """Fill TP, TD and TO (microseconds) for ``structs`` over their lever groups (GROUPS), with the
    time model's functions on arrays (see the module docstring). Internally every term is an array
    with one axis per lever it depends on and the structural keys last."""
    if not structs:
        return
    model, hw, job = space.model, space.hw, space.job
    ms = model_shape(model)
    lev = space.levers
    sizes = {k: len(v) for k, v in lev.items()}
    base = {k: v[0] for k, v in lev.items()}
    batch = _Batch(space, structs, assumptions)
    col = batch.col
    resolved: dict[int, object] = {}

    def setup_of(i: int, **levers):
        """The setup of structural key i with the base levers, and some levers changed."""
        if i not in resolved:
            resolved[i] = _base_setup(space, structs[i], base, assumptions)
        return _variant(resolved[i], **levers) if levers else resolved[i]

    rep = setup_of(0)
    rates = rates_for(rep)
    # What each lever value means for the plan (the same for every structural key).
    offloads_act = [_variant(rep, offload=o).plan.offloads_activations for o in lev["offload"]]
    offloads_opt = [_variant(rep, offload=o).plan.offloads_optimizer for o in lev["offload"]]
    shardings = [_variant(rep, sharding=v).sharding for v in lev["sharding"]]
    opt_override = _opt_override(rep)

    # Each layout group's ranks: per recompute setting, the blocks of each rank, as counts of
    # block variants (block, recompute of its compute, recompute its communication sees).
    groups = []
    variants: dict[tuple, int] = {}
    for (pp, vpp, layout_str), idx in _groups(structs).items():
        g_rep = setup_of(int(idx[0]))
        layout = build_layout(model, pp, vpp, layout_str)
        chunks = [layout.rank_stages(r) for r in range(pp)]
        counts = []
        for rc_value in lev["recompute"]:
            v = _variant(g_rep, recompute=rc_value)
            recompute, _ = recompute_setting(v)
            per_rank = []
            for r in range(pp):
                c: dict[int, int] = {}
                for name, count, rc, is_full in rank_blocks(ms, chunks[r], recompute,
                                                             full_layers_per_chunk(v, r, chunks[r])):
                    vi = variants.setdefault((name, rc, "full" if is_full else recompute), len(variants))
                    c[vi] = c.get(vi, 0) + count
                per_rank.append(c)
            counts.append(per_rank)
        groups.append((pp, vpp, idx, g_rep, chunks, counts))

    # (variants, precision, dispatcher[, ep_overlap], block keys)
    FV, BV, XV = _block_costs(space, batch, ms, rates, list(variants), setup_of)
    R = sizes["recompute"]
    for pp, vpp, idx, g_rep, chunks, counts in groups:
        keys = batch.bk_of[idx]
        m = col["micro_batches"][idx]
        gf, gb, gx = (np.take(a, keys, axis=-1) for a in (FV, BV, XV))
        # Per rank, per micro-batch: forward and backward (recompute, precision, dispatcher, keys)
        # and exposed communication (... ep_overlap, keys) seconds: its blocks' counts times
        # their costs. Ranks with the same blocks share arrays.
        memo: dict[tuple, int] = {}
        F, B, X, rank_of = [], [], [], []
        for r in range(pp):
            comp = tuple(tuple(sorted(counts[ri][r].items())) for ri in range(R))
            if comp not in memo:
                memo[comp] = len(F)
                for out, g in ((F, gf), (B, gb), (X, gx)):
                    a = np.zeros((R,) + g.shape[1:])
                    for ri, blocks in enumerate(comp):
                        for vi, count in blocks:
                            a[ri] += count * g[vi]
                    out.append(a)
            rank_of.append(memo[comp])

        # Per-micro-batch time of each rank, pipeline send/receive included.
        sh = batch.shard(plan_shard(g_rep), idx)
        t_p2p = pp_p2p_time(ms, sh, batch.spans(idx, ("pp",))["pp"], rates)
        p2p_overlap = p2p_overlaps(g_rep)
        T = []
        for k in range(len(F)):
            p2p_total, p2p_exposed = rank_p2p(t_p2p, pp, vpp, F[k] + B[k], p2p_overlap, rates)
            T.append(_ep_axis(F[k] + B[k]) + X[k] + _ep_axis(p2p_exposed))
        times = [T[k] for k in rank_of]

        # TP: the schedule over the ranks, with activation offload where the lever asks for it:
        # the slowest rank (the first of equals) streams its layers' activations.
        tp_out = np.empty((R,) + T[0].shape[1:-1] + (sizes["offload"], len(idx)))
        plain = pipeline_phase(times, m, vpp, pp, p2p_total, p2p_overlap)
        extra = worst = None
        for oi in range(sizes["offload"]):
            if not offloads_act[oi]:
                tp_out[..., oi, :] = plain
                continue
            if extra is None:
                slow, worst = times[0], np.zeros(times[0].shape, dtype=np.int64)
                fw, bw = _ep_axis(F[rank_of[0]]), _ep_axis(B[rank_of[0]])
                layers = np.full(times[0].shape, sum(ch.num_layers for ch in chunks[0]))
                for r in range(1, pp):
                    if rank_of[r] in rank_of[:r]:
                        continue  # equal to an earlier rank: never the first slowest
                    k = rank_of[r]
                    later = times[r] > slow
                    slow = np.where(later, times[r], slow)
                    worst = np.where(later, r, worst)
                    fw = np.where(later, _ep_axis(F[k]), fw)
                    bw = np.where(later, _ep_axis(B[k]), bw)
                    layers = np.where(later, sum(ch.num_layers for ch in chunks[r]), layers)
                _, extra = activation_offload(layers, sh.sp_tokens, ms.hidden, fw, bw, rates)
            shifted = [t + np.where(worst == r, extra, 0.0) for r, t in enumerate(times)]
            tp_out[..., oi, :] = pipeline_phase(shifted, m, vpp, pp, p2p_total, p2p_overlap)
        _put(TP, idx, tp_out, ("recompute", "precision", "dispatcher", "ep_overlap", "offload"), GROUPS["TP"], sizes)

        # TD and TO: per rank, its parameters' data-parallel sync and optimizer step; the worst
        # rank gates the step (ranks with the same blocks and parameters give the same terms).
        spans = batch.spans(idx)
        c = {f: col[f][idx] for f in ("tp", "ep", "etp", "dp", "cp", "edp")}
        params: dict[int, tuple] = {}
        for r in range(pp):
            ck = (rank_of[r], tuple((ch.layers, ch.embedding, ch.loss, ch.mtp) for ch in chunks[r]))
            if ck not in params:
                tensors = param_tensors(model, chunks[r], c["ep"]) if rates.torch_optimizer else 0.0
                params[ck] = (rank_of[r], *local_params(model, chunks[r], c["tp"], c["ep"], c["etp"], pp), tensors)
        td = np.empty((len(shardings),) + F[0].shape)
        to = np.empty((len(shardings), sizes["moments"], sizes["offload"], len(idx)))
        exposed: dict[tuple, np.ndarray] = {}
        for si, sharding in enumerate(shardings):
            kind, fsdp = sync_kind(sharding)
            if (kind, fsdp) not in exposed:
                dp_best = fsdp_best = 0.0
                for ck, (k, dense, expert, _) in params.items():
                    grad, param = data_parallel(dense, expert, spans, kind, rates, BF16)
                    _, g_exp, _, p_exp, _, f_exp = dp_exposure(grad, param, fsdp, m, F[k], B[k], rates,
                                                               assumptions.dp_overlap)
                    dp_best = np.maximum(dp_best, g_exp + p_exp)
                    fsdp_best = np.maximum(fsdp_best, f_exp)
                exposed[kind, fsdp] = dp_best + fsdp_best
            td[si] = exposed[kind, fsdp]
            for mi, moments in enumerate(lev["moments"]):
                for oi in range(sizes["offload"]):
                    opt = 0.0
                    for ck, (k, dense, expert, tensors) in params.items():
                        shard = optimizer_shard(sharding, dense, expert, c["dp"], c["cp"], c["edp"])
                        opt = np.maximum(opt, optimizer_step_time(shard, dense + expert, moments, offloads_opt[oi],
                                                                  rates, opt_override, tensors))
                    to[si, mi, oi] = opt
        _put(TD, idx, td, ("sharding", "recompute", "precision", "dispatcher"), GROUPS["TD"], sizes)
        _put(TO, idx, to, ("sharding", "moments", "offload"), GROUPS["TO"], sizes)


def _block_costs(space: Space, batch: _Batch, ms, rates, variants: list[tuple], setup_of):
    """Per block variant (block, recompute of its compute, recompute its communication sees): forward
    and backward seconds per micro-batch (variants, precision, dispatcher, block keys) and exposed
    communication (variants, precision, dispatcher, EP overlap, block keys)."""
    lev = space.levers
    n = len(batch.bk)
    P, D, OV = len(lev["precision"]), len(lev["dispatcher"]), len(lev["ep_overlap"])
    FV = np.zeros((len(variants), P, D, n))
    BV = np.zeros((len(variants), P, D, n))
    XV = np.zeros((len(variants), P, D, OV, n))
    by_name: dict[str, list[int]] = {}
    for vi, (name, _, _) in enumerate(variants):
        by_name.setdefault(name, []).append(vi)
    with_ep = batch.bk[:, 2] > 1
    for subset in (np.flatnonzero(~with_ep), np.flatnonzero(with_ep)):
        if not len(subset):
            continue
        spans = batch.block_spans(subset)
        first = int(batch.bk_first[subset[0]])
        # Without EP the dispatcher does nothing: one evaluation serves every dispatcher value.
        dispatchers = lev["dispatcher"] if with_ep[subset[0]] else lev["dispatcher"][:1]
        for pi, precision in enumerate(lev["precision"]):
            for di, dispatcher in enumerate(dispatchers):
                setups = [setup_of(first, precision=precision, dispatcher=dispatcher, ep_overlap=ov)
                          for ov in lev["ep_overlap"]]
                sh = batch.shard(plan_shard(setups[0]), batch.bk_first[subset])
                flags = [comm_flags(s, sh) for s in setups]
                tp_coll = cp_tr = ep_once = None
                for name, vis in by_name.items():
                    kts = kernel_times(ms, sh, name, rates)
                    sums = kernel_sums(kts)
                    causes = comm_causes(ms, name, spans)
                    memo: dict[tuple, object] = {}
                    for vi in vis:
                        _, rc, flags_rc = variants[vi]
                        bt = block_time_of(kts, rates, rc, sums)
                        FV[vi, pi, di, subset] = bt.fwd
                        BV[vi, pi, di, subset] = bt.bwd
                        full = flags_rc == "full"
                        exposed = [0.0] * OV
                        for cause in causes:
                            # Each cause's collectives depend on the degrees only; their exposure
                            # on the block's kernel times and the switches passed here.
                            if cause == "tp":
                                if tp_coll is None:
                                    tp_coll = tp_collectives(ms, sh, spans["tp"], rates)
                                if ("tp", full) not in memo:
                                    # tp_comm reads the block's GEMM times, which recompute leaves alone.
                                    memo["tp", full] = tp_comm(ms, name, bt, tp_coll, rates, flags[0].tp_overlap,
                                                               full).exposed
                                e = [memo["tp", full]] * OV
                            elif cause == "cp":
                                if cp_tr is None:
                                    cp_tr = cp_transfers(ms, sh, spans["cp"], rates)
                                if ("cp", full) not in memo:
                                    # cp_comm reads the block's attention times, which recompute leaves alone.
                                    memo["cp", full] = cp_comm(bt, cp_tr, rates, full).exposed
                                e = [memo["cp", full]] * OV
                            elif cause == "ep":
                                if ep_once is None:
                                    ep_once = ep_transfers(ms, sh, spans["ep"], rates, flags[0].fp8_dispatch)
                                e = [ep_comm(bt, ep_once, rates, dataclasses.replace(fl, recompute=flags_rc)).exposed
                                     for fl in flags]
                            else:
                                if "etp" not in memo:
                                    memo["etp"] = etp_comm(ms, sh, spans["etp"], rates).exposed
                                e = [memo["etp"]] * OV
                            exposed = [a + b for a, b in zip(exposed, e)]
                        for oi in range(OV):
                            XV[vi, pi, di, oi, subset] = exposed[oi]
        if len(dispatchers) < D:
            for arr in (FV, BV, XV):
                arr[:, :, 1:, ..., subset] = arr[:, :, :1, ..., subset]
    return FV, BV, XV
