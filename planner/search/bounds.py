"""Bounds that leave structural keys out of the search, each a dominance proof inside planner's
own model: a key is left out only when no lever choice of it can fit, or none can be among the
K fastest, as computed by the same composition (planner.cost.compose) that fills the tables. The
oracle (``--solver exhaustive``) applies none of them; the tests compare the two on small spaces.

**Memory** (:func:`memory_floors`). On every pipeline rank the allocated peak is at least its
constant memory plus its activation peak, and the activation peak is at least each of the rank's
chunks' forward rise with nothing else held (every chunk runs a forward; the in-flight counts
before it are >= 0, and activation offload scales held chunks, never the running one), which is
at least the kept bytes of the chunk's decoder layers for one micro-batch. Each layer's kept bytes
are taken at their least over the space's recompute, precision and EP-overlap options, constant
memory (each rank's own parameters) at its least over sharding, moments, offload and grad_reduce
(:func:`constant_floors`). A key whose bound exceeds the allocation limit
fits under no lever choice. The bound grows with the micro-batch size (every activation term
scales with the micro-batch's tokens, constant memory does not change), so when a micro-batch
size exceeds the limit, every larger one does too: the search's micro-batch sizes end where memory
does.

**Step time** (:func:`time_floors`). A rank's time per micro-batch is the sum of its blocks'
compute and exposed communication, plus its exposed pipeline send/receive (>= 0); each block is
taken at its least over the row levers (recompute, precision, dispatcher, EP overlap: the other
levers do not change a block). The pipeline phase is :func:`planner.cost.pipeline.pipeline_time`
of the rank times (plus fill/drain latency >= 0 and activation-offload stalls >= 0), which does not
decrease when any rank's time grows; the data-parallel sync and the optimizer step are >= 0. So
``pipeline_time`` of the least rank times bounds every plan of the key from below. Under the
schedules the closed forms do not cover (zero bubble, DualPipe, DualPipeV: planner.cost.walked)
a rank still runs its own chunks' compute one op at a time on its compute stream, every pass of
them (all micro-batches, half with DualPipe's two directions), and the overlap there hides
communication only: each rank's least compute times its passes bounds those plans. For any other
layout of the same degrees (the per-stage refinement's), the rank times still sum to at least the
blocks' total, and ``pipeline_time`` (m * max + (sum - max) / v) is smallest for a given sum when
the ranks are balanced: that is ``any_layout``. The search costs a layout's keys only while their
bound is within the K-th best plan found so far (best first); the rest are proven out.

**Per-stage refinement** (:func:`refinement_can_win`). The per-stage model keeps the degrees and
levers and minimizes the slowest rank's time per micro-batch; with integer layers it can do no
better than spreading the layers of the most common kind alone (each at its least time, the
others ignored) over the ranks, each rank carrying its fixed embedding/head/MTP and send/receive
times, nor better than the ranks' total over the ranks, nor better than any rank's time with the
least layers the model lets each of its chunks hold (the cheaper kind wherever the layer order
lets it be: chunk c starts at layer c * least or later). When that bound is no better than the
plan's own slowest rank, and the plan fits, the solver cannot win and is not run
(tests/test_search_stages.py checks the gate against the ungated solver).
"""

from __future__ import annotations

import heapq
import math
import itertools
from collections import Counter

import numpy as np

from planner.cost.compose import least_constant_bytes
from planner.cost.pipeline import chunk_blocks, pipeline_time
from planner.cost.schedules.batch import item_counts
from planner.search.space import COL
from planner.search.tables import ROW, lever_setting
from planner.specs.schedule import Schedule

MiB = 2**20


def row_variants(space) -> list:
    """Typed levers of every combination of the levers a block's cost reads: the row levers and the
    CUDA graphs (the others at their first option)."""
    keys = ROW + tuple(k for k in ("cuda_graphs",) if k in space.levers)
    base = {**space.pinned, **{k: v[0] for k, v in space.levers.items()}}
    return [lever_setting({**base, **dict(zip(keys, v))}) for v in itertools.product(*(space.levers[k] for k in keys))]


def _layer_settings(lv) -> list[tuple]:
    """(compute recompute, communication recompute) pairs a decoder layer of ``lv`` is costed with
    (planner.cost.compose: full:N and per-stage counts recompute some layers fully, not others)."""
    setting = lv.recompute_setting()
    if lv.recompute.kind == "full" and setting is None:
        return [(None, None), ("full", "full")]
    return [(setting, setting)]


