"""The search's space and its bounds (issue 19): every plan the launcher accepts is in the space
(one-layer chunks, VPP up to the layer count, TP up to the NVLink domain, every micro-batch size
memory allows), what the user pins wins, and each bound that leaves keys out is a lower bound on
what the tables (the exhaustive oracle's numbers) give for every key of small spaces."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.pipeline import pipeline_time
from planner.cost.setup import Assumptions
from planner.errors import NothingFitsError
from planner.search.driver import Options, run_search
from planner.search.bnb import BranchAndBound
from planner.search.exhaustive import (
    best_per_key, fitting_time_floor, group_index_vectors, plan_peaks, rule_time_floor,
)
from planner.search.space import COL, Limits, build_space
from planner.search.tables import build_tables
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job


def _space(model, hw, gpus, gb, seq=4096, fix=None, maxes=None, precisions=("bf16",)):
    job = Job(gpus=gpus, global_batch=gb, seq_len=seq, precisions=list(precisions))
    return build_space(load_model(model), load_hardware(hw), job, limits=Limits.parse(fix, maxes))


def _keys(space) -> set[tuple]:
    cols = [COL[k] for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")]
    return {tuple(int(x) for x in r) for r in space.keys[:, cols]}


# ---- what the space holds ---------------------------------------------------------------------
def test_one_layer_chunks_vpp_beyond_eight_tp_to_the_domain_and_large_micro_batches_are_in():
    space = _space("korthikanti-megatron-22b", "a100-80gb", 8, 16, 2048)
    keys = _keys(space)
    assert (4, 1, 2, 24, 1, 4, 2) in keys  # Calculon's best: tp=4, pp=2, vpp=24 (one layer per chunk), mbs=2
    # 48 layers: up to 50 chunks on pp=2 (one layer each, the embedding and the loss on their own)
    assert max(space.col("vpp")) == 25 and max(space.col("tp")) == 8
    assert max(space.col("mbs")) == 16  # every size dividing the batch per data-parallel rank
    nvl = _space("deepseek-v3", "gb200-nvl72", 256, 8192)
    assert max(nvl.col("tp")) == 64 and max(nvl.col("etp")) == 64  # within the 72-GPU domain
    assert {int(v) for v in nvl.col("vpp")} == set(range(1, 32))  # up to (61 layers + 2) / pp=2
    assert any("tp <= 72" in d for d in nvl.scope["declared"])


def test_fix_and_max_override_every_cap():
    space = _space("llama3.1-8b", "h100", 512, 256, fix="tp=16,cp=16,vpp=3,pp=2")
    assert _keys(space) and {(k[0], k[1], k[2], k[3]) for k in _keys(space)} == {(16, 16, 2, 3)}
    assert not any("tp <=" in d or "cp <=" in d for d in space.scope["declared"])
    space = _space("llama3.1-8b", "h100", 64, 256, maxes="tp=16,mbs=2")
    assert max(space.col("tp")) == 16 and max(space.col("mbs")) == 2


def test_a_fixed_layout_is_used_as_given():
    # Megatron-LM's DeepSeek-V3 GB200 guide: 32 stages, the last one without decoder layers (the
    # guide's run has no MTP; the catalog model has one MTP module, which joins the loss)
    with pytest.raises(NothingFitsError, match="layout-mtp.*MTP modules"):
        run_search(load_model("deepseek-v3"), load_hardware("gb200-nvl72"), Job(gpus=256, global_batch=2048, seq_len=4096),
                   Options(limits=Limits.parse("layout=Et|(tt|)*30L,pp=8,ep=32", None)))
    layout = "Et|(tt|)*30mL"
    space = _space("deepseek-v3", "gb200-nvl72", 256, 2048, fix=f"layout={layout},ep=32,tp=1,cp=1,etp=1,mbs=1")
    assert set(space.layouts) - {None} == {layout}
    # pp * vpp = 32 stages; pp=1 cannot interleave, pp >= 16 leaves too few GPUs for EP32
    assert {(int(p), int(v)) for p, v in zip(space.col("pp"), space.col("vpp"))} == {(2, 16), (4, 8), (8, 4)}
    assert all(space.struct(i).layout == layout for i in range(len(space)))


# ---- the bounds against the tables ------------------------------------------------------------
SMALL = [
    ("llama3.1-8b", "h100", 8, 64, 4096, "pp=2", "bf16,fp8"),
    ("qwen3-30b-a3b", "h100", 16, 128, 4096, "pp=4,tp=2,cp=1,ep=8", "bf16"),
    ("deepseek-v3", "h100", 256, 512, 4096, "pp=8,tp=1,cp=1,ep=32,vpp=4,mbs=2", "bf16"),
]


@pytest.mark.parametrize("case", SMALL, ids=lambda c: f"{c[0]}-{c[1]}")
def test_bounds_never_exceed_what_the_tables_give(case):
    model, hw, gpus, gb, seq, maxes, prec = case
    space = _space(model, hw, gpus, gb, seq, maxes=maxes, precisions=prec.split(","))
    tables = build_tables(space)
    bb = BranchAndBound(space, Assumptions(), 10, lambda i: True)
    bb.setup()
    gi, flats = group_index_vectors(tables)
    P = len(flats)
    exact = tables.time_lower_bound()
    # memory: the floor is below the smallest peak any lever choice reaches on the worst stage
    rows = np.repeat(np.arange(len(space)), P)
    peaks = plan_peaks(tables, rows, np.tile(flats, len(space)), gi).reshape(len(space), P).min(axis=1)
    assert (bb.mem_floor <= peaks).all()
    assert bb.mem_floor.max() > 0
    # time: this layout's floor <= the exact time floor (each term at its minimum) <= every plan;
    # the any-layout floor <= this layout's
    seen = 0
    for st in bb.layouts:
        assert (st.floor <= exact[st.rows]).all()
        assert (st.any_floor <= st.floor).all()
        seen += len(st.rows)
    assert seen + bb.dominated["memory"] == len(space)


def test_the_step_time_floor_counts_the_local_attention_layers():
    """The cost model names a local-attention layer's block apart ('moe_swa': Llama 4 Scout's 36
    chunked-attention layers of 48); the floor counts those blocks too, so on keys without a
    pipeline it is the exact pipeline phase's minimum (it was a third of it, and the reference
    job timed some 180,000 keys for 256)."""
    space = _space("llama4-scout", "gb200-nvl72", 64, 128, maxes="pp=1,tp=1,cp=1,ep=8")
    tables = build_tables(space)
    bb = BranchAndBound(space, Assumptions(), 10, lambda i: True)
    bb.setup()
    tp = tables.TP.min(axis=1)
    seen = 0
    for st in bb.layouts:
        assert st.lay.pp == 1
        assert (st.floor <= tp[st.rows]).all()
        assert (st.floor >= tp[st.rows] - 2).all()  # the floors' rounding slack and the tables'
        seen += len(st.rows)
    assert seen


@pytest.mark.parametrize("case", SMALL[:2], ids=lambda c: f"{c[0]}-{c[1]}")
def test_the_rule_and_fitting_floors_are_each_keys_least_accepted_and_fitting_time(case):
    """The branch and bound's floors before a key's memory tables (BranchAndBound._memory): the
    least time over the combinations the rules accept, then over those whose W + A fit every rank,
    each checked combination by combination; both between the per-term floor and the best plan."""
    model, hw, gpus, gb, seq, maxes, prec = case
    space = _space(model, hw, gpus, gb, seq, maxes=maxes, precisions=prec.split(","))
    tables = build_tables(space)
    gi, flats = group_index_vectors(tables)
    time = {k: getattr(tables, k) for k in ("TP", "TD", "TO")}
    ruled = rule_time_floor(time, tables.R1, tables.R2, gi)
    fitted = fitting_time_floor(time, tables.W, tables.A, tables.cap_mib, tables.R1, tables.R2, gi)
    inf = np.iinfo(np.int64).max
    for i in np.random.default_rng(0).choice(len(space), size=min(40, len(space)), replace=False):
        accepted, fits = [], []
        for f in flats:
            if not (tables.R1[i, gi["R1"][f]] and tables.R2[i, gi["R2"][f]]):
                continue
            t = int(tables.TP[i, gi["TP"][f]] + tables.TD[i, gi["TD"][f]] + tables.TO[i, gi["TO"][f]])
            accepted.append(t)
            if all(int(tables.W[i, r, gi["W"][f]]) + int(tables.A[i, r, gi["A"][f]]) <= tables.cap_mib
                   for r in range(tables.W.shape[1])):
                fits.append(t)
        assert ruled[i] == min(accepted, default=inf) and fitted[i] == min(fits, default=inf)
    best = best_per_key(tables)
    assert (tables.time_lower_bound() <= ruled).all() and (ruled <= fitted).all()
    assert (fitted[np.isfinite(best)] <= best[np.isfinite(best)]).all()
    assert (fitted > ruled).any()  # memory rules out the fastest accepted combination of some key
    # The branch and bound reads a layout's rules by signature: the same rows as each key's own.
    bb = BranchAndBound(space, Assumptions(), 10, lambda i: True)
    for _, rows in space.groups():
        r1, r2 = bb._rule_rows(rows)
        assert (r1 == tables.R1[rows]).all() and (r2 == tables.R2[rows]).all()


def test_until_u_is_known_a_timed_chunk_is_costed_before_the_next_layout_is_timed():
    """Each layout timed before U is known gets a context of its own (BranchAndBound._child): with
    the memory visit queued behind every layout's time visit, Llama-4-Scout on 64 H100s held 4.7 GB of
    them before its first plan; here nine contexts where the first layout's keys set U."""
    space = _space("llama3.1-70b", "h100", 64, 128, 4096)
    bb = BranchAndBound(space, Assumptions(), 160, lambda i: True)
    bb.run()
    assert bb.U < np.iinfo(np.int64).max and len(bb.layouts) > 1
    assert bb.children == 1


