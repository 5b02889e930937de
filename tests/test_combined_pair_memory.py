"""Megatron-Core's combined 1F1B (ep_overlap) runs a forward and the previous micro-batch's backward
as one overlapped step, layer by layer (megatron/core/models/common/model_chunk_schedule_plan.py
TransformerModelChunkSchedulePlan.run): forward layer i beside backward layer L-1-i, each backward
layer's state released as it finishes. The step holds about one micro-batch, not two."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.cost.compose import costs_of
from planner.cost.memory import memory_report, stage_memory
from planner.cost.pieces import ChunkMemory, LayerMemory, pair_rise, pair_steps, peak_over_profiles
from planner.cost.schedules.inflight import pair_profile_table, paired_forwards
from planner.cost.timeline import stage_timeline
from planner.specs.schedule import schedule_named as named

from tests._models import setup_for

COMBINED = named("combined-1f1b")
QWEN_PLAN = "ep=8,etp=1,mbs=4,precision=fp8,dispatcher=hybridep,ep_overlap={}"


def _chunk(index: int, spec) -> ChunkMemory:
    """A chunk from (kept, fwd transient, bwd transient, piece) tuples."""
    return ChunkMemory(index, tuple(LayerMemory(f"l{i}", k, f, b, k, piece) for i, (k, f, b, piece) in enumerate(spec)))


def _brute_pair(f: ChunkMemory, b: ChunkMemory) -> float:
    added = freed = best = 0.0
    for fl, bl in pair_steps(f, b):
        point = added - freed + (fl.kept + fl.fwd_transient if fl else 0.0) + (bl.bwd_transient if bl else 0.0)
        best = max(best, point)
        added += fl.kept if fl else 0.0
        freed += bl.kept if bl else 0.0
    return best


def test_pair_steps_follow_megatrons_layer_pairing():
    """f's pieces in order beside b's in reverse: embedding with the head's backward, layer i with
    layer L-1-i, the head's forward when b is done."""
    f = _chunk(0, [(1, 0, 0, "E")] + [(10, 0, 0, ("t", i)) for i in range(3)] + [(2, 0, 0, "L")])
    names = [(fl.name if fl else None, bl.name if bl else None) for fl, bl in pair_steps(f, f)]
    assert names == [("l0", "l4"), ("l1", "l3"), ("l2", "l2"), ("l3", "l1"), ("l4", "l0")]
    short = _chunk(1, [(5, 0, 0, "x")])
    assert [(fl.name if fl else None, bl.name if bl else None) for fl, bl in pair_steps(short, f)][-1] == (None, "l0")


def test_pair_rise_is_the_highest_point_of_its_steps():
    """The closed form over runs equals the step-by-step maximum, on chunks of uneven lengths, runs
    and per-layer numbers (forward layers growing or shrinking against the backward's)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        chunks = []
        for c in range(2):
            spec = []
            for run in range(int(rng.integers(1, 4))):
                k, ft, bt = (float(x) for x in rng.integers(0, 20, 3))
                spec += [(k, ft, bt, (c, run))] * int(rng.integers(1, 6))
            chunks.append(_chunk(c, spec))
        for f, b in itertools.product(chunks, repeat=2):
            assert pair_rise(f, b) == pytest.approx(_brute_pair(f, b))


def test_uniform_layers_pair_to_one_layer_above_the_held_micro_batch():
    """L identical layers: the step rises by one layer's kept bytes and both transients, not by
    another micro-batch's L layers."""
    layers = _chunk(0, [(10.0, 3.0, 4.0, "t")] * 8)
    assert pair_rise(layers, layers) == 10.0 + 3.0 + 4.0
    assert layers.fwd_rise == 8 * 10.0 + 3.0  # what the step counted as when its forward came first


