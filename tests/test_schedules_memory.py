"""Pipeline schedules (planner.cost.schedules): micro-batch chunks in flight per rank against the
papers' and READMEs' figures and against a brute-force count read off the time walk's task
intervals; the profiles planner's memory model reads (peak_over_profiles) against a brute-force
peak; DualPipe's two parameter copies."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.pieces import peak_over_profiles
from planner.cost.schedule import Op, inflight_profiles, warmup_count
from planner.cost.schedules import SCHEDULES, placement, rank_items, walk
from planner.cost.schedules import inflight
from planner.cost.schedules.ops import Pair
from planner.cost.schedules.timing import compute_chunk, moe_chunk
from planner.specs.schedule import schedule_named as named

from tests.test_schedules_time import grid, uniform


# ---- memory: in-flight chunks ----------------------------------------------------------------------
@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (4, 2, 8), (3, 3, 7), (8, 2, 13), (1, 1, 4)])
def test_megatron_profiles_are_todays(p, v, m):
    name = "1f1b" if v == 1 else "interleaved"
    for r in range(p):
        assert inflight.profiles(named(name), p, v, m, r) == inflight_profiles(p, v, m, r)


def _walked_rows(name, p, v, m, r):
    """Brute force: (op, held vector before it) by walking the rank's ops one by one."""
    from planner.cost.schedules.ops import ops_of

    n = named(name).chunks(v)
    held = [0] * inflight.width(named(name), v)
    out = []
    for op in (op for item in rank_items(named(name), p, v, m, r) for op in ops_of(item)):
        out.append((op, tuple(held)))
        k, c = op.kind, op.chunk
        if k in "FB":
            held[c] += 1 if k == "F" else -1
        elif k == "I":
            held[c], held[n + c] = held[c] - 1, held[n + c] + 1
        else:
            held[n + c] -= 1
    return out


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
def test_held_matrix_is_the_walk_of_the_ops(name):
    """The NumPy running sums (Megatron's orders in closed form) equal walking every op: kinds,
    chunks and held vectors, row by row; and the distinct vectors before each forward and
    backward equal the sets of the walk."""
    for p, v, m in [(1, 1, 3), (2, 1, 4), (2, 2, 5), (3, 3, 7), (4, 2, 8), (4, 4, 9), (8, 2, 16), (2, 31, 70)]:
        for r in range(p):
            try:
                walked = _walked_rows(name, p, v, m, r)
            except ValueError:
                with pytest.raises(ValueError):
                    inflight.held_matrix(named(name), p, v, m, r)
                continue
            kinds, chunks, held = inflight.held_matrix(named(name), p, v, m, r)
            assert [inflight.KINDS[k] for k in kinds] == [op.kind for op, _ in walked]
            assert chunks.tolist() == [op.chunk for op, _ in walked]
            assert [tuple(row) for row in held.tolist()] == [vec for _, vec in walked]
            # the ops with their micro-batches (Megatron's in closed form), from any op on
            assert inflight.held_before(named(name), p, v, m, r) == tuple(walked)
            assert list(inflight.held_from(named(name), p, v, m, r, len(walked) // 3)) == walked[len(walked) // 3:]
            n = named(name).chunks(v)
            sets = ([set() for _ in range(n)], [set() for _ in range(n)])
            for op, vec in walked:
                if op.kind != "W":
                    sets[op.kind != "F"][op.chunk].add(vec)
            assert inflight.profiles(named(name), p, v, m, r) == tuple(tuple(tuple(sorted(s)) for s in side) for side in sets)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_inflight_counts_per_rank_match_the_papers(p):
    m = 3 * p
    mx = lambda name, v, r, with_w=True: inflight.max_inflight(named(name), p, v, m, r, with_w)  # noqa: E731
    for r in range(p):
        assert mx("1f1b", 1, r) == p - r  # Narayanan 2021: rank r holds p - r micro-batches
        assert mx("interleaved", 2, r) == warmup_count(p, 2, m, r) + 1
        assert mx("combined-1f1b", 2, r) == warmup_count(p, 2, m, r) + 2  # one more warm-up forward
        assert mx("zb-h1", 1, r) == p  # ZB-H1: every stage p in flight (F to W) ...
        assert mx("zb-h1", 1, r, with_w=False) == p - r  # ... of which 1F1B's p - r with activations
        assert mx("zbv", 2, r) == 2 * p  # ZB-V: 2p half-stage chunks, 1F1B's peak, on every rank
        assert mx("dualpipev", 2, r) == 2 * p + 1  # DualPipe README: PP + 1, PP = 2p stages
        if p % 2 == 0:
            assert mx("dualpipe", 2, r) == p + 1  # DualPipe README: PP + 1 on every rank


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
def test_inflight_counts_equal_a_brute_force_count_over_the_walk(name):
    """The order-based count equals the count of chunks whose forward has started and whose
    backward (or weight gradient) has not finished, read off the walk's task times."""
    for layers in (compute_chunk(1.0, 1.3, 0.6), moe_chunk(2, (1.0, 1.0, 0.5), (1.0, 1.0, 0.5), 0.4)):
        for p, v, m in [g for g in grid(name) if g[0] in (2, 4) and g[2] >= 4][:6]:
            res = walk(named(name), p, v, m, uniform(name, p, v, layers, p2p=0.1))
            for r in range(p):
                for with_w in (True, False):
                    timeline = inflight.inflight_over_time(res, r, with_w)
                    assert max(h for _, h in timeline) == inflight.max_inflight(named(name), p, v, m, r, with_w)


def test_dualpipe_keeps_two_parameter_copies():
    """DualPipe: rank r holds stage r of one direction and stage p-1-r of the other, so each
    stage lives on two ranks (2x the parameters of 1F1B's rank); DualPipeV and ZB-V hold each of
    their 2p stages once (1x with p ranks, the README's 2x per device counting PP = 2p stages)."""
    p = 8
    dual = placement(named("dualpipe"), p, 2, 16)
    held = [pos for r in range(p) for _, pos in dual.stages_held(r)]
    assert sorted(held) == sorted(list(range(p)) * 2)
    assert all({pos for _, pos in dual.stages_held(r)} == {r, p - 1 - r} for r in range(p))
    assert named("dualpipe").parameter_copies == 2
    for name in ("dualpipev", "zbv"):
        vee = placement(named(name), p, 2, 16)
        assert sorted(pos for r in range(p) for _, pos in vee.stages_held(r)) == list(range(2 * p))
        assert named(name).parameter_copies == 1


@pytest.mark.parametrize("name", [s.name for s in SCHEDULES])
def test_profiles_give_peak_over_profiles_the_brute_force_peak(name):
    """peak_over_profiles over a schedule's profiles equals the maximum, over every op, of held
    bytes before it plus the op's rise (W ops rise nothing), with what W holds in rows v.. ."""
    rng = np.random.default_rng(3)
    for p, v, m in [g for g in grid(name) if g[0] in (2, 4)][-4:]:
        n = named(name).chunks(v)
        width = inflight.width(named(name), v)
        kept = rng.uniform(1, 5, (width, 3))
        # Physical rises: a forward ends holding its chunk (rise >= kept), an input-gradient pass
        # ends holding what its weight gradient needs (rise >= kept_W - kept).
        fwd = kept[:n] + rng.uniform(0, 4, (n, 3))
        bwd = rng.uniform(0, 4, (n, 3)) + (np.maximum(0.0, kept[n:] - kept[:n]) if width > n else 0.0)
        for r in range(p):
            got = peak_over_profiles(kept, fwd, bwd, p, v, m, r, False, schedule=named(name))
            want = np.zeros(3)
            for op, vec in inflight.held_before(named(name), p, v, m, r):
                rise = fwd[op.chunk] if op.kind == "F" else bwd[op.chunk] if op.kind in ("I", "B") else 0.0
                want = np.maximum(want, np.array(vec) @ kept + rise)
            assert got == pytest.approx(want, rel=1e-6)


def test_megatron_profiles_unchanged_through_the_schedule_argument():
    kept, fwd, bwd = np.ones((2, 2)), np.full((2, 2), 0.5), np.full((2, 2), 0.25)
    for r in range(4):
        a = peak_over_profiles(kept, fwd, bwd, 4, 2, 8, r, False)
        b = peak_over_profiles(kept, fwd, bwd, 4, 2, 8, r, False, schedule=named("interleaved"))
        assert np.array_equal(a, b)


def test_dualpipe_peak_moment():
    """With equal bytes per chunk, DualPipe's first rank first reaches PP + 1 chunks in the first
    overlapped pair of its main step (step 4): p - 1 forward-direction micro-batches and one
    reverse-direction one held, the pair's forward counted before its backward frees (the
    README's PP + 1; a pair interleaved layer by layer stays below it)."""
    p, m = 8, 20
    i, op, total = inflight.peak_moment(named("dualpipe"), p, 2, m, 0, [1.0] * 4)
    assert total == p + 1 and op == Op("F", 0, p - 1)
    first_pair = next(it for it in rank_items(named("dualpipe"), p, 2, m, 0) if isinstance(it, Pair))
    assert first_pair.fwd == op and inflight.held_before(named("dualpipe"), p, 2, m, 0)[i][1] == (p - 1, 1, 0, 0)


def test_distinct_rows_survive_hash_collisions(monkeypatch):
    """distinct_first hashes rows and checks rows that share a hash: with weights that make
    every row collide (all zero), it falls back to the rows' bytes and still finds each distinct
    row once, at its first occurrence."""
    import planner.cost.schedule as sched

    rows = np.array([[1, 0, 2], [0, 1, 2], [1, 0, 2], [2, 2, 0], [0, 1, 2]], dtype=np.int32)
    expected = [0, 1, 3]
    assert sorted(sched.distinct_first(rows).tolist()) == expected
    monkeypatch.setattr(sched, "_hash_weights", lambda width: np.zeros(width, dtype=np.int64))
    assert sorted(sched.distinct_first(rows).tolist()) == expected


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
def test_chunk_order_array_is_megatrons_loop(group):
    """The closed-form op order reads the array form of Megatron's forward order: the same
    (micro-batch, chunk) pairs in the same order as the loop over groups, chunks and micro-batches,
    whole last groups and partial ones alike."""
    from planner.cost.schedule import chunk_order, chunk_order_array

    for m in range(0, 3 * group + 2):
        for v in (1, 2, 3, 5):
            loop = np.array(chunk_order(m, v, group), dtype=np.int64).reshape(-1, 2)
            np.testing.assert_array_equal(chunk_order_array(m, v, group), loop)
