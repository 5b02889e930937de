"""Memory report of one plan: per pipeline stage, the constant memory, the activations held at the
end of the warm-up, and the true peak over one training step, with the moment it happens.

The numbers come from the one composition (:mod:`planner.cost.compose`, a batch of one plan);
this module names the peak's moment the way the seed does and lays the result out as the
``memory`` object of DESIGN.md section 6.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.cost.compose import Costs, batch_of_setup, evaluate_batch, margin_bytes, memory_schedule
from planner.cost.constant import ConstantMemory
from planner.cost.pieces import ChunkMemory, GROUP_PURPOSE, NCCL_PROTOCOL_BYTES, held_of, pair_rise, pair_steps
from planner.cost.schedule import inflight_end_of_warmup, offload_share, rank_ops
from planner.cost.schedules.inflight import held_from, held_matrix, held_vectors, paired_forwards
from planner.cost.setup import Setup, allocator_workload
from planner.memtrace.diagnose import GAP_B, NEAR_LIMIT, peak_gap
from planner.specs.schedule import Schedule


@dataclass(frozen=True)
class StageMemory:
    """One pipeline rank's memory (bytes; the allocated peak, before the allocator margin)."""

    rank: int
    constant: ConstantMemory
    comm_buffers: float
    """Communication buffers, FSDP gather buffers included."""
    chunks: tuple[ChunkMemory, ...]
    inflight_end_of_warmup: tuple[int, ...]
    """Chunks held per virtual stage at the end of the warm-up (warm-up count plus one)."""
    activations_end_of_warmup: float
    peak_bytes: float
    """Allocated peak over the step."""
    peak_components: dict[str, float]
    peak_moment: dict
    """Where the peak happens (see :func:`_locate_moment`)."""
    optimizer_transient: float
    host_bytes: float
    """Host memory one GPU of this stage needs (offloaded optimizer state and activations)."""
    reserved_bytes: float = 0.0
    """Estimated reserved peak (allocated peak plus what the caching allocator keeps above it:
    planner.cost.compose.Costs.reserved_bytes)."""
    activation_peak: float = 0.0
    """Activations and op temporaries at the forward-backward peak (above the constant bytes)."""
    fwd_bwd_moment: dict | None = None
    """Where the forward-backward peak happens (the overall moment unless the optimizer step peaks)."""
    reserved_terms: dict[str, float] | None = None
    """Reserved minus allocated, term by term (planner.cost.compose.Costs.reserved_terms)."""
    comm_lines: tuple = ()
    """The communication buffers line by line (planner.cost.pieces.CommLine, this plan's values)."""
    attention_score_buffer: float = 0.0
    """The local spec's persistent attention-score buffer (part of ``comm_buffers``)."""

    @property
    def base_bytes(self) -> float:
        """What both phases hold: weights, gradients, optimizer state and communication buffers."""
        return self.peak_bytes - max(self.activation_peak, self.optimizer_transient)

    @property
    def fwd_bwd_peak_bytes(self) -> float:
        """Allocated peak of the forward-backward passes (the schedule's activation peak)."""
        return self.base_bytes + self.activation_peak

    @property
    def optimizer_peak_bytes(self) -> float:
        """Allocated peak of the optimizer step (its temporaries over the constant bytes)."""
        return self.base_bytes + self.optimizer_transient

    @property
    def max_inflight(self) -> int:
        return sum(self.inflight_end_of_warmup)


