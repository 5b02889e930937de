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
    data_parallel, dp_exposure, local_params, offloaded_optimizer_time, optimizer_shard, optimizer_time,
    rank_blocks, rank_p2p,
)
from planner.cost.rates import rates_for
from planner.cost.setup import resolve_setup
from planner.cost.time import (
    _opt_override, activation_offload, comm_flags, full_layers_per_chunk, p2p_overlaps, pipeline_phase,
    plan_shard, recompute_setting,
)
from planner.cost.topology import GroupSpan, group_spans, resolve_domain_fill
from planner.search.space import Space, Struct, make_plan
from planner.search.tables import GROUPS, _groups, _variant
from planner.specs.layout import build_layout

_FIELDS = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "dp", "edp", "micro_batches")
_SPAN_DIMS = ("tp", "cp", "ep", "etp", "pp", "dpcp", "edp")
_BLOCK_SPANS = ("tp", "cp", "ep", "etp")


def _to_us(x) -> np.ndarray:
    return np.rint(np.asarray(x, dtype=float) * 1e6).astype(np.int64)


def _put(table: np.ndarray, rows: np.ndarray, values: np.ndarray, axes: tuple[str, ...], group: tuple[str, ...],
         sizes: dict[str, int]) -> None:
    """Write ``values`` (rows first, then one axis per lever named in ``axes``, each of full size or
    1 where the term does not depend on it) into ``table[rows]`` in the group's mixed-radix order."""
    order = [axes.index(k) + 1 for k in group]
    v = np.transpose(values, [0] + order)
    v = np.broadcast_to(v, (len(rows),) + tuple(sizes[k] for k in group))
    table[rows] = _to_us(v.reshape(len(rows), -1))


class _Batch:
    """Degrees of every structural key as arrays, their group spans, and the distinct block keys."""

    def __init__(self, space: Space, structs: list[Struct], assumptions):
        hw, job = space.hw, space.job
        rows = np.array(list(map(attrgetter(*_FIELDS), structs)), dtype=np.int64).reshape(len(structs), len(_FIELDS))
        self.col = {f: rows[:, i] for i, f in enumerate(_FIELDS)}
        c = self.col
        # NVLink-domain fill per distinct (tp, cp, ep, etp), spans per distinct placement.
        u4, inv4 = np.unique(np.stack([c["tp"], c["cp"], c["ep"], c["etp"]], 1), axis=0, return_inverse=True)
        fill = np.array([resolve_domain_fill(hw.domain_size, job.domain_fill, *map(int, r)) for r in u4],
                        dtype=np.int64)[inv4.reshape(-1)]
        key = np.stack([fill, c["tp"], c["cp"], c["dp"], c["pp"], c["etp"], c["ep"], c["edp"]], 1)
        u8, inv8 = np.unique(key, axis=0, return_inverse=True)
        fields = np.zeros((len(u8), len(_SPAN_DIMS), 2), dtype=np.int64)
        for i, r in enumerate(u8):
            spans = group_spans(assumptions.rank_order, *map(int, r))
            for j, d in enumerate(_SPAN_DIMS):
                fields[i, j] = spans[d].domains, spans[d].per_domain
        fields = fields[inv8.reshape(-1)]
        size = {"tp": c["tp"], "cp": c["cp"], "ep": c["ep"], "etp": c["etp"], "pp": c["pp"],
                "dpcp": c["dp"] * c["cp"], "edp": c["edp"]}
        self.span_cols = {d: (size[d], fields[:, j, 0], fields[:, j, 1]) for j, d in enumerate(_SPAN_DIMS)}
        # Block keys: what a block's time and communication depend on besides the levers.
        bk = np.stack([c["tp"], c["cp"], c["ep"], c["etp"], c["mbs"]]
                      + [self.span_cols[d][k] for d in _BLOCK_SPANS for k in (1, 2)], 1)
        self.bk, inv = np.unique(bk, axis=0, return_inverse=True)
        self.bk_of = inv.reshape(-1)
        # A structural key of each block key (for the scalar settings a setup derives).
        self.bk_first = np.zeros(len(self.bk), dtype=np.int64)
        self.bk_first[self.bk_of[::-1]] = np.arange(len(structs))[::-1]

    def spans(self, rows: np.ndarray, dims=_SPAN_DIMS) -> dict[str, GroupSpan]:
        """Group spans of some structural keys, as GroupSpans with array fields."""
        return {d: GroupSpan(d, self.span_cols[d][0][rows], self.span_cols[d][1][rows], self.span_cols[d][2][rows], 0, 0)
                for d in dims}

    def block_spans(self, keys: np.ndarray) -> dict[str, GroupSpan]:
        """Group spans of some block keys."""
        b = self.bk[keys]
        size = {"tp": b[:, 0], "cp": b[:, 1], "ep": b[:, 2], "etp": b[:, 3]}
        return {d: GroupSpan(d, size[d], b[:, 5 + 2 * j], b[:, 6 + 2 * j], 0, 0) for j, d in enumerate(_BLOCK_SPANS)}


