"""Pipeline schedules (planner.cost.schedules): op orders, and the time walk against the closed
forms of the papers and READMEs and against planner's pipeline_time."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.pipeline import pipeline_time
from planner.cost.schedule import Op, rank_ops, warmup_count
from planner.cost.schedules import SCHEDULES, StepTimes, placement, rank_items, walk
from planner.cost.schedules.ops import Pair, ops_of
from planner.cost.schedules.timing import LayerTimes, compute_chunk, moe_chunk
from planner.cost.schedules.walk import item_seconds
from planner.specs.schedule import schedule_named as named

V_SHAPED = ("zbv", "dualpipe", "dualpipev")


def grid(name: str):
    """Small (p, v, m) each schedule accepts."""
    out = []
    for p in (1, 2, 3, 4, 6):
        for m in (1, 2, 3, 4, 5, 8, 12):
            for v in ((2,) if name in V_SHAPED else (1, 2, 3)):
                if name == "1f1b" and v > 1 or name == "interleaved" and v == 1:
                    continue
                if name == "combined-1f1b" and p > 1 and v == 1:
                    continue
                if name in ("dualpipe", "dualpipev") and m < 2 * p or name == "dualpipe" and (p % 2 or m % 2):
                    continue
                if name == "zb-h1" and m % max(1, m // p):
                    continue
                out.append((p, v, m))
    return out


def uniform(name: str, p: int, v: int, layers, **kw) -> StepTimes:
    return StepTimes.uniform(p, named(name).chunks(v), layers, **kw)


# ---- orders ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (4, 2, 8), (3, 3, 7), (8, 2, 13), (1, 1, 4)])
def test_megatron_orders_are_todays(p, v, m):
    name = "1f1b" if v == 1 else "interleaved"
    for r in range(p):
        assert rank_items(named(name), p, v, m, r) == rank_ops(p, v, m, r)


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
def test_every_chunk_runs_forward_then_its_backward_once(name):
    """Each (chunk, micro-batch): one F, then one B or one I followed by one W; no other op."""
    for p, v, m in grid(name):
        place = placement(named(name), p, v, m)
        for r in range(p):
            seen: dict[tuple, list[str]] = {}
            for op in (o for item in rank_items(named(name), p, v, m, r) for o in ops_of(item)):
                seen.setdefault((op.chunk, op.microbatch), []).append(op.kind)
            assert all(k in (["F", "B"], ["F", "I", "W"]) for k in seen.values()), (name, p, v, m, r)
            for c, (route, _) in enumerate(place.stages_held(r)):
                assert sum(1 for (ch, _) in seen if ch == c) == place.microbatches[route]


def test_combined_1f1b_runs_one_more_warmup_forward_and_pairs():
    """Megatron's get_pp_rank_microbatches adds one warm-up micro-batch with EP overlap, and the
    steady state runs forward+backward pairs."""
    p, v, m = 4, 2, 8
    for r in range(p):
        items = rank_items(named("combined-1f1b"), p, v, m, r)
        w = warmup_count(p, v, m, r) + 1
        assert all(isinstance(i, Op) and i.kind == "F" for i in items[:w])
        assert all(isinstance(i, Pair) for i in items[w:m * v])
        assert all(isinstance(i, Op) and i.kind == "B" for i in items[m * v:])
    with pytest.raises(ValueError, match="virtual pipeline"):
        rank_items(named("combined-1f1b"), 4, 1, 8, 0)


@pytest.mark.parametrize("name,p,v,m", [("dualpipe", 3, 2, 12), ("dualpipe", 4, 2, 6), ("dualpipe", 4, 2, 9),
                                        ("dualpipev", 4, 2, 7), ("zb-h1", 2, 2, 5)])
def test_schedule_preconditions(name, p, v, m):
    """DualPipe.step asserts an even PP, an even micro-batch count and m >= 2 PP; DualPipeV m >= 2 PP;
    torch's zero-bubble schedule wants m a multiple of its rounds (max(1, m // p))."""
    with pytest.raises(ValueError):
        rank_items(named(name), p, v, m, 0)


# ---- the time walk against the closed forms (uniform stages) --------------------------------------
@pytest.mark.parametrize("p,m,f,b", [(4, 8, 1.0, 2.0), (8, 16, 1.0, 2.0), (4, 4, 0.7, 1.1), (2, 3, 1.0, 1.0),
                                     (5, 9, 0.3, 0.8)])