def _locate_moment(ops, chunks, held, peak: float, *, recomputes: bool) -> dict:
    """The first op of the step (in time order) whose rise reaches the peak, named the way the
    seed does: 'end_of_warmup' (the activation peak: the forward that completes the warm-up, or
    the first backward before anything is freed), 'recompute_window' (a backward re-creating
    forward intermediates), another 'forward'/'backward' moment, or the 'optimizer' step."""
    counts = [0] * len(chunks)
    most = 0.0
    tol = 1e-9 * max(peak, 1.0)
    for i, op in enumerate(ops):
        ch = chunks[op.chunk]
        h = held(counts)
        if op.kind == "F":
            counts[op.chunk] += 1
            most = max(most, held(counts))
            if h + ch.fwd_rise >= peak - tol:
                warmup_end = i + 1 < len(ops) and ops[i + 1].kind == "B"
                window = "end_of_warmup" if held(counts) >= most - tol and warmup_end else "forward"
                return _moment("forward", op, counts, ch.layers[ch.fwd_rise_at].name, h, ch.fwd_rise, window)
        else:
            if h + ch.bwd_rise >= peak - tol:
                layer = ch.layers[ch.bwd_rise_at]
                if recomputes and layer.full > layer.kept + 1e-9:
                    window = "recompute_window"
                elif h >= most - tol:
                    window = "end_of_warmup"
                else:
                    window = "backward"
                return _moment("backward", op, counts, layer.name, h, ch.bwd_rise, window)
            counts[op.chunk] -= 1
    return _optimizer_moment(len(chunks), 0.0)


def _locate_schedule_moment(sched: Schedule, b, rank: int, chunks, kept: list, held, peak: float, *, recomputes: bool,
                            offload: bool) -> dict:
    """:func:`_locate_moment` under a schedule of planner.cost.schedules: its own op order and held
    vectors (planner.cost.schedules.inflight.held_before; entries past the chunks are those held
    between input and weight gradient), the weight-gradient passes adding nothing."""
    tol = 1e-9 * max(peak, 1.0)
    m = int(b.micro_batches[0])
    pairs = _pairs(sched, b, m, rank)
    start = _first_candidate(sched, b, m, rank, chunks, kept, peak - tol, offload=offload, pairs=pairs)
    for i, (op, vec) in enumerate(held_from(sched, b.pp, b.vpp, m, rank, start), start):
        ch, h = chunks[op.chunk], held(vec)
        if i in pairs:  # the combined 1F1B's overlapped step: forward i with the backward after it
            other = pairs[i]
            if other is None:
                continue  # the pair's backward: the pair's rise covers it
            rise = pair_rise(ch, chunks[other])
            if h + rise >= peak - tol:
                layer, stored = _pair_peak_layer(ch, chunks[other], float(rise))
                return {**_moment("forward", op, list(vec), layer, h, rise, "overlapped_step"), "stored": stored}
            continue
        if op.kind == "F" and h + ch.fwd_rise >= peak - tol:
            return _moment("forward", op, list(vec), ch.layers[ch.fwd_rise_at].name, h, ch.fwd_rise, "forward")
        if op.kind in ("I", "B") and h + ch.bwd_rise >= peak - tol:
            layer = ch.layers[ch.bwd_rise_at]
            window = "recompute_window" if recomputes and layer.full > layer.kept + 1e-9 else "backward"
            return _moment("backward", op, list(vec), layer.name, h, ch.bwd_rise, window)
    return _optimizer_moment(len(kept), 0.0)


def _pairs(sched: Schedule, b, m: int, rank: int) -> dict[int, int | None]:
    """The combined 1F1B's overlapped steps by op index: a paired forward's index -> the chunk of
    its backward, that backward's index -> None (planner.cost.schedules.inflight.paired_forwards);
    empty for every other schedule."""
    return _schedule_pairs(sched, b.pp, b.vpp, m, rank)[0]


@lru_cache(maxsize=1024)
def _schedule_pairs(sched: Schedule, pp: int, vpp: int, m: int, rank: int):
    """(:func:`_pairs`' map; its paired forwards' op indices, their backwards' chunks, and the pairs'
    backward op indices as arrays): one schedule's, shared by the plans a search reports (a Python
    loop over thousands of ops per rank)."""
    kinds, chunks, _ = held_matrix(sched, pp, vpp, m, rank)
    out: dict[int, int | None] = {}
    for k in paired_forwards(sched, pp, vpp, m, rank).tolist():
        out[k], out[k + 1] = int(chunks[k + 1]), None
    fwd = np.array([k for k, other in out.items() if other is not None], dtype=np.int64)
    other = np.array([other for other in out.values() if other is not None], dtype=np.int64)
    bwd = np.array([k for k, other in out.items() if other is None], dtype=np.int64)
    return out, fwd, other, bwd