@pytest.mark.parametrize("p,v,m", [(1, 1, 1), (1, 1, 4), (2, 2, 4), (4, 2, 8)])
def test_paired_forwards_are_the_steady_state_ones(p, v, m):
    """Every forward after the warm-up (Megatron's plus one) is paired with the backward after it;
    a step of one micro-batch has no pair (first forward alone, last backward alone)."""
    from planner.cost.schedule import warmup_count
    from planner.cost.schedules.inflight import held_matrix

    for r in range(p):
        kinds = held_matrix(COMBINED, p, v, m, r)[0]
        pf = paired_forwards(COMBINED, p, v, m, r)
        n = COMBINED.chunks(v)
        assert len(pf) == m * n - min(warmup_count(p, n, m, r) + 1, m * n)
        assert (kinds[pf] == 0).all() and (kinds[pf + 1] == 1).all()
    assert len(paired_forwards(named("1f1b"), 1, 1, 4, 0)) == 0


def test_pp1_profiles_hold_one_micro_batch_before_each_pair():
    """PP 1, four micro-batches: the first forward on nothing, each pair on the micro-batch its
    backward finishes, the last backward alone."""
    table = pair_profile_table(COMBINED, 1, 1, 4, 0).tolist()
    assert table == [[0, 0, 0], [1, 0, 1], [2, 0, 1]]


def test_peak_over_profiles_reads_the_pair_rise():
    """One chunk, PP 1: the peak is one micro-batch held plus the pair's rise (or the first forward
    alone), where the old count was two micro-batches."""
    kept, fwd, bwd = np.array([[80.0]]), np.array([[83.0]]), np.array([[4.0]])
    old = peak_over_profiles(kept, fwd, bwd, 1, 1, 4, 0, False, schedule=COMBINED)
    new = peak_over_profiles(kept, fwd, bwd, 1, 1, 4, 0, False, schedule=COMBINED,
                             pair_rises=lambda f, b: np.array([17.0]))
    assert old[0] == 2 * 80.0 + 4.0  # the pair's backward on two micro-batches
    assert new[0] == max(83.0, 80.0 + 17.0, 80.0 + 4.0)


def test_ep_overlap_on_pp1_costs_about_one_layer_over_plain_1f1b():
    """Qwen3-30B-A3B, 8 GPUs, EP 8, PP 1: with the overlap the activations at the peak are one
    micro-batch's plus at most a layer and a loss's worth, not twice plain 1F1B's."""
    plain = stage_memory(setup_for("qwen3-30b-a3b", "gb200-nvl72", QWEN_PLAN.format("off"), gpus=8, global_batch=512,
                                   seq_len=4096), 0)
    setup = setup_for("qwen3-30b-a3b", "gb200-nvl72", QWEN_PLAN.format("wgrad"), gpus=8, global_batch=512, seq_len=4096)
    over = stage_memory(setup, 0)
    chunk = over.chunks[0]
    layer = max(x.kept for x in chunk.layers)
    assert over.activation_peak < plain.activation_peak + layer + max(x.bwd_transient for x in chunk.layers)
    assert over.activation_peak > chunk.kept
    assert over.peak_moment["window"] == "overlapped_step"


@pytest.mark.parametrize("plan", [QWEN_PLAN.format("wgrad"), "pp=2,vpp=4," + QWEN_PLAN.format("wgrad").replace("ep=8", "ep=4")])
def test_the_timeline_walks_the_pairs_to_the_peak(plan):
    """explain --plot's walk goes through each overlapped step layer by layer and reaches the peak."""
    setup = setup_for("qwen3-30b-a3b", "gb200-nvl72", plan, gpus=8, global_batch=512, seq_len=4096)
    costs = costs_of(setup)
    assert any(s.order == "combined" for s, _ in costs.schedule_columns())
    for st in memory_report(setup).stages:
        assert max(e.total for e in stage_timeline(setup, st.rank)) == pytest.approx(st.peak_bytes, rel=1e-9)