def time_tables(space: Space, structs: list[Struct], assumptions, TP: np.ndarray, TD: np.ndarray,
                TO: np.ndarray) -> None:
    """Fill TP, TD and TO (microseconds) for ``structs`` over their lever groups (GROUPS), with the
    time model's functions on arrays (see the module docstring)."""
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
            resolved[i] = resolve_setup(model, hw, job, make_plan(structs[i], base), assumptions)
        return _variant(resolved[i], **levers) if levers else resolved[i]

    rep = setup_of(0)
    rates = rates_for(rep)

    # Each layout group's ranks: per recompute setting, the blocks of each rank as
    # (block, count, recompute of its compute, recompute its communication sees).
    groups = []
    variants: dict[tuple, int] = {}
    for (pp, vpp, layout_str), idx in _groups(structs).items():
        g_rep = setup_of(int(idx[0]))
        layout = build_layout(model, pp, vpp, layout_str)
        chunks = [layout.rank_stages(r) for r in range(pp)]
        per_rc = []
        for rc_value in lev["recompute"]:
            v = _variant(g_rep, recompute=rc_value)
            recompute, _ = recompute_setting(v)
            ranks = []
            for r in range(pp):
                blocks = []
                for name, count, rc, is_full in rank_blocks(ms, chunks[r], recompute, full_layers_per_chunk(v, r, chunks[r])):
                    key = (name, rc, "full" if is_full else recompute)
                    blocks.append((variants.setdefault(key, len(variants)), count))
                ranks.append(tuple(blocks))
            per_rc.append(ranks)
        groups.append((pp, vpp, idx, g_rep, chunks, per_rc))

    fwd, bwd, exp = _block_costs(space, batch, ms, rates, list(variants), setup_of)

    P, R, D, OV = (sizes[k] for k in ("precision", "recompute", "dispatcher", "ep_overlap"))
    for pp, vpp, idx, g_rep, chunks, per_rc in groups:
        n = len(idx)
        keys = batch.bk_of[idx]
        m = col["micro_batches"][idx]
        # Per rank: forward, backward (n, R, P, D) and exposed communication (n, R, P, D, OV)
        # seconds per micro-batch; ranks with the same blocks share arrays.
        memo: dict[tuple, tuple] = {}
        F, B, X = [], [], []
        for r in range(pp):
            comp = tuple(per_rc[ri][r] for ri in range(R))
            if comp not in memo:
                f = np.zeros((n, R, P, D))
                b = np.zeros((n, R, P, D))
                x = np.zeros((n, R, P, D, OV))
                for ri, blocks in enumerate(comp):
                    for vi, count in blocks:
                        f[:, ri] += count * fwd[vi][keys]
                        b[:, ri] += count * bwd[vi][keys]
                        x[:, ri] += count * exp[vi][keys]
                memo[comp] = (f, b, x)
            f, b, x = memo[comp]
            F.append(f)
            B.append(b)
            X.append(x)

        # Pipeline send/receive, per rank per micro-batch.
        sh = dataclasses.replace(plan_shard(g_rep), tp=col["tp"][idx], cp=col["cp"][idx], mbs=col["mbs"][idx],
                                 ep=col["ep"][idx], etp=col["etp"][idx])
        t_p2p = pp_p2p_time(ms, sh, batch.spans(idx, ("pp",))["pp"], rates)[:, None, None, None]
        p2p_overlap = p2p_overlaps(g_rep)
        times, p2p_total = [], None
        t_memo: dict[int, np.ndarray] = {}
        for r in range(pp):
            if id(F[r]) not in t_memo:
                p2p_total, p2p_exposed = rank_p2p(t_p2p, pp, vpp, F[r] + B[r], p2p_overlap, rates)
                t_memo[id(F[r])] = F[r][..., None] + B[r][..., None] + X[r] + np.asarray(p2p_exposed)[..., None]
            times.append(t_memo[id(F[r])])
        p2p_total = np.asarray(p2p_total)[..., None]
        m5 = m.reshape(n, 1, 1, 1, 1)

        # TP: the schedule over the ranks, with activation offload where the lever asks for it.
        tp_out = np.empty((n, R, P, D, OV, sizes["offload"]))
        plain = None
        for oi, off in enumerate(lev["offload"]):
            if _variant(g_rep, offload=off).plan.offloads_activations:
                stack = np.stack(times)
                worst = np.argmax(stack, axis=0)[None]
                layers = np.array([sum(ch.num_layers for ch in chunks[r]) for r in range(pp)])
                fw = np.take_along_axis(np.stack(F)[..., None], worst, axis=0)[0]
                bw = np.take_along_axis(np.stack(B)[..., None], worst, axis=0)[0]
                _, extra = activation_offload(layers[worst[0]], sh.sp_tokens.reshape(n, 1, 1, 1, 1), ms.hidden,
                                              fw, bw, rates)
                hit = np.arange(pp).reshape(pp, 1, 1, 1, 1, 1) == worst
                shifted = list(stack + np.where(hit, extra[None], 0.0))
                tp_out[..., oi] = pipeline_phase(shifted, m5, vpp, pp, p2p_total, p2p_overlap)
            else:
                if plain is None:
                    plain = pipeline_phase(times, m5, vpp, pp, p2p_total, p2p_overlap)
                tp_out[..., oi] = plain
        _put(TP, idx, tp_out, ("recompute", "precision", "dispatcher", "ep_overlap", "offload"), GROUPS["TP"], sizes)

        # TD and TO: per rank, its parameters' data-parallel sync and optimizer step.
        spans = batch.spans(idx)
        tp_, ep_, etp_ = col["tp"][idx], col["ep"][idx], col["etp"][idx]
        dp_, cp_, edp_ = col["dp"][idx], col["cp"][idx], col["edp"][idx]
        S, M, O = sizes["sharding"], sizes["moments"], sizes["offload"]
        td = np.zeros((n, S, R, P, D))
        to = np.zeros((n, S, M, O))
        params: dict[tuple, tuple] = {}
        m4 = m.reshape(n, 1, 1, 1)
        for si, sharding_value in enumerate(lev["sharding"]):
            vs = _variant(g_rep, sharding=sharding_value)
            sharding = vs.sharding
            g_best = f_best = None
            opt = np.zeros((n, M, O))
            for r in range(pp):
                ck = tuple((c.layers, c.embedding, c.loss, c.mtp) for c in chunks[r])
                if ck not in params:
                    params[ck] = local_params(model, chunks[r], tp_, ep_, etp_, pp)
                dense, expert = params[ck]
                grad, param = data_parallel(dense, expert, spans, "ddp" if sharding.kind == "ddp" else "sharded",
                                            rates, BF16)
                _, g_exp, _, p_exp, _, f_exp = dp_exposure(
                    np.reshape(grad, (n, 1, 1, 1)), np.reshape(param, (n, 1, 1, 1)), sharding.kind in ("fsdp", "hsdp"),
                    m4, F[r], B[r], rates, assumptions.dp_overlap)
                gp = np.broadcast_to(g_exp + p_exp, (n, R, P, D))
                fe = np.broadcast_to(f_exp, (n, R, P, D))
                g_best = gp if g_best is None else np.maximum(g_best, gp)
                f_best = fe if f_best is None else np.maximum(f_best, fe)
                shard = optimizer_shard(sharding, dense, expert, dp_, cp_, edp_)
                for mi, moments in enumerate(lev["moments"]):
                    for oi, off in enumerate(lev["offload"]):
                        if _variant(vs, offload=off).plan.offloads_optimizer:
                            t = offloaded_optimizer_time(shard, rates)[0]
                        else:
                            t = optimizer_time(shard, dense + expert, moments, rates, _opt_override(vs))
                        opt[:, mi, oi] = np.maximum(opt[:, mi, oi], t)
            td[:, si] = g_best + f_best
            to[:, si] = opt
        _put(TD, idx, td[..., None], ("sharding", "recompute", "precision", "dispatcher", "ep_overlap"), GROUPS["TD"], sizes)
        _put(TO, idx, to[..., None], ("sharding", "moments", "offload", "precision"), GROUPS["TO"], sizes)


