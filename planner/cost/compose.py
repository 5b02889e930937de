"""The one composition of a plan's memory and time.

Every caller goes through :func:`evaluate_batch`: ``explain`` and the reports evaluate a batch of
one plan, the search's tables evaluate the plans of one pipeline layout (every structural key with
that ``(pp, vpp, layout)``) once per lever combination, and the per-stage refinement reads its
per-layer coefficients from the same :class:`Costs`. The formulas themselves live in their
modules (kernel inventory ``flops``, kernel times ``compute``, collectives ``comm``, schedule and
data-parallel terms ``pipeline``, saved tensors ``activations``, constant memory ``constant``,
per-piece memory and the peak over the schedule ``memory``); this module composes them once.

Terms are evaluated lazily and memoized in the :class:`CostContext` under the lever values each
term depends on, so evaluating the same layout group under many lever combinations recomputes only
what a lever changes (the search's tables ask for one term per lever group: the pipeline phase
under (recompute, precision, dispatcher, EP overlap, offload), the data-parallel sync under
sharding and the levers of the rank times, and so on). Block costs (a decoder layer, the
embedding, the head, an MTP module) depend on the degrees only through a few values (tp, cp, ep,
etp, mbs and the group spans): they are computed once per lever setting over the distinct block
keys of every registered plan, then gathered.

:class:`Costs` is composed of parts, one module each in planner.cost.terms: ``base`` (the memo,
the variants' row levers, the keys' degrees, spans and parameters, which plans a walked schedule
covers), ``blocks`` (each rank's blocks and per-micro-batch time), ``static_memory`` (weights,
gradients, optimizer states, communication buffers, optimizer temporaries), ``inflight_memory``
(activations over the schedule, CUDA-graph pools, activations waiting in host memory),
``peak_memory`` (allocated, reserved and host peaks), ``pipeline_time`` (the forward/backward
phase: closed forms, the walk, activation offload), ``step_time`` (data-parallel sync, optimizer
step, seconds per step). They are mixins, each naming as its bases the
parts it reads, not objects ``Costs`` delegates to: terms read each other across parts (the
activation peak reads the split backward's bytes of the rank times, the activation offload the
chunks' memory) and every caller reads them from one ``Costs``, so delegation would forward every
method or change every caller; as mixins each method moved unchanged.

Degrees inside a batch are numpy arrays over its plans; every formula accepts arrays, and the
categorical levers (:class:`Levers`) are single typed values, so every branch of the model is taken
as in a one-plan evaluation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.cost.arrays import Num
from planner.cost.comm import CommCost, CommFlags, block_comm, comm_causes, ep_dispatch_combine, fp8_dispatch
from planner.cost.compute import BlockTime, block_time_of, kernel_sums, kernel_times, with_stage_host
from planner.cost.constant import RankParams, constant_bytes, rank_params_of
from planner.cost.flops import Shard, model_shape
from planner.cost.pieces import PieceMemory
from planner.cost.pipeline import BlockCost
from planner.cost.phases import block_layer, wgrad_bytes
from planner.cost.rates import Rates, combined_stage_host_s, rates_for, under_graphs
from planner.cost.schedules.timing import LayerTimes
from planner.cost.setup import allocator_fraction, allocator_workload
from planner.cost.terms.base import at, memory_schedule
from planner.cost.terms.blocks import PrecisionFlags, _LeverView
from planner.cost.terms.peak_memory import PeakMemory
from planner.cost.terms.pipeline_time import ActOffload
from planner.cost.terms.step_time import DataParallel, OptimizerStep, StepTime
from planner.cost.topology import GroupSpan, group_spans, resolve_domain_fill
from planner.specs.efficiency import load_efficiency
from planner.specs.layout import PipelineLayout, build_layout
from planner.specs.plan import CudaGraphs, Degrees, EpOverlap, Plan, Recompute, Sharding
from planner.specs.schedule import Schedule, default_schedule

# ---------------------------------------------------------------------------------------------
# Typed levers.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Levers(PrecisionFlags):
    """The plan's memory and time levers, parsed once (a plan's string values become these)."""

    recompute: Recompute
    precision: str
    """'bf16', 'fp8' (the hardware's FP8 recipe) or 'nvfp4'."""
    moments: str
    """Adam moment dtype: 'fp32' or 'bf16'."""
    sharding: Sharding
    offload_optimizer: bool
    offload_activations: bool
    dispatcher: str | None
    """MoE token dispatcher; None without expert parallelism."""
    ep_overlap: EpOverlap
    """EP overlap (truthy when on)."""
    stage_recompute: tuple[int, ...] | None = None
    """Per-rank fully recomputed layer counts (advisory plans of ``--target any``)."""
    grad_reduce: str = "fp32"
    """Main-gradient buffer and gradient-reduction dtype: 'fp32' or 'bf16' (--grad-reduce-in-bf16)."""
    param_gather: str = "bf16"
    """Parameter all-gather dtype: 'bf16', 'fp8' (--fp8-param-gather) or 'fp4' (--fp4-param-gather)."""
    cuda_graphs: CudaGraphs = CudaGraphs()
    """CUDA graphs (planner.specs.plan.CudaGraphs): the host work of captured kernels and the
    graphs' static buffers."""

    @classmethod
    def of(cls, plan: Plan) -> Levers:
        """The levers of a canonical plan (precision and dispatcher explicit)."""
        return cls(plan.recompute, plan.precision or "bf16", plan.moments, plan.sharding, plan.offload.optimizer,
                   plan.offload.activations, plan.dispatcher, plan.ep_overlap, plan.stage_recompute,
                   plan.grad_reduce, plan.param_gather, plan.cuda_graphs)

    @property
    def grad_bytes(self) -> float:
        """Bytes per parameter of the main gradient (and of its data-parallel reduction)."""
        return 2.0 if self.grad_reduce == "bf16" else 4.0


    @property
    def delay_wgrad(self) -> bool:
        """Megatron's --delay-wgrad-compute (ep_overlap=wgrad)."""
        return self.ep_overlap == "wgrad"

    def recompute_setting(self) -> str | tuple[str, ...] | None:
        """What every decoder layer's compute recomputes: 'full', the selective modules, 'op'
        (torchtitan's per-op policy), or None (with full:N or per-stage counts only some layers
        recompute: see :meth:`full_layers`)."""
        rc = self.recompute
        if rc.kind == "selective":
            return tuple(rc.modules)
        if rc.kind == "op":
            return "op"
        if rc.kind == "full" and rc.layers is None and self.stage_recompute is None:
            return "full"
        return None

    def full_layers(self, rank: int, chunks) -> tuple[int, ...]:
        """Fully recomputed layers in each chunk of ``rank``: the first N layers of every chunk
        (Megatron's block method; with VPP, N per virtual stage), N from full:N or the per-stage
        counts; 0 when every layer (or none) recomputes by :meth:`recompute_setting`."""
        rc = self.recompute
        if rc.kind != "full":
            return tuple(0 for _ in chunks)
        if self.stage_recompute is not None:
            n = self.stage_recompute[rank] if rank < len(self.stage_recompute) else 0
        elif rc.layers is not None:
            n = rc.layers
        else:
            return tuple(0 for _ in chunks)
        return tuple(min(n, ch.num_layers) for ch in chunks)

    def memory_full_layers(self, rank: int) -> int | None:
        """The memory model's view of the same: recomputed layers per chunk, None meaning all."""
        rc = self.recompute
        if rc.kind != "full":
            return None
        if self.stage_recompute is not None:
            return self.stage_recompute[rank] if rank < len(self.stage_recompute) else 0
        return rc.layers


# ---------------------------------------------------------------------------------------------
# The structural keys of a batch: degrees as arrays, and where their groups sit.
# ---------------------------------------------------------------------------------------------
KEY_FIELDS = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs", "dp", "edp", "micro_batches")
SPAN_DIMS = ("tp", "cp", "ep", "etp", "pp", "dpcp", "edp")
BLOCK_SPANS = ("tp", "cp", "ep", "etp")


def _codes(col: np.ndarray) -> tuple[int, np.ndarray]:
    """(distinct values, each entry's rank among them) of an integer column: a lookup table over
    the value range when it is small (linear time; the search folds columns of up to a few
    hundred thousand keys), else np.unique."""
    col = np.asarray(col, dtype=np.int64).reshape(-1)
    if not len(col):
        return 0, col
    lo, hi = int(col.min()), int(col.max())
    if hi - lo > 1 << 22:
        u, inv = np.unique(col, return_inverse=True)
        return len(u), inv.reshape(-1)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[col - lo] = True
    rank = np.cumsum(present) - 1
    return int(rank[-1]) + 1, rank[col - lo]


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct rows, first row of each, each row's distinct index) of a small-integer matrix:
    the columns folded into one integer key (np.unique(axis=0) sorts a structured view, slower)."""
    key = np.zeros(len(a), dtype=np.int64)
    radix = 1
    for j in range(a.shape[1]):
        nu, inv = _codes(a[:, j])
        key = key * nu + inv
        radix *= nu
        if radix > 2**40:
            u, key = np.unique(key, return_inverse=True)
            key, radix = key.reshape(-1), len(u)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return a[first], first, inv.reshape(-1)


class KeyTable:
    """Degrees, micro-batch size and count of many structural keys as columns, the NVLink-domain
    fill and group spans of each (planner.cost.topology), and the distinct *block keys*: what a
    block's time and communication depend on besides the levers (tp, cp, ep, etp, mbs and the
    spans of those groups)."""

    def __init__(self, hw, job, assumptions, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(KEY_FIELDS))
        self.n = len(rows)
        cols = np.ascontiguousarray(rows.T)
        self.col = c = {f: cols[i] for i, f in enumerate(KEY_FIELDS)}
        u4, _, inv4 = unique_rows(np.stack([c["tp"], c["cp"], c["ep"], c["etp"]], 1))
        self.fill = np.array([resolve_domain_fill(hw.domain_size, job.domain_fill, *map(int, r)) for r in u4],
                             dtype=np.int64)[inv4]
        u8, _, inv8 = unique_rows(np.stack([self.fill, c["tp"], c["cp"], c["dp"], c["pp"], c["etp"], c["ep"],
                                            c["edp"]], 1))
        fields = np.zeros((len(u8), len(SPAN_DIMS), 2), dtype=np.int64)
        self._worst = []
        for i, r in enumerate(u8):
            spans = group_spans(assumptions.rank_order, *map(int, r))
            self._worst.append(spans)
            fields[i] = [(spans[d].domains, spans[d].per_domain) for d in SPAN_DIMS]
        self._span_of = inv8
        fields = fields[inv8]
        size = {"tp": c["tp"], "cp": c["cp"], "ep": c["ep"], "etp": c["etp"], "pp": c["pp"],
                "dpcp": c["dp"] * c["cp"], "edp": c["edp"]}
        self.span_cols = {d: (size[d], fields[:, j, 0], fields[:, j, 1]) for j, d in enumerate(SPAN_DIMS)}
        bk = np.stack([c["tp"], c["cp"], c["ep"], c["etp"], c["mbs"]]
                      + [self.span_cols[d][k] for d in BLOCK_SPANS for k in (1, 2)], 1)
        self.bk, self.bk_first, self.bk_of = unique_rows(bk)
        # Piece keys: what a piece's activation memory depends on (tp, cp, mbs, ep, etp).
        _, self.pk_first, self.pk_of = unique_rows(bk[:, :5])

    @classmethod
    def of_structs(cls, hw, job, assumptions, structs) -> KeyTable:
        """From objects with the :data:`KEY_FIELDS` attributes (the search's structural keys)."""
        rows = np.array([[getattr(s, f) for f in KEY_FIELDS] for s in structs], dtype=np.int64)
        return cls(hw, job, assumptions, rows)

    def degrees(self, rows: np.ndarray) -> Degrees:
        c = self.col
        return Degrees(c["tp"][rows], c["cp"][rows], c["pp"][rows], c["vpp"][rows], c["dp"][rows], c["ep"][rows],
                       c["etp"][rows], c["edp"][rows])

    def spans(self, rows: np.ndarray, dims=SPAN_DIMS) -> dict[str, GroupSpan]:
        """Group spans of some keys, as GroupSpans with array fields."""
        return {d: GroupSpan(d, *(x[rows] for x in self.span_cols[d]), 0, 0) for d in dims}  # type: ignore[call-arg]

    def worst_spans(self, row: int) -> dict[str, GroupSpan]:
        """The full spans (worst group members, group counts) of one key, for reports."""
        return self._worst[int(self._span_of[row])]

    def block_spans(self, keys: np.ndarray) -> dict[str, GroupSpan]:
        b = self.bk[keys]
        return {d: GroupSpan(d, b[:, j], b[:, 5 + 2 * j], b[:, 6 + 2 * j], 0, 0) for j, d in enumerate(BLOCK_SPANS)}


# ---------------------------------------------------------------------------------------------
# The context every plan of one model/hardware/job shares.
# ---------------------------------------------------------------------------------------------
class CostContext:
    """Model, hardware, job, assumptions and rates of a set of plans, their :class:`KeyTable`,
    and the memo of every term already composed (see the module docstring)."""

    def __init__(self, model, hw, job, assumptions, keys: KeyTable, rates: Rates):
        self.model, self.hw, self.job, self.assumptions = model, hw, job, assumptions
        self.keys = keys
        self.rates = rates
        self.ms = model_shape(model)
        self.efficiency = load_efficiency(hw.generation)
        self.memo: dict = {}
        self._blocks_from: tuple | None = None
        """(parent, this context's block keys' rows in it, compose there): :meth:`share_blocks`."""

    def share_blocks(self, parent: CostContext, compose_there: bool = False) -> None:
        """Read block costs from ``parent`` (same model, hardware, job, assumptions and rates)
        wherever its block keys hold this context's: what the parent composed is not composed
        again (the search costs subsets of its keys in contexts of their own). A block cost the
        parent lacks is composed here, over this context's (fewer) block keys, or with
        ``compose_there`` in the parent, so that the parent's other children read it too."""
        mine, theirs = self.keys.bk, parent.keys.bk
        _, _, inv = unique_rows(np.concatenate([theirs, mine]))
        where = np.full(int(inv.max()) + 1 if len(inv) else 0, -1, dtype=np.int64)
        where[inv[: len(theirs)]] = np.arange(len(theirs))
        idx = where[inv[len(theirs):]]
        if (idx < 0).any():
            raise ValueError("share_blocks: the parent context lacks some of these block keys")
        self._blocks_from = (parent, idx, compose_there)

    def share_blocks_with_any(self, sources) -> bool:
        """:meth:`share_blocks` with the first of ``sources`` (contexts of the same model,
        hardware, job, assumptions and rates) that holds every block key of this one; nothing
        when none does. A plan the search ranked reads the block costs its tables composed
        instead of composing them again for its reports."""
        if self._blocks_from is not None:
            return True
        for src in sources:
            if (src.model, src.hw, src.job, src.assumptions, src.rates) != (self.model, self.hw, self.job,
                                                                             self.assumptions, self.rates):
                continue
            try:
                self.share_blocks(src)
                return True
            except ValueError:
                continue
        return False

    def blocks_parent(self) -> tuple[CostContext, np.ndarray] | None:
        """(the wider context, this one's block keys' rows in it) when every block cost of this
        context is read from there (:meth:`share_blocks` with ``compose_there``), else None."""
        src = self._blocks_from
        return (src[0], src[1]) if src is not None and src[2] else None

    @classmethod
    def for_structs(cls, model, hw, job, assumptions, structs, calibration=None) -> CostContext:
        """A context over structural keys: objects with the :data:`KEY_FIELDS` attributes, or an
        integer array with those columns."""
        if isinstance(structs, np.ndarray):
            keys = KeyTable(hw, job, assumptions, structs)
        else:
            keys = KeyTable.of_structs(hw, job, assumptions, structs)
        probe = _Probe(model, hw, job, assumptions)
        return cls(model, hw, job, assumptions, keys, rates_for(probe, calibration))

    @cached_property
    def allocator_fraction(self) -> float:
        """Reserved-over-allocated fraction for these allocator settings (0 with an explicit
        margin in bytes)."""
        return memory_limits(self.hw, self.job, self.assumptions)[1]

    @cached_property
    def allocator_workload(self):
        """The workload model of the reserved gap, or None (planner.cost.setup.allocator_workload)."""
        return allocator_workload(self.efficiency.memory, self.assumptions)

    @property
    def cuda_context_bytes(self) -> float:
        return self.efficiency.memory.cuda_context_bytes.value

    @cached_property
    def capacity_bytes(self) -> float:
        """What a reserved peak (allocated peak x (1 + allocator fraction)) must stay under."""
        return memory_limits(self.hw, self.job, self.assumptions)[0]

    def forget(self, group: tuple) -> None:
        """Drop what was composed for the plans of one layout group (when the caller is done with
        them: what is shared by every group, the block costs, stays)."""
        for key in [k for k in self.memo if k[0] == group]:
            del self.memo[key]

    def cached(self, key, fn):
        hit = self.memo.get(key, _MISSING)
        if hit is _MISSING:
            hit = self.memo[key] = fn()
        return hit

    # ---- what a piece holds, over every piece key ----------------------------------------------
    def piece_memory(self, lv: Levers) -> PieceMemory:
        """Per-micro-batch memory of the repeated pieces under ``lv``'s recompute, precision and
        EP overlap, over the distinct piece keys (tp, cp, mbs, ep, etp) of the context's plans:
        row ``keys.pk_of[i]`` holds plan ``i``'s numbers."""
        return self.cached(("pieces", lv.recompute, lv.precision, lv.ep_overlap), lambda: self._piece_memory(lv))

    def _piece_memory(self, lv: Levers) -> PieceMemory:
        first = self.keys.pk_first
        c = {f: v[first] for f, v in self.keys.col.items()}
        a, job = self.assumptions, self.job
        sp = (c["tp"] > 1) & a.sequence_parallel
        sh = Shard(tp=c["tp"], cp=c["cp"], ep=c["ep"], etp=c["etp"], mbs=c["mbs"], seq=job.seq_len,
                   implementation=a.implementation, imbalance=a.routing_imbalance, sp=sp,
                   memory_efficient_permutation=a.memory_efficient_permutation,
                   ep_overlap=bool(lv.ep_overlap) & (c["ep"] > 1),  # the overlap needs expert parallelism
                   cross_entropy=a.cross_entropy or "fused", fp4=lv.fp4)
        return PieceMemory(self.model, sh, lv.recompute, lv.fp8 or lv.fp4, c["tp"])

    # ---- what a block costs, over every block key -------------------------------------------
    def shard(self, levers: Levers, rows: np.ndarray, with_ep: bool) -> Shard:
        """The kernel shapes of some keys (the dispatcher and routing imbalance only with EP)."""
        c, a = self.keys.col, self.assumptions
        return Shard(tp=c["tp"][rows], cp=c["cp"][rows], ep=c["ep"][rows], etp=c["etp"][rows], mbs=c["mbs"][rows],
                     seq=self.job.seq_len, implementation=a.implementation,
                     dispatcher=levers.dispatcher if with_ep else None,
                     imbalance=a.routing_imbalance if with_ep else 1.0, fp8=levers.fp8 or levers.fp4, fp4=levers.fp4,
                     expert_op_fuser=a.expert_op_fuser, fp8_attention=a.fp8_attention,
                     fp8_rowwise=levers.fp8 and a.fp8_recipe == "rowwise")

    def comm_flags(self, levers: Levers, recompute, shard: Shard) -> CommFlags:
        """The plan-level switches of a block's communication: TP overlap by implementation unless
        set, EP overlap, recompute; the dispatch's wire dtype (:func:`fp8_dispatch`)."""
        a = self.assumptions
        return CommFlags(
            tp_overlap=a.tp_comm_overlap if a.tp_comm_overlap is not None else a.implementation == "te",
            ep_overlap=bool(levers.ep_overlap), recompute=recompute,
            fp8_dispatch=fp8_dispatch(shard))

    def block_cost(self, name: str, compute_rc, comm_rc, levers: Levers | _LeverView) -> BlockCost:
        """One block's time and communication per micro-batch over every block key (arrays):
        ``compute_rc`` is what its compute recomputes, ``comm_rc`` what its communication sees."""
        key = ("block", name, compute_rc, comm_rc, levers.precision, levers.dispatcher, levers.ep_overlap,
               levers.cuda_graphs)
        if self._blocks_from is not None:
            parent, idx, there = self._blocks_from
            if there or key in parent.memo:
                # Composed over the parent's keys (already, or now for its other children too):
                # read this context's rows.
                return self.cached(key, lambda: _own_causes(at(parent.block_cost(name, compute_rc, comm_rc, levers),
                                                               idx)))
        return self.cached(key, lambda: self._block_cost(name, compute_rc, comm_rc, levers))

    def _block_cost(self, name, compute_rc, comm_rc, levers) -> BlockCost:
        keys = self.keys
        with_ep = keys.bk[:, 2] > 1
        graphs = levers.cuda_graphs
        rates = self.cached(("graph_rates", graphs), lambda: under_graphs(self.rates, graphs))
        parts = []
        for subset, ep in ((np.flatnonzero(~with_ep), False), (np.flatnonzero(with_ep), True)):
            if not len(subset):
                continue
            sh = self.shard(levers, keys.bk_first[subset], ep)
            kts = self.cached(("kernels", name, levers.precision, sh.dispatcher, ep, graphs),
                              lambda sh=sh: kernel_times(self.ms, sh, name, rates))
            sums = self.cached(("sums", name, levers.precision, sh.dispatcher, ep, graphs),
                               lambda kts=kts: kernel_sums(kts))
            bt = block_time_of(kts, rates, compute_rc, sums)
            flags = self.comm_flags(levers, comm_rc, sh)
            # Collectives depend on the degrees and the FP8 dispatch only: shared by every block.
            transfers = self.cached(("transfers", ep, sh.dispatcher, flags.fp8_dispatch), dict)
            spans = self.cached(("block_spans", ep), lambda subset=subset: keys.block_spans(subset))
            if ep and flags.ep_overlap and "ep" in comm_causes(self.ms, name, spans):
                bt = with_stage_host(bt, combined_stage_host_s(self.rates, graphs))
            comm = block_comm(self.ms, sh, name, bt, spans, self.rates, flags, transfers)
            ep_parts = (self.cached(("ep_parts", sh.dispatcher, flags.fp8_dispatch), lambda sh=sh, spans=spans, flags=flags:
                                    ep_dispatch_combine(self.ms, sh, spans["ep"], self.rates, flags.fp8_dispatch))
                        if ep else None)
            layer = block_layer(kts, bt, comm, compute_rc, ep_parts)
            # A function of the kernels alone (cached above): once per kernel set, not per
            # recompute setting.
            fp8 = levers.fp8 or levers.fp4
            wk = self.cached(("wgrad_bytes", name, levers.precision, sh.dispatcher, ep, graphs, fp8),
                             lambda kts=kts, fp8=fp8: wgrad_bytes(kts, fp8))
            parts.append((subset, bt, comm, layer, wk))
        n = len(keys.bk)
        return BlockCost(name, 1, _scatter_time([(s, bt) for s, bt, *_ in parts], n),
                         _scatter_comm([(s, cm) for s, _, cm, *_ in parts], n),
                         LayerTimes(**{f.name: _scatter([(s, getattr(lt, f.name)) for s, _, _, lt, _ in parts], n)
                                       for f in dataclasses.fields(LayerTimes)}),
                         _scatter([(s, wk) for s, *_, wk in parts], n))


_MISSING = object()


def _own_causes(bc: BlockCost) -> BlockCost:
    """A block cost read from a wider context without the communication causes none of these
    keys has (all zero here: a group of size one moves nothing), as composing it over these keys
    alone gives it (planner.cost.comm adds a cause when some key of the batch has the group)."""
    comm = tuple(c for c in bc.comm if np.any(c.total))
    return bc if len(comm) == len(bc.comm) else dataclasses.replace(bc, comm=comm)


def least_constant_bytes(model, layout: PipelineLayout, cols: dict, options) -> np.ndarray:
    """(pp, keys) bytes: per pipeline rank of ``layout`` and key (``cols``: integer columns tp, cp,
    ep, etp, dp, edp), the least weights, gradients and optimizer states of one GPU over
    ``options``, (sharding, moments, offload, grad_reduce) tuples (the search's memory bound)."""
    n, pp = len(cols["tp"]), layout.pp
    per = [rank_params_of(model, layout, r, cols["tp"], cols["etp"], cols["ep"]) for r in range(pp)]
    # every rank's parameters side by side: one composition per lever option
    rp = RankParams(*(np.concatenate([np.broadcast_to(np.asarray(getattr(x, f), dtype=float), (n,)) for x in per])
                      for f in ("dense", "expert", "largest_layer")))
    deg = {k: np.tile(cols[k], pp) for k in ("dp", "cp", "edp")}
    floor = None
    for sharding, moments, offload, grad_reduce in options:
        total = constant_bytes(rp, dp=deg["dp"], cp=deg["cp"], edp=deg["edp"], sharding=sharding, moments=moments,
                               offload_optimizer=offload.optimizer, grad_bytes=2.0 if grad_reduce == "bf16" else 4.0).total
        floor = total if floor is None else np.minimum(floor, total)
    assert floor is not None  # at least one lever option
    return np.broadcast_to(floor, (pp * n,)).reshape(pp, n)


def margin_bytes(hw, job) -> float:
    """The memory the user keeps free on every GPU: the job's margin in bytes plus its fraction of
    the usable HBM (the command line's default margin)."""
    return job.memory_margin_bytes + job.memory_margin_fraction * hw.gpu.hbm_usable_bytes.value


def memory_limits(hw, job, assumptions) -> tuple[float, float]:
    """(capacity, allocator fraction): usable HBM less the CUDA context, the user's margin and an
    explicit allocator margin; and the reserved-over-allocated fraction of the allocator settings
    (0 when the margin is given in bytes)."""
    mem = load_efficiency(hw.generation).memory
    cap = hw.gpu.hbm_usable_bytes.value - mem.cuda_context_bytes.value - margin_bytes(hw, job)
    if assumptions.allocator_margin_bytes is not None:
        cap -= assumptions.allocator_margin_bytes
    return cap, allocator_fraction(mem, assumptions)


class _Probe:
    """What :func:`planner.cost.rates.rates_for` reads of a setup."""

    def __init__(self, model, hw, job, assumptions):
        self.model, self.hw, self.job, self.assumptions = model, hw, job, assumptions
        self.efficiency = load_efficiency(hw.generation)


def _scatter(parts: list[tuple[np.ndarray, Num]], n: int) -> np.ndarray:
    if len(parts) == 1 and len(parts[0][0]) == n and np.shape(parts[0][1]) == (n,):
        return np.asarray(parts[0][1], dtype=float)  # one part holding every row, in order
    out = np.empty(n) if sum(len(rows) for rows, _ in parts) == n else np.zeros(n)
    for rows, values in parts:
        out[rows] = values
    return out


def _scatter_time(parts: list[tuple[np.ndarray, BlockTime]], n: int) -> BlockTime:
    """A BlockTime over all block keys from the BlockTimes of disjoint subsets. The per-GEMM times
    are left out: only the block's own communication reads them, computed per subset before."""
    fields = {f.name: _scatter([(rows, getattr(bt, f.name)) for rows, bt in parts], n)
              for f in dataclasses.fields(BlockTime) if f.name != "gemms"}
    return BlockTime(**fields, gemms=())


def _scatter_comm(parts: list[tuple[np.ndarray, tuple[CommCost, ...]]], n: int) -> tuple[CommCost, ...]:
    causes = list(dict.fromkeys(c.cause for _, comm in parts for c in comm))
    out = []
    for cause in causes:
        tot = _scatter([(rows, c.total) for rows, comm in parts for c in comm if c.cause == cause], n)
        exp = _scatter([(rows, c.exposed) for rows, comm in parts for c in comm if c.cause == cause], n)
        out.append(CommCost(cause, tot, exp))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# A batch: the plans of one pipeline layout.
# ---------------------------------------------------------------------------------------------
ROW_LEVERS = ("recompute", "stage_recompute", "precision", "dispatcher", "ep_overlap")
"""Levers that may differ between the plans of one batch: they choose which block costs (kernels,
communication) and which memory pieces a plan reads, so a batch evaluates several settings of
them side by side. The others (sharding, moments, offload) are the batch's."""


@dataclass(frozen=True)
class PlanBatch:
    """Plans sharing ``(pp, vpp, layout)``: every key of ``key_rows`` (rows of the context's key
    table) under every lever setting of ``variants``; plan ``i`` is key ``i % n`` under variant
    ``i // n``. The variants agree on every lever but :data:`ROW_LEVERS`."""

    ctx: CostContext
    key_rows: np.ndarray
    layout: PipelineLayout
    variants: tuple[Levers, ...]
    group: tuple
    """Identity of (key_rows, layout) in the context's memo."""
    schedule: Schedule | None = None
    """The pipeline schedule the plans run (its record, resolved where the plans entered; None
    without pipeline parallelism)."""
    walk: bool = True
    """Walk the schedules the closed forms do not cover (planner.cost.walked); False reads
    their closed-form estimate instead (the search's tables)."""

    @property
    def levers(self) -> Levers:
        """The batch's levers (the first variant's row levers)."""
        return self.variants[0]

    @property
    def pp(self) -> int:
        return self.layout.pp

    @property
    def vpp(self) -> int:
        return self.layout.vpp

    @property
    def n_keys(self) -> int:
        return len(self.key_rows)

    def _tiled(self, name: str, values: np.ndarray) -> np.ndarray:
        return self.ctx.cached((self.group, "tile", name, len(self.variants)), lambda: np.tile(values, len(self.variants)))

    @property
    def rows(self) -> np.ndarray:
        """Key-table row of every plan."""
        return self._tiled("rows", self.key_rows)

    @property
    def deg(self) -> Degrees:
        return self.ctx.cached((self.group, "deg", len(self.variants)), lambda: self.ctx.keys.degrees(self.rows))

    @property
    def micro_batches(self) -> np.ndarray:
        return self._tiled("m", self.ctx.keys.col["micro_batches"][self.key_rows])

    @property
    def mbs(self) -> np.ndarray:
        return self._tiled("mbs", self.ctx.keys.col["mbs"][self.key_rows])

    def with_levers(self, levers: Levers) -> PlanBatch:
        return dataclasses.replace(self, variants=(levers,))

    def with_variants(self, variants) -> PlanBatch:
        """The same keys under several lever settings that differ only in :data:`ROW_LEVERS`."""
        return dataclasses.replace(self, variants=tuple(variants))


def _setup_keys(setup) -> KeyTable:
    d = setup.deg
    row = np.array([[d.tp, d.cp, d.pp, d.vpp, d.ep, d.etp, setup.plan.mbs, d.dp, d.edp, setup.micro_batches]])
    return KeyTable(setup.hw, setup.job, setup.assumptions, row)


def batch_of_setup(setup, calibration=None, rates: Rates | None = None, walk: bool = True) -> PlanBatch:
    """A batch of one plan (a resolved :class:`~planner.cost.setup.Setup`); ``rates`` replace the
    hardware's achievable rates (what-if checks); ``walk``: see :attr:`PlanBatch.walk`. Plans with the same degrees share one context,
    so evaluating a plan's neighbours (other levers, another layout) reuses its block costs."""
    rates = rates or rates_for(setup, calibration)
    d = setup.deg
    row = (d.tp, d.cp, d.pp, d.vpp, d.ep, d.etp, setup.plan.mbs, d.dp, d.edp, setup.micro_batches)
    key = (setup.model, setup.hw, setup.job, setup.assumptions, rates, row)
    ctx = _CONTEXTS.pop(key, None) or CostContext(setup.model, setup.hw, setup.job, setup.assumptions,
                                                  _setup_keys(setup), rates)
    _CONTEXTS[key] = ctx
    while len(_CONTEXTS) > 32:
        _CONTEXTS.pop(next(iter(_CONTEXTS)))
    group = ("setup", setup.layout.pp, setup.layout.vpp, setup.plan.layout, setup.schedule, walk)
    return PlanBatch(ctx, np.array([0]), setup.layout, (Levers.of(setup.plan),), group, setup.schedule, walk)


_CONTEXTS: dict[tuple, CostContext] = {}
"""Recently used one-plan contexts, least recent first."""


def costs_of(setup, calibration=None, rates: Rates | None = None, walk: bool = True) -> Costs:
    """The composition of one plan (arrays of length one)."""
    return evaluate_batch(batch_of_setup(setup, calibration, rates, walk))


def plan_shard(setup) -> Shard:
    """The kernel shapes of one plan (scalar degrees), as its blocks are costed."""
    b = batch_of_setup(setup)
    return at(b.ctx.shard(b.levers, b.rows, setup.deg.ep > 1), 0)


def plan_spans(setup) -> tuple[dict[str, GroupSpan], int]:
    """Where one plan's process groups sit: each dimension's worst group and the NVLink-domain fill."""
    keys = _setup_keys(setup)
    return keys.worst_spans(0), int(keys.fill[0])


def layout_batches(ctx: CostContext, structs, base: Levers, walk: bool = False) -> list[PlanBatch]:
    """One batch per pipeline layout ``(pp, vpp, layout, schedule)`` of the context's keys
    (``structs`` in key-table order), rows sorted by micro-batch count (equal counts share
    schedule profiles); the schedules the closed forms do not cover are estimated unless ``walk``."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(structs):
        sched = getattr(s, "schedule", None) or default_schedule(s.pp, s.vpp)
        groups.setdefault((s.pp, s.vpp, s.layout, sched), []).append(i)
    m = ctx.keys.col["micro_batches"]
    out = []
    for (pp, vpp, layout_str, sched), idx in groups.items():
        rows = np.array(idx, dtype=np.int64)
        rows = rows[np.argsort(m[rows], kind="stable")]
        layout = build_layout(ctx.model, pp, vpp, layout_str, sched)
        group = (pp, vpp, layout_str) if sched == default_schedule(pp, vpp) else (pp, vpp, layout_str, sched.name)
        out.append(PlanBatch(ctx, rows, layout, (base,), group, sched, walk))
    return out


def evaluate_batch(batch: PlanBatch) -> Costs:
    """Memory and time of every plan of ``batch`` (terms computed when first read)."""
    return Costs(batch)


# ---------------------------------------------------------------------------------------------
# The composition.
# ---------------------------------------------------------------------------------------------
class Costs(PeakMemory, StepTime):
    """Memory and time of a :class:`PlanBatch`: arrays over its plans, per pipeline rank where the
    term is per rank. Each term is composed once per lever values it depends on (memoized in the
    context). Its parts live in planner.cost.terms (see the module docstring)."""


__all__ = ["least_constant_bytes", "Levers", "KeyTable", "CostContext", "PlanBatch", "Costs", "evaluate_batch", "batch_of_setup", "costs_of",
           "plan_spans", "plan_shard",
           "layout_batches", "at", "memory_schedule", "memory_limits", "DataParallel", "ActOffload", "OptimizerStep"]