def test_1f1b_bubble_is_p_minus_1_times_f_plus_b(p, m, f, b):
    """Narayanan et al. 2021 sec. 2.2: every rank idles (p-1)(F+B); the step is (m+p-1)(F+B)."""
    res = walk(named("1f1b"), p, 1, m, uniform("1f1b", p, 1, compute_chunk(f, b)))
    assert res.step == pytest.approx((m + p - 1) * (f + b))
    assert res.bubble == pytest.approx([(p - 1) * (f + b)] * p)


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 3, 12), (2, 4, 8), (8, 2, 16), (4, 2, 4)])
def test_interleaved_bubble_is_divided_by_v(p, v, m):
    """Narayanan et al. 2021 sec. 2.2: chunks of 1/v the stage, bubble (p-1)(F+B)/v (m a multiple
    of p, Megatron's groups of p micro-batches)."""
    f, b = 1.0, 2.0
    res = walk(named("interleaved"), p, v, m, uniform("interleaved", p, v, compute_chunk(f / v, b / v)))
    assert res.bubble == pytest.approx([(p - 1) * (f + b) / v] * p)
    assert res.step == pytest.approx(pipeline_time([f + b] * p, m, v))


def test_interleaved_needs_whole_groups_of_p_micro_batches():
    """Megatron-Core refuses an interleaved step whose last group of micro-batches is shorter than
    PP (forward_backward_pipelining_with_interleaving raises, the default group being PP). Walked,
    such orders bubble more than the closed form (p=4, v=2, m=6: 27.5 against m(F+B) +
    (p-1)(F+B)/v = 22.5) or deadlock outright (p=16, v=2, m=120)."""
    res = walk(named("interleaved"), 4, 2, 6, uniform("interleaved", 4, 2, compute_chunk(0.5, 1.0)))
    assert res.step == pytest.approx(27.5)
    assert pipeline_time([3.0] * 4, 6, 2) == pytest.approx(22.5)
    with pytest.raises(ValueError, match="deadlocks"):
        walk(named("interleaved"), 16, 2, 120, uniform("interleaved", 16, 2, compute_chunk(0.5, 1.0)))


@pytest.mark.parametrize("p,m,f,i,w", [(4, 8, 1.0, 1.0, 1.0), (4, 8, 1.0, 1.5, 0.8), (8, 16, 1.0, 1.2, 0.5),
                                       (4, 12, 1.2, 1.0, 1.0), (6, 12, 1.0, 2.0, 0.3)])
def test_zb_h1_bubble(p, m, f, i, w):
    """Qi et al. 2023 sec. 2.1 / DualPipe README: ZB-H1 idles (p-1)(F+B-2W) with B = I + W the full
    backward, where the delayed W passes fit in the 1F1B bubbles (W <= min(F, I))."""
    res = walk(named("zb-h1"), p, 1, m, uniform("zb-h1", p, 1, compute_chunk(f, i, w)))
    assert res.bubble == pytest.approx([(p - 1) * (f + (i + w) - 2 * w)] * p)


@pytest.mark.parametrize("f,i,w", [(1.0, 1.0, 1.2), (2.0, 1.0, 1.5), (1.0, 2.0, 2.5), (0.8, 1.0, 1.0)])
def test_zb_h1_bubble_without_room_for_w(f, i, w):
    """Where W is longer than F or I, the walk finds the bubble the fill and drain of F and I
    leave: (p-1) max(F + I - W, F, I)."""
    p, m = 4, 8
    res = walk(named("zb-h1"), p, 1, m, uniform("zb-h1", p, 1, compute_chunk(f, i, w)))
    assert res.bubble == pytest.approx([(p - 1) * max(f + i - w, f, i)] * p)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 16)])
def test_zbv_has_no_bubble_inside_its_parallelogram(p, m):
    """Qi et al. 2023 sec. 6: with T_F = T_B = T_W, ZB-V is zero-bubble: rank r starts at r*F and
    then never idles; what remains is the parallelogram's (p-1)F per rank within one step (which
    only the paper's optimizer post-validation would overlap with the next step)."""
    t = 1.0
    res = walk(named("zbv"), p, 2, m, uniform("zbv", p, 2, compute_chunk(t, t, t)))
    assert res.bubble == pytest.approx([(p - 1) * t] * p)
    for r in range(p):
        spans = sorted((res.start[k], res.finish[k]) for k in range(len(res.start))
                       if res.tasks.rank[k] == r and res.tasks.dur[k] > 0)
        assert spans[0][0] == pytest.approx(r * t)
        assert spans[-1][1] - spans[0][0] == pytest.approx(6 * m * t)  # busy from first to last op


def _readme_bubble(pp_stages: int, fb: float, b: float, w: float) -> float:
    """DualPipe README table: (PP/2 - 1)(F&B + B - 3W), PP the number of pipeline stages."""
    return (pp_stages / 2 - 1) * (fb + b - 3 * w)


@pytest.mark.parametrize("name,p,m", [("dualpipe", 4, 8), ("dualpipe", 8, 20), ("dualpipe", 6, 24),
                                      ("dualpipev", 4, 8), ("dualpipev", 8, 20), ("dualpipev", 3, 12)])