def block_names(ms) -> list[str]:
    """The blocks a rank's time sums, named as the cost model names them (planner.cost.pipeline.
    chunk_blocks): the decoder layers by their ModelShape kind, which marks local-attention layers
    '_swa' (sliding window or chunk) apart from the full-attention ones of the same spec kind; named
    by the spec's kinds, Llama 4 Scout's 36 chunked-attention layers of 48 were counted as nothing
    and its keys' floors came out at a third of their exact time minima."""
    return sorted(set(ms.layer_kinds)) + ["embedding", "head"] + (["mtp"] if ms.mtp_layers else [])


def floor_variants(space) -> list:
    """The row-lever variants whose block costs bound every variant's from below: those without
    recompute, when the space offers it. Recompute only adds work: a block's compute grows by the
    recomputed seconds Δ, its communication can only grow (a recomputed MoE forward dispatches
    again), and what overlap hides grows by at most Δ (a collective hides behind the block's own
    compute, planner.cost.comm.overlapped: exposed = comm - (1 - interference) min(comm,
    capacity)); so compute + exposed grows by at least interference x Δ >= 0. (A test compares
    these floors with the minima over every variant.)"""
    every = row_variants(space)
    # CUDA graphs only take host work away (planner.cost.rates.under_graphs), and the space lists
    # them least captured first: the last option's blocks are the least.
    graphs = space.levers.get("cuda_graphs")
    every = [lv for lv in every if not graphs or lv.cuda_graphs == graphs[-1]]
    plain = [lv for lv in every if lv.recompute.kind == "none" and lv.stage_recompute is None]
    return plain or every


def block_floors(ctx, space, variants: list | None = None) -> dict[str, np.ndarray]:
    """Per block name, the least seconds of one block per micro-batch (compute and exposed
    communication) over every row-lever variant of the space, per block key of ``ctx``: the minima
    over ``variants``, by default :func:`floor_variants` (which give the same minima)."""
    kinds = set(ctx.ms.layer_kinds)
    floors: dict[str, np.ndarray] = {}
    for lv in floor_variants(space) if variants is None else variants:
        setting = lv.recompute_setting()
        for name in block_names(ctx.ms):
            pairs = _layer_settings(lv) if name in kinds else [(None, setting)]
            for compute_rc, comm_rc in pairs:
                bc = ctx.block_cost(name, compute_rc, comm_rc, lv)
                for key, t in ((name, bc.compute + bc.exposed), (name + "/compute", bc.compute)):
                    t = np.asarray(t, dtype=float)
                    floors[key] = t if key not in floors else np.minimum(floors[key], t)
    return floors


def rank_block_counts(ctx, layout) -> tuple[list[str], np.ndarray]:
    """(block names, (pp, names) counts): the blocks each pipeline rank of ``layout`` runs."""
    names = block_names(ctx.ms)
    counts = np.zeros((layout.pp, len(names)))
    for r in range(layout.pp):
        c: Counter = Counter()
        for ch in layout.rank_stages(r):
            for name, n, _ in chunk_blocks(ctx.ms, ch.layers, ch.embedding, ch.loss, ch.mtp, 0):
                c[name] += n
        # A block the names miss would count as no time at all: a valid but loose floor, silently.
        assert set(c) <= set(names), (sorted(c), names)
        counts[r] = [c[n] for n in names]
    return names, counts