def test_the_memory_floor_grows_with_the_micro_batch_size():
    space = _space("llama3.1-70b", "h100", 8, 256, 8192, maxes="pp=4")
    bb = BranchAndBound(space, Assumptions(), 10, lambda i: True)
    bb.setup()
    key = [COL[k] for k in ("tp", "cp", "pp", "vpp", "ep", "etp")]
    by: dict[tuple, list] = {}
    for i in range(len(space)):
        by.setdefault(tuple(space.keys[i, key]), []).append((int(space.keys[i, COL["mbs"]]), int(bb.mem_floor[i])))
    assert max(len(v) for v in by.values()) >= 4
    for series in by.values():
        floors = [f for _, f in sorted(series)]
        assert floors == sorted(floors)
    # a micro-batch size nothing fits is dropped with every larger one
    assert bb.dominated["memory"] > 0


def test_pipeline_time_is_monotone_and_smallest_when_balanced():
    """What the step-time floors rely on (planner.search.bounds)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        pp, m, v = int(rng.integers(1, 9)), int(rng.integers(1, 64)), int(rng.integers(1, 9))
        t = rng.random(pp)
        base = pipeline_time(list(t), m, v)
        up = t.copy()
        up[rng.integers(pp)] += rng.random()
        assert pipeline_time(list(up), m, v) >= base
        assert pipeline_time([t.sum() / pp] * pp, m, v) <= base + 1e-12


def _search_8b(limits: str | None = None, precisions=("bf16",), **kw):
    model, hw = load_model("llama3.1-8b"), load_hardware("h100")
    job = Job(gpus=8, global_batch=64, seq_len=4096, precisions=precisions)
    return model, hw, job, run_search(model, hw, job, Options(top=3, per_stage=False,
                                                              limits=Limits.parse(limits, "pp=2"), **kw))


def test_grad_reduce_and_moments_are_searched_and_win_where_they_pay():
    """grad_reduce (fp32|bf16) and the Adam moments (fp32|bf16) are levers: on a small dense job
    the bf16 gradient reduction and bf16 moments each save memory and traffic, so the best plan
    takes them and beats the best plan with both pinned to fp32. Every ranked plan's numbers
    are explain's (the tables were costed with its levers)."""
    from planner.cost.evaluate import plan_evaluation
    from planner.cost.setup import resolve_setup

    model, hw, job, plain = _search_8b()
    assert plain.space.scope["levers"]["grad_reduce"] == ["fp32", "bf16"]
    assert plain.space.scope["levers"]["moments"] == ["fp32", "bf16"]
    assert plain.space.scope["levers"]["param_gather"] == ["bf16"]  # fp8 only with an FP8 precision
    *_, pinned = _search_8b("grad_reduce=fp32", moments=("fp32",))
    assert all(p.plan.grad_reduce == "fp32" and p.plan.moments == "fp32" for p in pinned.plans)
    best = plain.plans[0]
    assert best.plan.grad_reduce == "bf16" and best.plan.moments == "bf16"
    assert best.objective_us < pinned.plans[0].objective_us
    for p in plain.plans:
        again = plan_evaluation(resolve_setup(model, hw, job, p.plan, Assumptions()))
        assert again["memory"] == p.evaluation["memory"] and again["time"] == p.evaluation["time"]