def _block_costs(space: Space, batch: _Batch, ms, rates, variants: list[tuple], setup_of):
    """Per block variant (block, recompute of its compute, recompute its communication sees): forward
    and backward seconds per micro-batch (block keys, precision, dispatcher) and exposed
    communication (block keys, precision, dispatcher, EP overlap)."""
    lev = space.levers
    n = len(batch.bk)
    P, D, OV = len(lev["precision"]), len(lev["dispatcher"]), len(lev["ep_overlap"])
    fwd = [np.zeros((n, P, D)) for _ in variants]
    bwd = [np.zeros((n, P, D)) for _ in variants]
    exp = [np.zeros((n, P, D, OV)) for _ in variants]
    by_name: dict[str, list[int]] = {}
    for vi, (name, _, _) in enumerate(variants):
        by_name.setdefault(name, []).append(vi)
    with_ep = batch.bk[:, 2] > 1
    for subset in (np.flatnonzero(~with_ep), np.flatnonzero(with_ep)):
        if not len(subset):
            continue
        b = batch.bk[subset]
        spans = batch.block_spans(subset)
        first = int(batch.bk_first[subset[0]])
        # Without EP the dispatcher does nothing: one evaluation serves every dispatcher value.
        dispatchers = list(enumerate(lev["dispatcher"]))[: D if b[0, 2] > 1 else 1]
        for pi, precision in enumerate(lev["precision"]):
            for di, dispatcher in dispatchers:
                setups = [setup_of(first, precision=precision, dispatcher=dispatcher, ep_overlap=ov)
                          for ov in lev["ep_overlap"]]
                sh = dataclasses.replace(plan_shard(setups[0]), tp=b[:, 0], cp=b[:, 1], ep=b[:, 2], etp=b[:, 3],
                                         mbs=b[:, 4])
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
                        fwd[vi][subset, pi, di] = bt.fwd
                        bwd[vi][subset, pi, di] = bt.bwd
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
                                    memo["tp", full] = tp_comm(ms, name, bt, tp_coll, rates, flags[0].tp_overlap, full).exposed
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
                            exposed = [a + c for a, c in zip(exposed, e)]
                        for oi in range(OV):
                            exp[vi][subset, pi, di, oi] = exposed[oi]
        if len(dispatchers) < D:
            for arr in fwd + bwd + exp:
                arr[subset, :, 1:] = arr[subset, :, :1]
    return fwd, bwd, exp
