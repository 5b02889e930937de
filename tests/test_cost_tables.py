"""The search's cost tables agree with the one-plan composition, plan by plan.

The tables evaluate the one composition (planner.cost.compose) on batches of many plans (every key
of a pipeline layout, one lever combination at a time); each entry must equal what a batch of that
one plan gives: round(1e6 * term) for the pipeline, exposed data-parallel/FSDP and optimizer terms
(and TP + TD + TO its step time), MiB rounded up for constant memory, buffers, the activation peak
over the schedule, the optimizer-step temporaries and host memory, on every pipeline rank. Plans are
sampled from small spaces of a dense GQA model, an MoE MLA model and MoE GQA models on Hopper and
Blackwell, with every lever value (offload, FSDP, recompute variants, EP overlap, dispatchers, FP8),
the local spec, and uneven layouts present in the sample.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from planner.cost.comm import a2a_time, collective_time
from planner.cost.compose import costs_of
from planner.cost.compute import block_time
from planner.cost.flops import Shard, model_shape
from planner.cost.memory import memory_report
from planner.cost.rates import rates_for
from planner.cost.setup import Assumptions, resolve_setup
from planner.cost.time import time_report
from planner.cost.topology import GroupSpan, _span, group_ranks, group_spans, grid_orders, progression_ranks
from planner.search.space import Limits, build_space, make_plan
from planner.errors import PlanRuleError
from planner.search.tables import GROUPS, MiB, build_tables, combos
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job

TOL_US = 2


def _job(gpus, global_batch, seq_len=4096, **kw):
    return Job(gpus=gpus, global_batch=global_batch, seq_len=seq_len, precisions=["bf16", "fp8"], **kw)


CASES = {
    # name: (model, hardware, job, assumptions, limits)
    "dense-gqa-h100": ("llama3.1-70b", "h100", _job(512, 1024), Assumptions(), None),
    "dense-gqa-b200-local": ("llama3.1-8b", "b200", _job(64, 256, 2048), Assumptions(implementation="megatron-local"),
                             None),
    "moe-mla-nvl72": ("deepseek-v3", "gb200-nvl72", _job(256, 2048), Assumptions(), None),
    "moe-mla-h100-imbalance": ("deepseek-v3", "h100", _job(512, 1024),
                               Assumptions(routing_imbalance=1.25, dp_overlap=False), None),
    "moe-gqa-h200": ("qwen3-235b-a22b", "h200", _job(256, 1024), Assumptions(), None),
    # the local spec's SequentialMLP experts (host syncs, per-linear host cost, torch AdamW)
    "moe-gqa-h200-local": ("mixtral-8x7b", "h200", _job(64, 256, 2048), Assumptions(implementation="megatron-local"),
                           None),
    "moe-gqa-b200-order": ("mixtral-8x7b", "b200", _job(128, 512, domain_fill=4),
                           Assumptions(rank_order="tp-cp-dp-ep-pp", tp_comm_overlap=False), None),
    "dense-hsdp-full-layers": ("llama3.1-70b", "h200", _job(256, 512), Assumptions(),
                               Limits.parse("recompute=full:1,sharding=hsdp:4", None)),
}


def _resolves(space, s, assumptions) -> bool:
    try:
        resolve_setup(space.model, space.hw, space.job, make_plan(s, {k: v[0] for k, v in space.levers.items()}),
                      assumptions)
    except PlanRuleError:
        return False
    return True


def _pick_structs(space, n: int, rnd: random.Random, assumptions=None) -> list:
    """Keys that exercise the model: uneven layouts, interleaving, EP, CP, and the rest at random
    (keys the model rules accept with the first lever values, as the search visits them)."""
    assumptions = assumptions or Assumptions()
    want = [lambda s: s.layout is not None, lambda s: s.vpp > 1, lambda s: s.ep > 1, lambda s: s.cp > 1,
            lambda s: s.pp == 1, lambda s: s.etp < s.tp, lambda s: s.ep > 1 and s.vpp > 1 and s.layout is not None,
            lambda s: True]
    picked: list = []
    for w in want:
        pool = [s for s in space.structs if w(s) and s not in picked]
        rnd.shuffle(pool)
        quota = 3 if w is not want[-1] else max(0, n - len(picked))
        for s in pool:
            if quota == 0:
                break
            if _resolves(space, s, assumptions):
                picked.append(s)
                quota -= 1
    return picked


def _one(x) -> float:
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def _mib(x) -> int:
    return int(math.ceil(_one(x) / MiB - 1e-9))


def _plan_terms(space, s, levers, assumptions):
    """A plan's terms from the composition of a batch of one plan, or None when the plan breaks a
    model rule (the search drops such plans by its rule tables)."""
    try:
        setup = resolve_setup(space.model, space.hw, space.job, make_plan(s, levers), assumptions)
    except PlanRuleError:
        return None
    c = costs_of(setup)
    ranks = range(s.pp)
    mem = {"W": [c.constant(r).total for r in ranks], "HW": [c.constant(r).host_optimizer for r in ranks],
           "C": [c.sync_buffers(r) for r in ranks],  # communication and FSDP buffers
           "G": [c.graph_pool(r) for r in ranks],  # CUDA-graph buffers and pools
           "A": [c.activation_peak(r) for r in ranks], "OT": [c.optimizer_transient(r) for r in ranks]}
    if c.lv.offload_activations:
        mem["HA"] = [c.host_activation_bytes(r) for r in ranks]
    # The tables read the walked schedules' closed forms (planner.cost.walked): the one-plan
    # composition of the same (walk=False); test_schedules_estimate bounds them against the walk.
    est = costs_of(setup, walk=False) if c.walked() else c
    time = {"TP": _one(est.pipeline_s()), "TD": _one(c.data_parallel().exposed), "TO": _one(c.optimizer().seconds)}
    return setup, time, {k: [_mib(x) for x in v] for k, v in mem.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_table_entries_equal_the_one_plan_composition(case):
    model_name, hw_name, job, assumptions, limits = CASES[case]
    model, hw = load_model(model_name), load_hardware(hw_name)
    space = build_space(model, hw, job, limits=limits, implementation=assumptions.implementation, check_rules=False)
    rnd = random.Random(case)
    structs = _pick_structs(space, 24, rnd, assumptions)
    t = build_tables(space, assumptions=assumptions, structs=structs)
    for k in ("TP", "TD", "TO"):
        assert (getattr(t, k) >= 0).all() and getattr(t, k).any(), f"{k}: unfilled entries"

    # Every lever value appears in the sample (round robin over each lever's values, shuffled).
    n_plans = 40
    order = {k: [v[i % len(v)] for i in range(n_plans)] for k, v in space.levers.items()}
    for v in order.values():
        rnd.shuffle(v)
    seen: dict[str, set] = {k: set() for k in space.levers}
    shapes, compared = set(), 0
    for i in range(n_plans):
        si = i % len(structs)
        s = structs[si]
        levers = {k: order[k][i] for k in space.levers}
        ref = _plan_terms(space, s, levers, assumptions)
        if ref is None:
            continue
        setup, time, mem = ref
        compared += 1
        got = {k: int(getattr(t, k)[si, combos(space, GROUPS[k]).index(tuple(levers[x] for x in GROUPS[k]))])
               for k in ("TP", "TD", "TO")}
        for k in got:
            assert abs(got[k] - round(time[k] * 1e6)) <= TOL_US, (case, k, s, levers, got[k], time[k])
        walked = costs_of(setup).walked()
        step = time_report(setup, costs=costs_of(setup, walk=False) if walked else None).step_time_s
        assert abs(sum(got.values()) - round(step * 1e6)) <= 3 * TOL_US, (case, s, levers)
        for k, per_rank in mem.items():
            grp = GROUPS["W" if k == "HW" else "A" if k == "HA" else k]
            ci = combos(space, grp).index(tuple(levers[x] for x in grp))
            assert [int(getattr(t, k)[si, r, ci]) for r in range(s.pp)] == per_rank, (case, k, s, levers)
        # The stage peaks the tables add up (each term rounded up) are the memory report's.
        report = memory_report(setup)
        for r in range(s.pp):
            parts = {k: mem[k][r] for k in ("W", "C", "G", "A", "OT")}
            allocated = report.stages[r].peak_bytes / MiB
            total = parts["W"] + parts["C"] + parts["G"] + max(parts["A"], parts["OT"])
            assert allocated <= total <= allocated + 4, (case, s, levers, r)
        for k in ("offload", "sharding", "recompute", "precision") + (("ep_overlap", "dispatcher") if s.ep > 1 else ()):
            seen[k].add(levers[k])
        shapes.update({"uneven"} if s.layout is not None else set())
        shapes.update({"interleaved"} if s.vpp > 1 else set())
    assert compared >= n_plans // 2
    for k in ("offload", "sharding", "recompute", "precision") + (("ep_overlap", "dispatcher") if model.is_moe else ()):
        assert seen[k] == set(space.levers[k]), k
    assert shapes == {"uneven", "interleaved"}


# ---- the building blocks on arrays give the scalar results elementwise ---------------------------
def test_block_time_on_arrays_is_elementwise_scalar():
    setup = resolve_setup(load_model("deepseek-v3"), load_hardware("h100"), _job(256, 1024),
                          make_plan(build_space(load_model("deepseek-v3"), load_hardware("h100"), _job(256, 1024),
                                                check_rules=False).structs[0], {}), Assumptions())
    ms, rates = model_shape(setup.model), rates_for(setup)
    degrees = [(1, 1, 8, 1, 1), (2, 2, 16, 2, 2), (4, 1, 32, 1, 1), (8, 2, 64, 4, 4), (8, 1, 256, 8, 1)]
    tp, cp, ep, etp, mbs = (np.array(c) for c in zip(*degrees))
    for fp8, dispatcher, recompute in itertools.product((False, True), ("alltoall", "deepep"),
                                                        (None, ("moe_act",), ("moe",), "full")):
        arr = block_time(ms, Shard(tp, cp, ep, etp, mbs, 4096, dispatcher=dispatcher, imbalance=1.1, fp8=fp8), "moe",
                         rates, recompute)
        for i, d in enumerate(degrees):
            one = block_time(ms, Shard(*d, 4096, dispatcher=dispatcher, imbalance=1.1, fp8=fp8), "moe", rates, recompute)
            assert arr.fwd[i] == pytest.approx(one.fwd, rel=1e-12)
            assert arr.bwd[i] == pytest.approx(one.bwd, rel=1e-12)
            assert np.broadcast_to(arr.recompute, tp.shape)[i] == pytest.approx(one.recompute, rel=1e-12, abs=0)


def test_local_block_time_on_arrays_is_elementwise_scalar():
    """The local spec's host syncs and per-linear host time on arrays of degrees (experts per GPU
    differ with ep): elementwise the scalar result."""
    setup = resolve_setup(load_model("mixtral-8x7b"), load_hardware("h200"), _job(64, 256, 2048),
                          make_plan(build_space(load_model("mixtral-8x7b"), load_hardware("h200"), _job(64, 256, 2048),
                                                check_rules=False).structs[0], {}),
                          Assumptions(implementation="megatron-local"))
    ms, rates = model_shape(setup.model), rates_for(setup)
    degrees = [(1, 1, 1, 1, 1), (2, 1, 2, 1, 2), (4, 2, 4, 1, 1), (8, 1, 8, 2, 1)]
    tp, cp, ep, etp, mbs = (np.array(c) for c in zip(*degrees))
    for block, recompute in itertools.product(("moe", "embedding", "head"), (None, ("moe",), ("core_attn",), "full")):
        sh = Shard(tp, cp, ep, etp, mbs, 2048, implementation="megatron-local", dispatcher="alltoall")
        arr = block_time(ms, sh, block, rates, recompute)
        for i, d in enumerate(degrees):
            one = block_time(ms, Shard(*d, 2048, implementation="megatron-local", dispatcher="alltoall"), block, rates,
                             recompute)
            assert np.broadcast_to(arr.fwd, tp.shape)[i] == pytest.approx(one.fwd, rel=1e-12)
            assert np.broadcast_to(arr.bwd, tp.shape)[i] == pytest.approx(one.bwd, rel=1e-12)


def test_collectives_on_arrays_are_elementwise_scalar():
    setup = resolve_setup(load_model("llama3.1-8b"), load_hardware("gb200-nvl72"), _job(8, 8, 2048),
                          make_plan(build_space(load_model("llama3.1-8b"), load_hardware("gb200-nvl72"),
                                                _job(8, 8, 2048), check_rules=False).structs[0], {}), Assumptions())
    rates = rates_for(setup)
    spans = [GroupSpan("x", 1, 1, 1, 1, 0), GroupSpan("x", 8, 1, 8, 1, 0), GroupSpan("x", 64, 4, 16, 1, 1),
             GroupSpan("x", 72, 2, 8, 1, 1), GroupSpan("x", 2, 2, 1, 1, 1)]
    arr = GroupSpan("x", *(np.array([getattr(s, f) for s in spans]) for f in ("size", "domains", "per_domain")), 0, 0)
    nbytes = np.array([1e3, 1e6, 3e7, 5e8, 0.0])
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        got = collective_time(op, nbytes, arr, rates)
        for i, s in enumerate(spans):
            assert got[i] == pytest.approx(collective_time(op, float(nbytes[i]), s, rates), rel=1e-12, abs=0)
    for dispatcher in ("alltoall", "deepep", "hybridep"):
        got = a2a_time(7168 * 2, nbytes / 1e4, 8, arr, rates, dispatcher, 4)
        for i, s in enumerate(spans):
            assert got[i] == pytest.approx(a2a_time(7168 * 2, float(nbytes[i] / 1e4), 8, s, rates, dispatcher, 4),
                                           rel=1e-12, abs=0)


def test_spans_by_progression_equal_the_rank_grid():
    """group_spans computes each dimension's groups as ranks `stride` apart; they are the rows of
    the rank grid, in order, for every Megatron order."""
    rnd = random.Random(0)
    orders = ["-".join(p) for p in itertools.permutations(["tp", "cp", "ep", "dp", "pp"])]
    for _ in range(300):
        order = rnd.choice(orders)
        dense_order, expert_order = grid_orders(order)
        sizes = {"tp": rnd.choice([1, 2, 4, 8]), "cp": rnd.choice([1, 2, 3]), "dp": rnd.choice([1, 2, 4, 6]),
                 "pp": rnd.choice([1, 2, 4])}
        fill = rnd.choice([4, 8, 72])
        for dim in dense_order:
            grid = group_ranks(sizes, dense_order, dim)
            stride = int(np.prod([sizes[d] for d in dense_order[: dense_order.index(dim)]]))
            assert (progression_ranks(stride, sizes[dim], int(np.prod(list(sizes.values())))) == grid).all()
        # The memoized spans are the spans of the grid's rows.
        ep = sizes["dp"] if sizes["dp"] in (1, 2) else 2
        edp = sizes["dp"] * sizes["cp"] * sizes["tp"] // ep
        spans = group_spans(order, fill, sizes["tp"], sizes["cp"], sizes["dp"], sizes["pp"], 1, ep, edp)
        for dim in ("tp", "cp", "dp", "pp"):
            ref = _span(dim, group_ranks(sizes, dense_order, dim), fill)
            assert spans[dim] == ref, (order, sizes, dim)
        expert = {"etp": 1, "ep": ep, "edp": edp, "pp": sizes["pp"]}
        for dim in ("etp", "ep", "edp"):
            assert spans[dim] == _span(dim, group_ranks(expert, expert_order, dim), fill), (order, sizes, dim)


def test_keys_failing_a_model_rule_still_get_rows():
    """With sharding fixed to hsdp:4, keys with dp*cp < 4 break a model rule under every lever
    choice; the tables are filled for them all the same (the search drops them by its rules)."""
    model, hw = load_model("llama3.1-8b"), load_hardware("h100")
    space = build_space(model, hw, _job(32, 64, 2048), check_rules=False, limits=Limits.parse("sharding=hsdp:4", None))
    bad = [s for s in space.structs if not _resolves(space, s, Assumptions())]
    assert bad
    t = build_tables(space, structs=bad)
    assert all((getattr(t, k) >= 0).all() for k in ("TP", "TD", "TO")) and (t.TP > 0).all()