def test_fp8_param_gather_is_searched_with_fp8_and_refused_without():
    """param_gather=fp8 is offered when the job allows FP8 and taken by the best plan (FP8 weights
    halve the gather); the launcher rules keep it off every bf16 plan (param-gather-fp8) and off
    DDP (param-gather-sharded: validate_args needs a sharded optimizer)."""
    *_, f8 = _search_8b(precisions=("bf16", "fp8"))
    assert f8.space.scope["levers"]["param_gather"] == ["bf16", "fp8"]
    assert f8.plans[0].plan.param_gather == "fp8" and f8.plans[0].plan.precision == "fp8"
    *_, bf16_only = _search_8b("precision=bf16", precisions=("bf16", "fp8"))
    assert all(p.plan.param_gather == "bf16" for p in bf16_only.plans)
    *_, ddp = _search_8b("sharding=ddp", precisions=("bf16", "fp8"))
    assert all(p.plan.param_gather == "bf16" for p in ddp.plans)


def test_levers_the_release_lacks_are_not_searched():
    """torchtitan 0.3.0 reduces gradients in float32 only: its profile does not offer
    grad_reduce=bf16, so the search never ranks it, and a --fix of it is refused naming the release."""
    from planner.errors import PlannerError
    from planner.specs.catalog import load_software

    titan = load_software("torchtitan-0.3.0")
    assert not titan.offers("grad_reduce", "bf16")
    *_, res = _search_8b(target="torchtitan", software=titan)
    assert res.space.scope["levers"]["grad_reduce"] == ["fp32"]
    assert all(p.plan.grad_reduce == "fp32" for p in res.plans)
    with pytest.raises(PlannerError, match="grad_reduce=bf16"):
        _search_8b("grad_reduce=bf16", target="torchtitan", software=titan)