def _pair_peak_layer(f, b, rise: float) -> tuple[str, float]:
    """(the forward piece, else the backward one, of the overlapped step where the pair reaches
    ``rise``; the bytes the pair has stored by then, net of what the backward released): the points
    planner.cost.pieces.pair_rise bounds, step by step (pair_steps)."""
    added = freed = 0.0
    name, stored = "", 0.0
    for fl, bl in pair_steps(f, b):
        stored = added - freed + (fl.kept if fl else 0.0)
        point = stored + (fl.fwd_transient if fl else 0.0) + (bl.bwd_transient if bl else 0.0)
        name = fl.name if fl is not None else bl.name
        if point >= rise - 1e-9 * max(abs(rise), 1.0):
            return name, stored
        added += fl.kept if fl else 0.0
        freed += bl.kept if bl else 0.0
    return name, stored


def _first_candidate(sched: Schedule, b, m: int, rank: int, chunks, kept: list, level: float, *, offload: bool,
                     pairs: dict | None = None) -> int:
    """The first op whose held bytes plus rise may reach ``level``, found with one matrix product
    over every op (a rank runs thousands): the op-by-op check in exact arithmetic starts there. The
    slack is far above the product's rounding (about 1e-15 of the bytes), so no op before the
    index passes the exact check."""
    kinds, chunk, held = held_matrix(sched, b.pp, b.vpp, m, rank)
    total = held @ np.asarray(kept, dtype=float)
    if offload:
        total = total * offload_share(held.sum(axis=1))
    fwd = np.array([c.fwd_rise for c in chunks], dtype=float)
    bwd = np.array([c.bwd_rise for c in chunks], dtype=float)
    # Kinds as planner.cost.schedule.KINDS numbers them: F rises by the forward's rise, I and B by
    # the backward's, W by nothing (it is never a moment).
    rise = np.select([kinds == 0, (kinds == 1) | (kinds == 2)], [fwd[chunk], bwd[chunk]], -np.inf)
    if pairs:  # the combined 1F1B's pairs rise as one step, their backwards no moment of their own
        _, fwd_ops, others, bwd_ops = _schedule_pairs(sched, b.pp, b.vpp, m, rank)
        rise[bwd_ops] = -np.inf
        # a few distinct (forward, backward) chunk pairs, each rise once
        codes, step = np.unique(chunk[fwd_ops].astype(np.int64) * len(chunks) + others, return_inverse=True)
        n = len(chunks)
        rise[fwd_ops] = np.array([float(pair_rise(chunks[c // n], chunks[c % n])) for c in codes.tolist()],
                                 dtype=float)[step.reshape(-1)]
    hit = np.flatnonzero(total + rise >= level - 1e-6 * max(abs(level), 1.0))
    return int(hit[0]) if len(hit) else len(kinds)


def _moment(phase, op, counts, layer, held_bytes, rise, window) -> dict:
    return {"phase": phase, "chunk": op.chunk, "microbatch": op.microbatch, "inflight": list(counts), "layer": layer,
            "held": held_bytes, "rise": rise, "window": window}


def _optimizer_moment(chunks: int, rise: float) -> dict:
    return {"phase": "optimizer", "chunk": None, "microbatch": None, "inflight": [0] * chunks, "layer": None,
            "held": 0.0, "rise": rise, "window": "optimizer"}


def _one(x) -> float:
    """The value of a batch of one plan."""
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def stage_from_costs(costs: Costs, rank: int) -> StageMemory:
    """One rank's memory from the composition (a batch of one plan)."""
    b, lv = costs.batch, costs.lv
    pp, vpp, m = b.pp, b.vpp, int(b.micro_batches[0])
    chunks = tuple(c.at(0) for c in costs.chunks(rank))
    const = costs.constant(rank).at(0)
    pool = _one(costs.graph_pool(rank))
    comm = _one(costs.comm_buffers()) + float(const.fsdp_buffers) + pool
    sched = memory_schedule(b.schedule, lv, vpp)
    kept = [c.kept for c in chunks]
    if sched is not None and sched.splits_backward:
        kept += [float(x) for x in costs.wgrad_kept(rank)[:, 0]]
    held = held_of(kept, lv.offload_activations)
    act_peak = _one(costs.activation_peak(rank))
    opt_t = _one(costs.optimizer_transient(rank))
    recomputes = lv.recompute.kind != "none"
    if sched is not None:
        fb_moment = _locate_schedule_moment(sched, b, rank, chunks, kept, held, act_peak, recomputes=recomputes,
                                            offload=lv.offload_activations)
    else:
        fb_moment = _locate_moment(rank_ops(pp, vpp, m, rank), chunks, held, act_peak, recomputes=recomputes)
    moment = _optimizer_moment(len(kept), opt_t) if opt_t > act_peak else fb_moment
    peak = _one(costs.peak_bytes(rank))
    # Activations vs transient at the peak moment: what is stored (including the current chunk's
    # stored part) vs the current op's temporaries.
    acts_at_peak, transient_at_peak = moment["held"], moment["rise"]
    if moment["window"] == "overlapped_step":
        acts_at_peak += moment["stored"]
        transient_at_peak -= moment["stored"]
    elif moment["phase"] == "forward":
        ch = chunks[moment["chunk"]]
        stored_prefix = sum(layer.kept for layer in ch.layers[: ch.fwd_rise_at + 1])
        acts_at_peak += stored_prefix
        transient_at_peak -= stored_prefix
    components = {"weights": const.weights, "gradients": const.gradients, "optimizer": const.optimizer,
                  "activations": acts_at_peak, "transient": transient_at_peak, "comm_buffers": comm}
    if sched is None:
        end_vec = inflight_end_of_warmup(pp, vpp, m, rank)
    else:  # no warm-up to speak of in DualPipe: the moment the rank holds the most
        end_vec = max(held_vectors(sched, pp, vpp, m, rank), key=held)
    terms = {k: _one(v) for k, v in costs.reserved_terms(rank).items()}
    # the CUDA-graph pool is this rank's own (its captured layers and micro-batches in flight)
    lines = tuple(dataclasses.replace(ln, count=1 if pool else 0, each=pool) if ln.kind == "graph_pool" else
                  dataclasses.replace(ln, count=_one(ln.count), each=_one(ln.each)) for ln in costs.comm_lines())
    return StageMemory(rank, const, comm, chunks, end_vec, held(end_vec), peak, components, moment, opt_t,
                       _one(costs.host_bytes(rank)), _one(costs.reserved_bytes(rank)), act_peak, fb_moment,
                       terms, lines, _one(costs.attention_score_buffer()))


def stage_memory(setup, rank: int) -> StageMemory:
    return stage_from_costs(evaluate_batch(batch_of_setup(setup)), rank)


@dataclass(frozen=True)
class MemoryReport:
    """The ``memory`` object of one plan (DESIGN.md section 6)."""

    setup: Setup
    stages: tuple[StageMemory, ...]
    allocator_fraction: float
    """Reserved over allocated bytes (the allocator margin); 0 with an explicit margin in bytes."""
    cuda_context: float
    capacity_bytes: float
    """Usable HBM less the CUDA context and the user's margin (the allocator margin is counted in
    the peak)."""
    host_needed_bytes: float
    host_capacity_bytes: float

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda s: (self.reserved(s), -s.rank))

    def reserved(self, stage: StageMemory) -> float:
        return stage.reserved_bytes

    @property
    def peak_bytes(self) -> float:
        """Estimated reserved peak of the worst stage (allocated peak plus allocator margin)."""
        return self.reserved(self.worst)

    def reason(self) -> str:
        """Why the plan does not fit (empty when it fits)."""
        out = []
        if self.peak_bytes > self.capacity_bytes:
            out.append(f"stage {self.worst.rank} peaks at {self.peak_bytes / 2**30:.1f} GiB, "
                       f"{(self.peak_bytes - self.capacity_bytes) / 2**30:.1f} GiB above the "
                       f"{self.capacity_bytes / 2**30:.1f} GiB capacity")
        if self.host_needed_bytes > self.host_capacity_bytes:
            out.append(f"offload needs {self.host_needed_bytes / 2**30:.1f} GiB of host memory per GPU, more than the "
                       f"{self.host_capacity_bytes / 2**30:.1f} GiB the host has")
        return "; ".join(out)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes and self.host_needed_bytes <= self.host_capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        """Capacity less the peak: what stays free beyond the user's margin (negative: short)."""
        return self.capacity_bytes - self.peak_bytes

    @property
    def margin_bytes(self) -> float:
        """The user's memory margin (bytes plus its part of the usable HBM), already taken out of
        the capacity: at the peak, headroom + margin bytes are free on the GPU."""
        return margin_bytes(self.setup.hw, self.setup.job)

    def stage_json(self, s: StageMemory) -> dict:
        comps = dict(s.peak_components)
        comps["allocator"] = self.reserved(s) - s.peak_bytes
        return {
            "rank": s.rank,
            "peak_bytes": round(self.reserved(s)),
            "allocated_peak_bytes": round(s.peak_bytes),
            "components": {k: round(v) for k, v in comps.items()},
            "peak_moment": _moment_json(s.peak_moment),
            "activations_end_of_warmup_bytes": round(s.activations_end_of_warmup),
            "inflight_chunks_end_of_warmup": s.max_inflight,
            "layers": sum(len([layer for layer in c.layers if layer.name.startswith("layer")]) for c in s.chunks),
            "host_optimizer_bytes": round(float(s.constant.host_optimizer)),
            "phase_peaks": self.phase_peaks_json(s),
        }

    @staticmethod
    def phase_peaks_json(s: StageMemory) -> dict:
        """The allocated peak of each phase of the step: the forward-backward passes (where in the
        schedule) and the optimizer step; ``peak_phase`` names the one that sets the overall
        allocated peak. Bytes before the allocator margin (the reserved estimate is of the step)."""
        fb: dict = {"allocated_peak_bytes": round(s.fwd_bwd_peak_bytes), "activations_bytes": round(s.activation_peak)}
        if s.fwd_bwd_moment is not None:
            fb["moment"] = _moment_json(s.fwd_bwd_moment)
        return {
            "forward_backward": fb,
            "optimizer_step": {"allocated_peak_bytes": round(s.optimizer_peak_bytes),
                               "transient_bytes": round(s.optimizer_transient)},
            "peak_phase": "optimizer_step" if s.optimizer_transient > s.activation_peak else "forward_backward",
        }

    def add_reserved_json(self, mj: dict) -> dict:
        """``mj`` (this report's :meth:`to_json`) with explain's reserved detail: per stage and for
        the worst, 'reserved_breakdown' and 'case_b' (kept out of the search's plan JSON, where
        every ranked plan would carry them)."""
        for s, sj in zip(self.stages, mj["stages"]):
            sj["reserved_breakdown"] = reserved_breakdown_json(s, self.reserved(s))
            sj["case_b"] = case_b_json(s, self.reserved(s), self.capacity_bytes, self.setup)
        worst = mj["stages"][[s.rank for s in self.stages].index(self.worst.rank)]
        mj["reserved_breakdown"], mj["case_b"] = worst["reserved_breakdown"], worst["case_b"]
        return mj

    def to_json(self) -> dict:
        w = self.worst
        worst = self.stage_json(w)
        return {
            "peak_bytes": worst["peak_bytes"],
            "allocated_peak_bytes": worst["allocated_peak_bytes"],
            "capacity_bytes": round(self.capacity_bytes),
            "fits": self.fits,
            "headroom_bytes": round(self.headroom_bytes),
            "margin_bytes": round(self.margin_bytes),
            "worst_stage": w.rank,
            "peak_moment": worst["peak_moment"],
            "phase_peaks": worst["phase_peaks"],
            "components": worst["components"],
            "stages": [self.stage_json(s) for s in self.stages],
            "host": {"needed_bytes": round(self.host_needed_bytes), "capacity_bytes": round(self.host_capacity_bytes)},
            "assumptions": {
                "allocator_fraction": self.allocator_fraction,
                "cuda_context_bytes": round(self.cuda_context),
                "note": "peak_bytes estimates reserved memory: the allocated peak plus the allocator margin; "
                        "capacity is usable HBM less the CUDA context and the user margin",
            },
        }


HOLDING_TERMS = {
    # term: (the seed's cause of case B it is, what drives it)
    "stranded": ("fragmentation", "transient size mix: freed expert-weight-sized blocks (the local spec's "
                 "AdamW sqrt(v) and unfused weight gradients) too small for the activation requests"),
    "partial_segments": ("fragmentation", "segments partly used at the peak (a share of the peak)"),
    "small_pool": ("fragmentation", "the small pool (2 MiB segments) and the allocator's rounding, fixed"),
    "recompute": ("staircase", "recompute: the re-created forward allocates while the backward's gradient "
                  "blocks stay cached"),
    "pipeline": ("staircase", "pipeline in-flight stair: one micro-batch's backward frees blocks between later "
                 "micro-batches' activations"),
    "graph_pool_hold": ("graph pool", "whole-layer CUDA graphs keep the activations' segments in their private pool "
                        "through the optimizer step, whose temporaries come on top (measured on H200: "
                        "results/validation/gpu-memory.md, CUDA graphs)"),
    "allocator_fraction": ("staircase", "a measured share of the allocated peak (the caching allocator's stair "
                           "and fragmentation together)"),
}
"""The workload model's terms (hw_specs/efficiency <generation>.yaml memory.allocator_workload), each
with the seed's name for its cause (staircase, fragmentation, stream split) and what drives it."""

GRAPH_POOL_NOTE = ("CUDA-graph pools of the plan's cuda_graphs: static buffers per captured scope, micro-batch in "
                   "flight and chunk, and the scopes' private pools; an estimate (0 without graphs)")
OUTSIDE_ALLOCATOR = ("NCCL communicators and DeepEP/HybridEP buffers are allocated by their libraries outside "
                     "PyTorch's caching allocator (torch.cuda.memory_reserved and memtrace do not see them); "
                     "planner counts them with the allocated peak so the capacity check covers them")


def _line_json(ln) -> dict:
    out = {"count": round(ln.count), "bytes_each": round(ln.each), "bytes": round(ln.total), "estimate": ln.estimate,
           "source": ln.source}
    if ln.env:
        out["env"] = list(ln.env)
    return out


def reserved_breakdown_json(s: StageMemory, reserved: float) -> dict:
    """What a stage's reserved peak is made of: the allocated peak with its buffers line by line
    (communicators per group, dispatcher buffers, PP receive slots, GEMM workspaces, graph pools),
    and the allocator's holding above it term by term. Estimates are labelled."""
    comms = []
    for ln in s.comm_lines:
        if ln.kind != "nccl" or not ln.count:
            continue
        per_channel = sum(NCCL_PROTOCOL_BYTES.values())
        comms.append({"group": ln.name, "purpose": GROUP_PURPOSE[ln.name], **_line_json(ln),
                      "channels_implied": round(ln.each / per_channel, 1)})
    by_kind = {ln.kind: ln for ln in s.comm_lines if ln.kind != "nccl"}
    disp, p2p, ws, graphs = (by_kind[k] for k in ("dispatcher", "p2p", "workspace", "graph_pool"))
    terms = s.reserved_terms or {}
    return {
        "reserved_peak_bytes": round(reserved),
        "allocated_peak_bytes": round(s.peak_bytes),
        "allocator_holding_bytes": peak_gap(reserved, s.peak_bytes)["gap_bytes"],
        "allocator_holding_terms": {k: round(v) for k, v in terms.items()},
        "communicators": comms,
        "communicator_bytes": round(sum(c["bytes"] for c in comms)),
        "nccl_defaults": {"bytes_per_channel_and_peer": dict(NCCL_PROTOCOL_BYTES),
                          "note": "NCCL_BUFFSIZE (Simple), LL and LL128 buffers per channel and peer (NCCL docs, "
                                  "src/include/device.h); channels_implied = bytes each / their sum"},
        "dispatcher": {"name": disp.name, **_line_json(disp)},
        "pp_receive_buffers": _line_json(p2p),
        "gemm_workspaces": {"streams": round(ws.count), **_line_json(ws)},
        "graph_pools": {**_line_json(graphs), "note": GRAPH_POOL_NOTE},
        "attention_score_buffer_bytes": round(s.attention_score_buffer),
        "note": OUTSIDE_ALLOCATOR,
    }


def case_b_json(s: StageMemory, reserved: float, capacity: float, setup) -> dict:
    """The seed's case B for one stage, predicted: reserved at the limit while allocated is GiBs
    lower. The gap (reserved minus allocated), what drives it (the workload model's terms, each
    with the seed's cause) and what would shrink it. ``at_risk`` uses memtrace's thresholds
    (planner.memtrace.diagnose NEAR_LIMIT, GAP_B), so a snapshot and a prediction read alike."""
    measure = peak_gap(reserved, s.peak_bytes)  # memtrace's formula for a snapshot's gap
    gap = reserved - s.peak_bytes
    terms = s.reserved_terms or {}
    drivers = [{"term": k, "bytes": round(v), "cause": HOLDING_TERMS[k][0], "why": HOLDING_TERMS[k][1]}
               for k, v in sorted(terms.items(), key=lambda kv: -kv[1]) if v > 0]
    mem = setup.efficiency.memory
    workload = allocator_workload(mem, setup.assumptions) is not None
    shrink = []
    if workload:
        alt = s.peak_bytes * mem.allocator_fraction_expandable.value
        shrink.append({"lever": "expandable_segments", "gap_bytes": round(alt),
                       "how": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (explain --expandable-segments): "
                              "segments grow in place, so a transient spike leaves no whole segment behind "
                              f"(measured gap at most {mem.allocator_fraction_expandable.value:.0%} of allocated)"})
    if terms.get("stranded", 0) > 0:
        shrink.append({"lever": "fused_experts", "gap_bytes": round(gap - terms["stranded"]),
                       "how": "Transformer Engine's grouped GEMM and fused Adam write no per-expert temporaries"})
    if terms.get("pipeline", 0) > 0:
        shrink.append({"lever": "fewer_in_flight", "gap_bytes": None,
                       "how": "the stair grows with the activation peak: smaller mbs or vpp, or recompute, lower it"})
    if terms.get("recompute", 0) > 0:
        shrink.append({"lever": "less_recompute", "gap_bytes": round(gap - terms["recompute"]),
                       "how": "no recompute (if it fits) removes the re-created forward's stair"})
    shrink.append({"lever": "fewer_streams", "gap_bytes": None,
                   "how": f"{round(mem.gemm_workspace_streams.value)} streams run GEMMs (each its own workspace and "
                          "pool: the seed's stream split); keep communication on the main stream where little overlaps"})
    shrink.append({"lever": "bucket_sizes", "gap_bytes": None,
                   "how": "fixed, smaller DDP buckets (--ddp-bucket-size) keep gradient-reduce and optimizer-step "
                          "transients small and reusable"})
    return {
        **measure,
        "at_risk": bool(reserved >= (1 - NEAR_LIMIT) * capacity and gap >= GAP_B * capacity),
        "allocator": "caching allocator, workload model" if workload else (
            "explicit margin" if setup.assumptions.allocator_margin_bytes is not None else "measured fraction"),
        "drivers": drivers,
        "shrink": shrink,
        "estimate": True,
    }


def _moment_json(m: dict) -> dict:
    out = {"phase": m.get("phase"), "chunk": m.get("chunk"), "microbatch": m.get("microbatch"), "layer": m.get("layer"),
           "window": m.get("window")}
    if m.get("inflight") is not None:
        out["inflight_chunks"] = sum(m["inflight"])
    return out


def memory_report(setup, costs: Costs | None = None) -> MemoryReport:
    """The memory report of a resolved plan (``costs``: its composition, when already built)."""
    costs = costs or evaluate_batch(batch_of_setup(setup))
    ctx = costs.ctx
    stages = tuple(stage_from_costs(costs, r) for r in range(setup.deg.pp))
    host_needed = max(s.host_bytes for s in stages)
    return MemoryReport(setup, stages, ctx.allocator_fraction, ctx.cuda_context_bytes, ctx.capacity_bytes,
                        host_needed, setup.hw.host.host_memory_bytes.value)