def time_floors(ctx, floors: dict, layout, rows: np.ndarray, schedule: Schedule | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """(this layout, any layout of the same degrees): lower bounds in microseconds on the step
    time of every plan of context rows ``rows`` of ``layout`` under ``schedule``."""
    walked = schedule is not None and schedule.order != "megatron"
    names, counts = rank_block_counts(ctx, layout)
    bk = ctx.keys.bk_of[rows]
    per = np.stack([floors[n + "/compute" if walked else n][bk] for n in names])  # (blocks, keys)
    T = counts @ per  # (pp, keys): each rank's least time per micro-batch
    m = ctx.keys.col["micro_batches"][rows]
    total = T.sum(axis=0)
    if walked:
        passes = np.asarray(layout.passes(m), dtype=float)
        this, anyl = passes * T.max(axis=0), passes * total / layout.pp
    else:
        this = pipeline_time(list(T), m, layout.vpp)
        anyl = pipeline_time([total / layout.pp] * layout.pp, m, layout.vpp)
    # One microsecond of slack for the tables' rounding of each term and summation order.
    return (np.maximum(np.rint(np.asarray(this) * 1e6) - 1, 0).astype(np.int64),
            np.maximum(np.rint(np.asarray(anyl) * 1e6) - 1, 0).astype(np.int64))


def kept_floors(ctx, space) -> dict[str, np.ndarray]:
    """Per decoder-layer kind, the least kept bytes of one layer for one micro-batch over the
    space's recompute, precision and EP-overlap options, per piece key of ``ctx``."""
    kinds = sorted(set(space.model.layer_kinds))
    out: dict[str, np.ndarray] = {}
    seen = set()
    for lv in row_variants(space):
        key = (lv.recompute, lv.precision, lv.ep_overlap)
        if key in seen:
            continue
        seen.add(key)
        pm = ctx.piece_memory(lv)
        rc_kinds = {lv.recompute.kind} | ({"none"} if lv.recompute.kind == "full" and lv.recompute.layers else set())
        for kind in kinds:
            for rk in rc_kinds:
                kept = np.broadcast_to(np.asarray(pm.layer(kind, rk, kind).kept, dtype=float), (len(ctx.keys.pk_first),))
                out[kind] = kept if kind not in out else np.minimum(out[kind], kept)
    return out


def chunk_layer_counts(model, layout) -> tuple[list[str], np.ndarray]:
    """(kinds, (chunks, kinds) counts): the decoder layers of each virtual stage."""
    kinds = sorted(set(model.layer_kinds))
    counts = np.array([[sum(1 for i in st.layers if model.layer_kinds[i] == k) for k in kinds]
                       for st in layout.stages], dtype=float)
    return kinds, counts


def rank_composition(model, layout) -> tuple:
    """What a rank's parameter count reads from ``layout`` (planner.cost.constant.rank_params_of):
    per rank, its layers by kind and the embedding, loss and MTP it holds. Layouts with the same
    composition have the same :func:`constant_floors`."""
    out = []
    for r in range(layout.pp):
        stages = layout.rank_stages(r)
        kinds = Counter(model.layer_kinds[i] for st in stages for i in st.layers)
        out.append((tuple(sorted(kinds.items())), sum(bool(st.embedding) for st in stages),
                    sum(bool(st.loss) for st in stages), sum(st.mtp for st in stages)))
    return tuple(out)


def constant_floors(space, layout, keys: np.ndarray) -> np.ndarray:
    """Per pipeline rank of ``layout`` and key (rows of ``keys``, the space's columns), the least
    bytes of one GPU's weights, gradients and optimizer states over the space's sharding, moments,
    offload and gradient-dtype options: (pp, keys)."""
    cols = {k: keys[:, COL[k]] for k in ("tp", "cp", "ep", "etp", "dp", "edp")}
    options = itertools.product(*(space.levers[k] for k in ("sharding", "moments", "offload", "grad_reduce")))
    return least_constant_bytes(space.model, layout, cols, options)


def memory_floors(ctx, kept: dict, model, layout, rows: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """Lower bound (MiB, rounded up like the tables) on the allocated peak of every plan of
    context rows ``rows`` of ``layout``: over the ranks, the most of a rank's least constant
    memory (``constant``, (pp, keys) bytes: :func:`constant_floors`) plus the kept bytes of its
    largest chunk."""
    kinds, counts = chunk_layer_counts(model, layout)
    pk = ctx.keys.pk_of[rows]
    per = np.stack([kept[k][pk] for k in kinds])  # (kinds, keys)
    chunk = counts @ per  # (chunks, keys)
    rank = np.stack([chunk[[st.index for st in layout.rank_stages(r)]].max(axis=0) for r in range(layout.pp)])
    held = (constant + rank).max(axis=0)
    return np.ceil(held / MiB - 1e-9).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The per-stage refinement's gate.
# ---------------------------------------------------------------------------------------------
def spread(n: int, unit: float, fixed: list[float]) -> float:
    """The least possible slowest-rank time when ``n`` identical layers of ``unit`` seconds are
    placed on ranks that already carry ``fixed`` seconds (placing each layer on the least loaded
    rank is optimal for identical items)."""
    heap = list(fixed)
    heapq.heapify(heap)
    for _ in range(n):
        heapq.heapreplace(heap, heap[0] + unit)
    return max(heap) if heap else 0.0


def slowest_rank_floor(layers: dict[str, int], unit: dict[str, float], fixed: list[float]) -> float:
    """Lower bound on the slowest rank's time per micro-batch over every layout: the most common
    layer kind spread alone, every layer at the cheapest kind's time spread, and the average."""
    kind = max(layers, key=lambda k: (layers[k], k))
    cheapest = min(unit[k] for k in layers)
    total = sum(layers[k] * unit[k] for k in layers) + sum(fixed)
    return max(spread(layers[kind], unit[kind], fixed), spread(sum(layers.values()), cheapest, fixed),
               total / max(len(fixed), 1))


def chunk_layer_bounds(L: int, chunks: int, vpp: int) -> tuple[int, int]:
    """(least, most) decoder layers of one virtual stage in the per-stage model: every stage holds
    one at least; with interleaving a rank's chunks stay within one layer of the average (the
    pipeline formula prices the bubble in average chunk times, which an empty or outsized chunk
    would make optimistic)."""
    return (max(1, L // chunks - 1), -(-L // chunks) + 1) if vpp > 1 else (1, L)


def rank_floors(pat: tuple[int, str, str], unit: dict, fixed: list[float], pp: int, vpp: int, L: int) -> list[float]:
    """Per pipeline rank, the least time per micro-batch any layout of the per-stage model gives
    it: its fixed blocks plus, on each of its chunks (r, r + pp, ...), the least layers a chunk
    holds (:func:`chunk_layer_bounds`), as many of them of the cheaper kind as can be there. The
    layers are D of the first kind, then the rest (the model's pattern): chunk c starts at layer
    c * least or later, so it holds at most max(0, D - c * least) first-kind layers."""
    D, first, rest = pat
    lo, _ = chunk_layer_bounds(L, pp * vpp, vpp)
    cheap, dear = sorted((unit[first], unit[rest]))
    out = []
    for r in range(pp):
        t = fixed[r]
        for c in range(r, pp * vpp, pp):
            a = min(lo, max(0, D - c * lo)) if unit[first] <= unit[rest] else 0
            t += a * unit[first] + (lo - a) * (dear if unit[first] <= unit[rest] else cheap)
        out.append(t)
    return out


def refinement_can_win(co, model, pp: int, stage_recompute: bool, fits: bool, pat=None, vpp: int = 1) -> bool:
    """Whether the per-stage model could beat the plan's own layout (see the module docstring):
    always when the plan does not fit (a layout that fits is the gain); else only when the
    slowest rank's floor is below the plan's slowest rank. The floor is the most of: the layer
    spread's bound (:func:`slowest_rank_floor`) and each rank's least time with the least layers
    its chunks hold (:func:`rank_floors`, with the layer pattern ``pat``)."""
    if not fits:
        return True
    kinds = Counter(model.layer_kinds)
    unit = {k: co.t_base[k] for k in kinds}  # per-stage recompute only adds time to a layer
    fixed = [co.p2p[r] + (co.t_base.get("embedding", 0.0) if r == 0 else 0.0)
             + ((co.t_base.get("head", 0.0) + co.t_base.get("mtp", 0.0) * model.mtp_layers) if r == pp - 1 else 0.0)
             for r in range(pp)]
    floor = slowest_rank_floor(dict(kinds), unit, fixed)
    if pat is not None:
        floor = max([floor] + rank_floors(pat, unit, fixed, pp, vpp, model.num_layers))
    return floor < co.slowest * (1 - 1e-9)


WALK_SLACK = {"combined-1f1b": 0.01, "zb-h1": 0.05, "zbv": 0.12, "dualpipe": 0.15, "dualpipev": 0.15}
"""How far the tables' step estimate can lie above the walked step, per walked schedule
(planner.cost.walked.walk_schedule): the best-first search (planner.search.driver._best_first)
takes ``estimate x (1 - slack)`` as a plan's lower bound of its walked time. The estimate reads the
closed forms over the ranks' mean op times (planner.cost.schedules.batch.pipeline_estimate; for
Megatron's combined 1F1B, planner.cost.pipeline's closed forms), which a walk over uneven chunks can
beat: measured by brute force over plans drawn at random from bundled spaces (2026-12-05,
tests/test_search_walked_bound.py): combined 1F1B up to 0.53 % (DeepSeek-V3 on 256 GB200s), ZB-H1
2.4 %, ZB-V 5.9 %, DualPipe 2.8 % and DualPipeV 8.6 % (Llama 3.1 8B and 70B, Qwen3-30B-A3B on
H100s); each slack is about twice that (DualPipe's as DualPipeV's). An empirical bound, not a proof:
synthetic chunks far more uneven than a layout makes (tests/test_schedules_batch.py's generators,
each chunk scaled 0.3-2x) put ZB-H1's estimate up to 8 % above its walk. Megatron's 1F1B and
interleaved without EP overlap are not walked (their closed form is the step): slack 0.
A proven bound for zero bubble and DualPipe (:func:`bubble_ratio`) is tighter than these slacks
for most plans but not for the fewest micro-batches (on 150 plans of Qwen3-30B-A3B on 16 H100s,
--target any, 2026-12-06: median 0.3 % for ZB-H1 at pp = 2, 0.01 % for two-rank DualPipe, up to
11 % for ZB-H1 at m = 8 and 33 % for DualPipeV at m = 8), and it needs each plan's send time, so
the search does not read it yet: the plans not enumerated are bounded by the space's largest."""


def walk_slack(schedule) -> float:
    """The slack of the walked schedule record ``schedule`` (None: not walked)."""
    return 0.0 if schedule is None else WALK_SLACK.get(schedule.name, max(WALK_SLACK.values()))


def walked_floor_us(estimate_us: int, slack: float) -> int:
    """A lower bound (us) of the walked step of a plan whose tables' estimate is ``estimate_us``."""
    return int(math.floor(estimate_us * (1.0 - slack)))


def plan_walk_slack(plan) -> float:
    """The slack of the schedule a typed ``Plan``'s step is walked under: its own zero-bubble or
    DualPipe record, or Megatron's combined 1F1B when EP overlap is on with pp > 1 (every vpp: a
    superset of planner.cost.walked.walk_schedule's). Without a pipeline the combined walk has no
    fill or drain to beat the estimate's: none of the sampled pp = 1 plans walked below it."""
    rec = plan.schedule_record
    if rec is not None and rec.order != "megatron":
        return walk_slack(rec)
    return WALK_SLACK["combined-1f1b"] if plan.ep_overlap and plan.pp > 1 else 0.0


def space_walk_slack(space) -> float:
    """The largest slack of any plan of ``space`` (the bound of the plans the search did not
    enumerate: their estimates are at least the last enumerated one's)."""
    slack = [walk_slack(s) for s in space.schedules if s is not None and s.order != "megatron"]
    if (any(space.levers.get("ep_overlap", ())) or space.pinned.get("ep_overlap")) and max(space.col("pp")) > 1:
        slack.append(WALK_SLACK["combined-1f1b"])
    return max(slack, default=0.0)


# ---------------------------------------------------------------------------------------------
# A proven bound of the walked step under zero bubble and DualPipe (issue 40).
# ---------------------------------------------------------------------------------------------
BUBBLE_GROUPS: dict[tuple[str, bool], tuple[tuple[tuple, float], ...]] = {
    ("zb", True): ((("op", "F"), 1.0), (("op", "I"), 1.0)),
    ("zb", False): ((("op", "F"), 1.0), (("op", "I"), 1.0)),
    ("dual", True): ((("pair",), 1.0), (("op", "B"), 1.0)),
    ("dual", False): ((("op", "F"), 1.0), (("op", "B"), 2.0)),
}
"""Per (bubble kind, pair overlap): the item kinds whose per-rank mean durations the closed-form
bubble of planner.cost.schedules.batch.pipeline_estimate reads (``_zb_bubble``: F and I;
``_dual_bubble``: the overlapped pairs and B, or F and B twice when pairs do not overlap), each
with its weight in the bound F + I, resp. FB + B (:func:`bubble_ratio`)."""


def bubble_ratio(sched: Schedule, p: int, v: int, m: int, pair_overlap: bool = True) -> float:
    """θ, proven from the item counts alone (no durations): on every plan of ``sched`` with ``p``
    ranks, ``v`` (its vpp) and ``m`` micro-batches, the bubble term of the tables' estimate is at
    most θ times its busiest rank's items, so that the walked step is at least
    ``(estimate - 2 (p - 1) p2p) / (1 + θ)`` (:func:`proven_walked_floor_us`). ``math.inf`` where
    the estimate is not of that form (Megatron's combined 1F1B, a rank without one of the kinds).

    Proof. The estimate is ``busy_max + bubble + (p - 1) 2 p2p`` (pipeline_estimate): ``busy_r =
    sum_k c_rk d_rk`` over rank r's item kinds k (c_rk items of kind k, each lasting d_rk = its
    duration plus the interference of its hidden all-to-all, >= 0) and ``bubble = factor x
    max(...)`` over means across ranks of per-rank means across kinds: zero bubble (p - 1) max(F + I
    - W, F, I) <= (p - 1)(F + I); DualPipe (stages / 2 - 1) max(FB + B - 3 W, 0) <= (stages / 2 - 1)
    (FB + B), FB the pairs' mean (or F + B when pairs do not overlap), stages p for DualPipe and 2p
    for DualPipeV. A group g of n_g kinds on rank r, the least count c_g among them, has mean
    ``(1 / n_g) sum_g d <= sum_g c d / (n_g c_g)``; the groups are disjoint kinds, so their
    weighted sum is at most ``rho_r busy_r`` with ``rho_r = max_g w_g / (n_g c_g)``, and the mean
    over ranks at most ``busy_max mean_r rho_r``: θ = factor x mean_r rho_r. The walk
    (planner.cost.schedules.batch.pipeline_step) runs each rank's items, of those same durations,
    one after another on the rank's compute stream, so its phase is at least ``busy_max``; the
    data-parallel sync and optimizer terms of the step are the estimate's. So ``walked >= busy_max
    >= (estimate - 2 (p - 1) p2p) / (1 + θ)``, the step's other terms added on both sides.
    The counts make it loose where few items of a kind run (DualPipe's lone B ops: θ = 0.5 at p =
    4, m = 16), and exact at DualPipe with two ranks, whose bubble factor is zero: there the walk
    can beat the estimate by its sends only."""
    groups = BUBBLE_GROUPS.get((sched.bubble, bool(pair_overlap) if sched.bubble == "dual" else True))
    if groups is None:
        return math.inf
    stages = p if sched.placement == "dual" else 2 * p
    factor = (p - 1) if sched.bubble == "zb" else stages / 2 - 1
    if factor <= 0:
        return 0.0
    rho = []
    for r in range(p):
        counts = item_counts(sched, p, v, m, r, bool(pair_overlap))
        worst = 0.0
        for prefix, weight in groups:
            cs = [c for k, c in counts.items() if k[:len(prefix)] == prefix]
            if not cs:
                return math.inf  # the estimate's mean over no kinds: not a bound of this form
            worst = max(worst, weight / (len(cs) * min(cs)))
        rho.append(min(worst, _pair_rho(counts)) if sched.bubble == "dual" and pair_overlap else worst)
    return factor * sum(rho) / p


def _pair_rho(counts: dict) -> float:
    """DualPipe's rho_r from its pairs alone (see :func:`bubble_ratio`; DualPipe runs few lone B ops,
    two or three a rank whatever m, so the counts alone leave θ at 0.5 for four ranks). A lone B of
    chunk c lasts at most twice a pair whose backward is chunk c's B: the lone op runs its compute
    and all-to-all pieces in one chain, so its duration plus interference is at most their sum
    (interference <= 1: dur + ι (compute + a2a - dur)); the pair runs the same pieces among its own,
    its compute on the compute stream and its all-to-all on the all-to-all stream, each one after
    another, so it lasts at least the larger of the two. So B_r <= 2 max of the pairs' durations
    <= 2 sum over pair kinds, FB_r = that sum / n_pairs, and FB_r + B_r <= (1 / n + 2) / c x
    (the rank's pairs' busy time) <= that x busy_r, c the least count of a pair kind. Infinite when a
    lone B's chunk is no pair's backward on the rank."""
    pairs = {k: c for k, c in counts.items() if k[0] == "pair"}
    lone_b = {k[2] for k in counts if k[:2] == ("op", "B")}
    if not pairs or not lone_b <= {k[3] for k in pairs if k[2] == "B"}:
        return math.inf
    return (1 / len(pairs) + 2) / min(pairs.values())


def proven_walked_floor_us(estimate_us: int, theta: float, sends_us: float = 0.0) -> int:
    """A proven lower bound (us) of the walked step of a plan whose tables' estimate is
    ``estimate_us``, given its :func:`bubble_ratio` ``theta`` and ``sends_us`` = 2 (p - 1) x one
    pipeline send (what the estimate adds for the sends, which a walk may not wait for)."""
    if not math.isfinite(theta):
        return 0
    return max(int(math.floor((estimate_us - sends_us) / (1.0 + theta))), 0)
