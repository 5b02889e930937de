"""Collectives, topology and rank placement."""

from __future__ import annotations

import dataclasses

import pytest

from planner.cost.comm import (
    a2a_time, all_reduce_time, all_to_all_volume, collective_time, gather_time, ring_all_reduce_volume,
    ring_gather_volume,
)
from planner.cost.rates import rates_for
from planner.cost.setup import resolve_setup
from planner.cost.compose import costs_of, plan_spans
from planner.cost.time import time_report
from planner.cost.topology import (
    GroupSpan, build_topology, default_domain_fill, group_links, group_ranks, group_spans, grid_orders, idle_gpus,
)
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan


# ---- textbook volumes -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8, 64, 72])
def test_ring_all_reduce_moves_2_n_minus_1_over_n(n):
    assert ring_all_reduce_volume(1.0, n) == pytest.approx(2 * (n - 1) / n)
    # and the time's bandwidth term is that volume over the bus bandwidth
    assert all_reduce_time(1e9, n, 100e9, 0.0) == pytest.approx(2 * (n - 1) / n * 1e9 / 100e9)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_all_to_all_and_gathers_move_n_minus_1_over_n(n):
    assert all_to_all_volume(1.0, n) == pytest.approx((n - 1) / n)
    assert ring_gather_volume(1.0, n) == pytest.approx((n - 1) / n)
    assert gather_time(1e9, n, 100e9, 0.0) == pytest.approx((n - 1) / n * 1e9 / 100e9)


def test_all_to_all_inside_a_domain_moves_n_minus_1_over_n():
    """Each token goes to top_k experts spread evenly; the share to other GPUs is (n-1)/n."""
    hw = load_hardware("h100")
    setup = _setup("deepseek-v3", "h100", 64, "tp=1,pp=1,ep=8,mbs=1", 64)
    r = rates_for(setup)
    span = GroupSpan("ep", 8, 1, 8, 8, 0)
    r0 = dataclasses.replace(r, a2a_peer_latency_s=0.0, nvlink_latency_s=0.0)
    t = a2a_time(1.0, 1000, 8, span, r0, "deepep")
    assert t == pytest.approx(1000 * 8 * 7 / 8 / r.a2a_bw("deepep", False))
    assert hw.domain_size == 8


def test_latency_terms_dominate_small_messages():
    span = GroupSpan("tp", 8, 1, 8, 1, 0)
    setup = _setup("deepseek-v3", "h100", 64, "tp=8,pp=1,ep=8,mbs=1", 64)
    r = rates_for(setup)
    small = collective_time("all_gather", 1024, span, r)
    assert small == pytest.approx(7 * r.nvlink_latency_s, rel=0.05)


def test_in_switch_reduction_beats_ring_inside_domain():
    setup = _setup("deepseek-v3", "h100", 64, "tp=8,pp=1,ep=8,mbs=1", 64)
    r = rates_for(setup)
    span = GroupSpan("tp", 8, 1, 8, 1, 0)
    nvls = collective_time("all_reduce", 1e9, span, r)
    ring = collective_time("all_reduce", 1e9, span, dataclasses.replace(r, nvls_algbw=None))
    assert nvls < ring


# ---- placement ----------------------------------------------------------------------------------
def test_megatron_order_groups():
    dense, expert = grid_orders("tp-cp-ep-dp-pp")
    assert dense == ("tp", "cp", "dp", "pp") and expert == ("etp", "ep", "edp", "pp")
    g = group_ranks({"tp": 2, "cp": 1, "dp": 4, "pp": 2}, dense, "tp")
    assert g[0].tolist() == [0, 1]
    g = group_ranks({"tp": 2, "cp": 1, "dp": 4, "pp": 2}, dense, "dp")
    assert g[0].tolist() == [0, 2, 4, 6]
    g = group_ranks({"tp": 2, "cp": 1, "dp": 4, "pp": 2}, dense, "pp")
    assert g[0].tolist() == [0, 8]


def _setup(model, hw, gpus, plan, gbs, fill=None, precision="bf16"):
    job = Job(gpus=gpus, global_batch=gbs, seq_len=4096, domain_fill=fill, precisions=[precision])
    return resolve_setup(load_model(model), load_hardware(hw), job, Plan.parse(plan))