# ---- the MoE paged stash (full-iteration graphs of a dropless MoE model) ----------------------------
GRAPHED = "ep=8,etp=1,mbs=4,precision=fp8,dispatcher=hybridep,ep_overlap=wgrad,cuda_graphs=full_iteration"


def _qwen(plan: str):
    return setup_for("qwen3-30b-a3b", "gb200-nvl72", plan, gpus=8, global_batch=512, seq_len=4096)


def test_the_stash_factors_are_the_ones_the_launch_writes():
    from planner.cost.terms.inflight_memory import EXPERT_RANK_CAPACITY_FACTOR, PAGED_STASH_CUDA_FACTOR
    from planner.launchers.megatron.write import STATIC_MOE_ARGS

    args = list(STATIC_MOE_ARGS)
    assert float(args[args.index("--moe-paged-stash-buffer-size-factor-cuda") + 1]) == PAGED_STASH_CUDA_FACTOR
    assert float(args[args.index("--moe-expert-rank-capacity-factor") + 1]) == EXPERT_RANK_CAPACITY_FACTOR


def test_the_stash_takes_the_grouped_mlps_saved_tensors_at_the_balanced_load():
    """One MoE layer stashes fc1's FP8 input, its bf16 output and fc2's FP8 input for the balanced
    tokens (16,384 x top-8 on each of 8 EP ranks), whatever the assumed routing imbalance."""
    for imbalance in (1.0, 1.3):
        setup = setup_for("qwen3-30b-a3b", "gb200-nvl72", GRAPHED, gpus=8, global_batch=512, seq_len=4096,
                          routing_imbalance=imbalance)
        stash = float(costs_of(setup).stash_layer()[0])
        tk, h, fe = 4 * 4096 * 8, 2048, 768
        assert stash == pytest.approx(tk * h * (1 + 1 / 32) + 2 * tk * 2 * fe + tk * fe * (1 + 1 / 32))


def test_stashed_tensors_leave_the_layer_for_the_buffer():
    """With the graph the MoE layer keeps its stashed bytes less (they sit in the pages), its
    transients gain the capacity-sized copies (1.5x), and the graph pool holds 1.2x the peak
    in-flight stash: one micro-batch's 48 layers plus the one the overlapped step adds first."""
    from planner.cost.terms.inflight_memory import FULL_ITERATION_INPUT_BYTES_PER_TOKEN

    eager, graphed = costs_of(_qwen(GRAPHED.replace(",cuda_graphs=full_iteration", ""))), costs_of(_qwen(GRAPHED))
    s = float(graphed.stash_layer()[0])
    layer = lambda c: next(x for x in c.chunks(0)[0].at(0).layers if x.name.startswith("layer 0 "))  # noqa: E731
    e, g = layer(eager), layer(graphed)
    assert float(g.kept) == pytest.approx(float(e.kept) - s)
    assert float(g.fwd_transient) == pytest.approx(float(e.fwd_transient) + 1.5 * s)
    assert float(g.bwd_transient) == pytest.approx(float(e.bwd_transient) + 1.5 * s)
    assert float(graphed.stash_peak(0)[0]) == pytest.approx(49 * s)
    inputs = 16 * 4 * 4096 * FULL_ITERATION_INPUT_BYTES_PER_TOKEN
    assert float(graphed.graph_pool(0)[0]) == pytest.approx(inputs + 1.2 * 49 * s)
    assert float(eager.stash_peak(0)[0]) == 0.0