@pytest.mark.parametrize("f,w", [(1.0, 1.0), (1.0, 0.8), (1.0, 0.5), (2.0, 1.0)])
def test_dualpipe_bubble_matches_the_readme(name, p, m, f, w):
    """The README's figure has F = I (a forward and an input-gradient chunk alike) and W <= F; there
    the walk of DualPipe's own order, with its commit-and-wait sends, idles exactly (PP/2-1)(F&B +
    B - 3W) on every rank (F&B = F + B without all-to-all to hide). DualPipeV: PP = 2p stages."""
    i = f
    res = walk(named(name), p, 2, m, uniform(name, p, 2, compute_chunk(f, i, w)))
    stages = p if name == "dualpipe" else 2 * p
    assert res.bubble == pytest.approx([_readme_bubble(stages, f + i + w, i + w, w)] * p)


@pytest.mark.parametrize("name,p,m", [("dualpipe", 8, 32), ("dualpipev", 4, 16)])
def test_dualpipe_bubble_with_hidden_all_to_all_is_near_the_readme(name, p, m):
    """With EP all-to-all hidden inside the overlapped pairs (F&B < F + B) and exposed in the lone
    ops (each item issued after the one before it), the README's closed form (F, B, W the lone
    items' times) holds on the middle ranks and lies within 10 % above the bubble of the outer
    ones (their lone ops wait less on their neighbours)."""
    ch = moe_chunk(2, (0.5, 0.5, 0.25), (0.5, 0.5, 0.25), 0.1)
    chunks = (ch, ch)
    f_b = item_seconds(Pair(Op("F", 0, 0), Op("B", 1, 0)), chunks)
    full, w = item_seconds(Op("B", 0, 0), chunks), item_seconds(Op("W", 0, 0), chunks)
    assert f_b < item_seconds(Op("F", 0, 0), chunks) + full  # the pair hides its all-to-all
    res = walk(named(name), p, 2, m, uniform(name, p, 2, ch))
    stages = p if name == "dualpipe" else 2 * p
    closed = _readme_bubble(stages, f_b, full, w)
    assert all(0.9 * closed <= b <= closed * (1 + 1e-12) for b in res.bubble)
    assert res.bubble[p // 2] == pytest.approx(closed)


# ---- the closed form planner uses, with uneven stages ------------------------------------------------
@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (6, 1, 12), (4, 2, 8), (4, 3, 12), (3, 2, 9)])
def test_pipeline_time_equals_the_walk_when_the_slowest_stage_is_last(p, v, m):
    """pipeline_time's sum + (m-1) max (1F1B) and m max + (sum - max)/v (interleaved) are the
    walked critical path when stage times rise towards the last rank (backward a fixed share of
    each rank's time, m a multiple of p)."""
    rng = random.Random(p * 100 + v * 10 + m)
    ts = sorted(rng.uniform(0.5, 1.5) for _ in range(p))
    name = "1f1b" if v == 1 else "interleaved"
    res = walk(named(name), p, v, m, StepTimes.per_rank([t / 3 / v for t in ts], [2 * t / 3 / v for t in ts], chunks=v))
    assert res.step == pytest.approx(pipeline_time(ts, m, v))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.2, 3.0), min_size=2, max_size=5), st.floats(0.2, 0.8), st.integers(1, 12))
def test_pipeline_time_bounds_1f1b_from_above(ts, share, m):
    """Elsewhere the 1F1B closed form is an upper bound (the fill and drain of the stages after a
    slow one overlap its steady state), for any backward share alike on every rank."""
    p = len(ts)
    res = walk(named("1f1b"), p, 1, m, StepTimes.per_rank([t * share for t in ts], [t * (1 - share) for t in ts]))
    assert res.step <= pipeline_time(ts, m, 1) * (1 + 1e-9)


def test_pipeline_time_overestimates_a_slow_first_stage():
    """Stages [1.5, 0.75, 0.75, 0.75] (B = 2F), m = 8: the walk takes 12.75, the closed form
    sum + (m-1) max says 14.25 (+11.8 %)."""
    ts = [1.5, 0.75, 0.75, 0.75]
    res = walk(named("1f1b"), 4, 1, 8, StepTimes.per_rank([t / 3 for t in ts], [2 * t / 3 for t in ts]))
    assert (res.step, pipeline_time(ts, 8, 1)) == pytest.approx((12.75, 14.25))