DSV3_PLAN = "tp=1,pp=4,vpp=4,ep=64,etp=1,mbs=1,layout=Ettt|(tttt|)*14ttmL"


def test_nvl72_ep64_default_fill_keeps_every_ep_group_in_one_rack():
    s = _setup("deepseek-v3", "gb200-nvl72", 256, DSV3_PLAN, 8192)
    spans, fill = plan_spans(s)
    assert fill == 64 == default_domain_fill(72, 1, 1, 64, 1)
    assert spans["ep"].domains == 1 and spans["ep"].crossing == 0
    assert idle_gpus(256, fill, 72) == 32
    report = time_report(s).to_json()
    assert report["topology"]["idle_gpus"] == 32
    assert report["topology"]["groups"]["ep"]["crossing_groups"] == 0


def test_nvl72_fill_72_counts_crossing_groups_and_slows_all_to_all():
    inside = _setup("deepseek-v3", "gb200-nvl72", 256, DSV3_PLAN, 8192)
    packed = _setup("deepseek-v3", "gb200-nvl72", 256, DSV3_PLAN, 8192, fill=72)
    spans, fill = plan_spans(packed)
    assert fill == 72
    assert spans["ep"].crossing > 0 and spans["ep"].domains == 2
    # The crossing groups run their all-to-all partly over the 50 GB/s NICs.
    ep_in = costs_of(inside).ranks()[1].comm(exposed=False)["ep"][0]
    ep_out = costs_of(packed).ranks()[1].comm(exposed=False)["ep"][0]
    assert ep_out > 1.5 * ep_in
    rep = time_report(packed).to_json()["topology"]
    assert rep["groups"]["ep"]["crossing_groups"] == spans["ep"].crossing
    assert rep["idle_gpus"] == 4 * 72 - 256


def test_hgx_ep64_spans_eight_domains_and_is_nic_bound():
    s = _setup("deepseek-v3", "h100", 256, DSV3_PLAN, 8192)
    spans, fill = plan_spans(s)
    assert fill == 8
    assert spans["ep"].domains == 8 and spans["ep"].per_domain == 8
    r = rates_for(s)
    tokens, h = 4096, 7168
    t = a2a_time(2 * h, tokens, 8, spans["ep"], r, "deepep", 4)
    # Halving the NIC bandwidth nearly doubles the all-to-all; halving NVLink barely matters.
    slow_nic = a2a_time(2 * h, tokens, 8, spans["ep"], dataclasses.replace(r, a2a_nic=tuple((k, v / 2) for k, v in r.a2a_nic)), "deepep", 4)
    slow_nvl = a2a_time(2 * h, tokens, 8, spans["ep"], dataclasses.replace(r, a2a_nvlink=tuple((k, v / 2) for k, v in r.a2a_nvlink)), "deepep", 4)
    assert slow_nic == pytest.approx(2 * t, rel=0.05)
    assert slow_nvl < 1.05 * t
    # and the report says the EP all-to-all crosses domains
    assert time_report(s).to_json()["topology"]["groups"]["ep"]["domains"] == 8


def test_networkx_graph_agrees_with_spans():
    g = build_topology(256, 64, 72, 900e9, 50e9)
    ep = group_ranks({"etp": 1, "ep": 64, "edp": 1, "pp": 4}, ("etp", "ep", "edp", "pp"), "ep")
    inside = group_links(g, ep[1])
    assert inside["domains"] == [1] and inside["bottleneck_bandwidth"] == 900e9
    assert all(kind == "nvlink" for _, _, kind in inside["links"])
    g72 = build_topology(256, 72, 72, 900e9, 50e9)
    crossing = group_links(g72, ep[1])
    assert crossing["domains"] == [0, 1] and crossing["bottleneck_bandwidth"] == 50e9
    spans = group_spans("tp-cp-ep-dp-pp", 72, 1, 1, 64, 4, 1, 64, 1)
    assert spans["ep"].domains == len(crossing["domains"])


def test_domain_fill_validation():
    from planner.errors import PlannerError

    s = _setup("deepseek-v3", "gb200-nvl72", 256, DSV3_PLAN, 8192, fill=80)
    with pytest.raises(PlannerError):
        plan_spans(s)