def test_the_six_published_moe_runs_fit():
    """Issue 41: the MoE runs that ran (gpt-oss-120b on GB200, bf16 and MXFP8; Qwen3-30B-A3B on
    B300, GB200 and GB300, MXFP8 with full-iteration graphs and the paged stash) are predicted to fit."""
    from planner.validate.evaluate import evaluate_run
    from tests._published import published_runs

    names = {"mb260401-gpt-oss-120b-gb200-bf16-64gpu", "mb2606-gpt-oss-120b-gb200-fp8mx-64gpu",
             "mb2608-gpt-oss-120b-gb200-fp8mx-64gpu", "mb2606-qwen3-30b-a3b-b300-fp8mx-8gpu",
             "mb2608-qwen3-30b-a3b-gb200-fp8mx-8gpu", "mb2608-qwen3-30b-a3b-gb300-fp8mx-8gpu"}
    runs = [r for r in published_runs() if r.name in names]
    assert len(runs) == 6
    for run in runs:
        assert evaluate_run(run).predicted["fits"], run.name


def test_the_stash_host_buffer_is_host_memory_from_the_launch():
    """--moe-paged-stash-buffer-size-factor-cpu 1.0 with a full-iteration graph: a pinned host
    buffer of 1.0 x the peak stash per GPU (the sign only picks the sizing rule); none without it
    or without the graph."""
    from planner.launchers.megatron.read import assumptions_from_flags

    flags = {"cuda_graph_impl": "full_iteration", "moe_paged_stash": True, "moe_paged_stash_buffer_size_factor_cpu": -1.0}
    assert assumptions_from_flags(flags)["paged_stash_host_factor"] == 1.0
    assert "paged_stash_host_factor" not in assumptions_from_flags({**flags, "cuda_graph_impl": "none"})
    assert "paged_stash_host_factor" not in assumptions_from_flags({**flags, "moe_paged_stash_buffer_size_factor_cpu": 0.0})
    setup = setup_for("qwen3-30b-a3b", "gb200-nvl72", GRAPHED, gpus=8, global_batch=512, seq_len=4096,
                      paged_stash_host_factor=1.0)
    costs = costs_of(setup)
    assert float(costs.host_bytes(0)[0]) == pytest.approx(float(costs.stash_peak(0)[0]))
    assert float(costs_of(_qwen(GRAPHED)).host_bytes(0)[0]) == 0.0


V3_STASHED = ("pp=2,vpp=5,ep=64,etp=1,recompute=mla_up_proj,precision=bf16,moments=bf16,grad_reduce=bf16,"
              "layout=Etttttt|ttttttt|(tttttt|)*7ttttttmL,dispatcher=hybridep,ep_overlap=wgrad,cuda_graphs=full_iteration")


@pytest.mark.parametrize("plan", [GRAPHED, V3_STASHED])
def test_the_stash_scan_of_one_byte_layers_scales_to_the_stash_exactly(plan):
    """The paged stash's peak is read from a scan of one-byte MoE layers times the layer's stash
    (shared by the plans of one layout); it is the same float as the scan of the stash's own bytes,
    and a stash of fractional bytes is scanned as it is."""
    from planner.cost.terms.inflight_memory import stash_only

    setup = _qwen(plan) if plan == GRAPHED else setup_for("deepseek-v3", "gb200-nvl72", plan, gpus=256,
                                                          global_batch=8192, seq_len=4096)
    costs = costs_of(setup)
    stash = costs.stash_layer()
    for r in range(setup.deg.pp):
        for s in (stash, stash + 0.5):
            direct = costs._schedule_peak(r, tuple(stash_only(c, s) for c in costs._eager_chunks(r)), offload=False,
                                          wgrad=False)
            assert costs._stash_peak(r, s).tobytes() == direct.tobytes()
        assert float(costs.stash_peak(r)[0]) > 40 * float(stash[0])


def test_pair_rise_on_one_plans_floats_is_its_rise_on_arrays():
    """The combined 1F1B's pair rise of a batch of one plan runs on Python floats: the same bits."""
    chunks = costs_of(_qwen(GRAPHED)).chunks(0)
    f, b = chunks[0], chunks[-1]
    assert isinstance(pair_rise(f, b), np.ndarray) and not f.scalar
    assert np.asarray(pair_rise(f, b)).tobytes() == np.array([pair_rise(f.at(0), b.at(0))]).tobytes()