def test_pipeline_time_is_an_approximation_for_uneven_interleaving():
    """With uneven stages (backward shares differing by rank) the interleaved closed form errs both
    ways against Megatron's order under the walk: here 3.7 % low and 7.0 % high."""
    cases = [([0.1, 0.5, 0.3, 0.2], [0.5, 0.2, 0.6, 0.4], 1.0368), ([0.5, 0.2, 0.1, 0.3], [0.5, 0.2, 0.3, 0.1], 0.9302)]
    for fs, bs, ratio in cases:
        res = walk(named("interleaved"), 4, 2, 8, StepTimes.per_rank([f / 2 for f in fs], [b / 2 for b in bs], chunks=2))
        assert res.step / pipeline_time([f + b for f, b in zip(fs, bs)], 8, 2) == pytest.approx(ratio, abs=5e-4)


# ---- communication ---------------------------------------------------------------------------------
@pytest.mark.parametrize("overlap", [True, False])
def test_one_micro_batch_pays_every_send(overlap):
    """One micro-batch down the pipeline and back: p (F + B) + 2 (p-1) t_p2p, whether sends run on
    their own stream or block the sender."""
    p, f, b, t = 4, 1.0, 2.0, 0.25
    res = walk(named("1f1b"), p, 1, 1, uniform("1f1b", p, 1, compute_chunk(f, b), p2p=t, p2p_overlap=overlap))
    assert res.step == pytest.approx(p * (f + b) + 2 * (p - 1) * t)


def test_combined_1f1b_without_pipelining():
    """PP = 1 (combined_1f1b_schedule_for_no_pipelining): the first forward and the last backward
    alone, every other step a forward+backward pair, exactly F + (m-1) F&B + B. The pair hides all
    eight all-to-alls of its two micro-batches (two MoE layers, dispatch and combine each way); the
    lone forward and the lone backward expose their four each: ModelChunkSchedulePlan.run records
    the compute stream's event before the backward's first layer, and its first combine-gradient
    (on the communication stream) waits on it, so it cannot start under the last pair."""
    a2a = 0.3
    ch = moe_chunk(2, (1.0, 1.0, 0.5), (1.0, 1.0, 0.5), a2a)
    chunks = (ch,)
    f, b = item_seconds(Op("F", 0, 0), chunks), item_seconds(Op("B", 0, 0), chunks)
    f_b = item_seconds(Pair(Op("F", 0, 1), Op("B", 0, 0)), chunks)
    assert f_b == pytest.approx(f + b - 8 * a2a)
    m = 6
    res = walk(named("combined-1f1b"), 1, 1, m, StepTimes.uniform(1, 1, ch))
    assert res.step == pytest.approx(f + (m - 1) * f_b + b)
    r0 = res.ranks[0]
    assert r0.exposed["a2a"] == pytest.approx(8 * a2a)
    assert r0.hidden["a2a"] == pytest.approx((m - 1) * 8 * a2a)


def test_delay_wgrad_never_slows_a_pair_and_can_hide_the_dispatch():
    """--delay-wgrad-compute lets the backward dispatch start after the experts' input gradient:
    never slower, and faster when the dispatch outlasts the experts' forward."""
    rng = random.Random(7)
    gains = []
    for _ in range(200):
        lt = LayerTimes(*(rng.uniform(0.0, 2.0) for _ in range(10)))
        chunks = ((lt, lt), (lt, lt))
        pair = Pair(Op("F", 0, 0), Op("B", 1, 0))
        plain = item_seconds(pair, chunks, StepTimes((chunks,), delay_wgrad=False))
        delayed = item_seconds(pair, chunks, StepTimes((chunks,), delay_wgrad=True))
        assert delayed <= plain + 1e-12
        gains.append(plain - delayed)
    assert max(gains) > 1.0


def test_pairs_run_back_to_back_without_overlap():
    """torch's eager runtime runs OVERLAP_F_B's forward, then its backward."""
    ch = moe_chunk(1, (1.0, 1.0, 0.5), (1.0, 1.0, 0.5), 0.3)
    chunks = (ch, ch)
    seq = StepTimes((chunks,), pair_overlap=False)
    pair = Pair(Op("F", 0, 0), Op("B", 1, 0))
    assert item_seconds(pair, chunks, seq) == pytest.approx(item_seconds(Op("F", 0, 0), chunks)
                                                             + item_seconds(Op("B", 1, 0), chunks))


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
def test_each_rank_step_is_compute_plus_exposed_communication_plus_bubble(name):
    p, v, m = (4, 2, 8) if name != "1f1b" else (4, 1, 8)
    res = walk(named(name), p, v, m, uniform(name, p, v, moe_chunk(2, (0.3, 0.4, 0.2), (0.5, 0.6, 0.3), 0.15), p2p=0.05))
    for r in res.ranks:
        assert r.compute + r.exposed_total + r.bubble == pytest.approx(res.step)
        assert 0 <= r.exposed_total <= sum(r.comm.values()) + 1e-12
        assert r.bubble >= -1e-9