def test_a_space_like_another_reuses_its_keys_only_when_the_structural_limits_agree():
    # The robust searches pin levers only (planner.search.families.robust_searches): they read the first
    # search's structural keys instead of enumerating them again, and get what enumerating gives.
    from planner.search.families import robust_searches

    model, hw = load_model("llama3.1-8b"), load_hardware("h100")
    job = Job(gpus=64, global_batch=256, seq_len=4096, precisions=["bf16"])
    first = build_space(model, hw, job, limits=Limits.parse(None, "tp=8"))
    searches = robust_searches(first.limits)
    assert len(searches) == 2
    for rs in searches:  # no recompute, then any recompute
        fresh, like = (build_space(model, hw, job, limits=rs.limits, like=x) for x in (None, first))
        assert like.keys is first.keys  # read, not enumerated
        assert np.array_equal(like.keys, fresh.keys) and np.array_equal(like.layout_of, fresh.layout_of)
        assert like.layouts == fresh.layouts and like.pruned == fresh.pruned and like.scope == fresh.scope
        assert np.array_equal(like.fm_keys, fresh.fm_keys) and np.array_equal(like.fm_of, fresh.fm_of)
        assert like.levers == fresh.levers and len(like.levers["sharding"]) == 1 < len(first.levers["sharding"])
    assert len(searches[0].limits.fix) > len(searches[1].limits.fix)  # the first pins the recompute too
    # A structural limit that differs (a bound on TP) enumerates anew.
    other = build_space(model, hw, job, limits=Limits.parse(None, "tp=4"), like=first)
    assert other.keys is not first.keys and max(other.col("tp")) == 4


def test_contexts_read_the_shared_stack_as_their_own_block_costs(monkeypatch):
    """A context whose block costs are composed in the shared one (the keys costed before the bound
    is known) reads the shared context's stack of the variants at its rows
    (planner.cost.terms.blocks._rows_of): every table equals stacking its own block costs."""
    from planner.cost.compose import CostContext

    space = _space("qwen3-30b-a3b", "h100", 16, 128, 4096, maxes="pp=4,tp=2,cp=1,ep=8")

    def costed(blocks_parent):
        monkeypatch.setattr(CostContext, "blocks_parent", blocks_parent)
        bb = BranchAndBound(space, Assumptions(), 40, lambda i: True)
        bb.FIRST_TIMED, bb.FIRST_COSTED = 2, 2  # six small contexts before the bound is known
        bb.EARLY_MEMORY = False  # (each layout timed before any is costed)
        bb.run()
        return bb, bb.all_costed()

    shared, mine = costed(CostContext.blocks_parent)
    assert shared.children >= 3 and shared.shared is not None
    _, own = costed(lambda self: None)
    assert any(k[0] == "stacked_costs" for k in shared.shared.memo)  # the stacks were read there
    for name in ("TP", "TD", "TO", "W", "C", "A", "OT", "HW", "HA"):
        assert np.array_equal(getattr(mine, name), getattr(own, name)), name
