"""Memory, part two: what the micro-batches in flight hold: per-piece and per-chunk activations,
their peak over the schedule, CUDA-graph pools per captured layer in flight, and the activations
that wait in host memory under activation offload."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from planner.cost import activations as act
from planner.cost.arrays import Num
from planner.cost.pieces import (
    ChunkMemory, LayerMemory, PieceMemory, StackedPieces, chunks_from_pieces, graph_scope_bytes, pair_rise, peak_over_profiles,
)
from planner.cost.schedule import inflight_end_of_warmup, profile_microbatches
from planner.cost.schedules.inflight import MEGATRON_ORDERS, held_matrix
from planner.cost.terms.base import _column
from planner.cost.terms.blocks import RankTimes
from planner.specs.plan import CudaGraphs
from planner.specs.schedule import Schedule

if TYPE_CHECKING:
    from planner.cost.compose import Levers


FULL_ITERATION_INPUT_BYTES_PER_TOKEN = 3 * 8 + 4
"""Full-iteration graphs' static inputs per token: int64 tokens, labels and position ids and an fp32
loss mask (Megatron's GPT batch, megatron/training/utils.py get_batch_on_this_tp_rank), copied into
static buffers for every micro-batch of the step (megatron/core/full_cuda_graph.py StaticBufferLoader)."""


PAGED_STASH_CUDA_FACTOR = 1.2
"""The paged stash's CUDA buffer over the balanced load's stash (--moe-paged-stash-buffer-size-factor-cuda
1.2): what planner writes with cuda_graphs=full_iteration on a dropless MoE model
(planner/launchers/megatron/write.py STATIC_MOE_ARGS, the Megatron-Bridge 26.06+ MoE recipes';
Megatron-Core 0.19's default is 1.10, TransformerConfig.moe_paged_stash_buffer_size_factor_cuda)."""

EXPERT_RANK_CAPACITY_FACTOR = 1.5
"""The per-rank expert token capacity over the balanced load (--moe-expert-rank-capacity-factor 1.5,
written with the paged stash: write.STATIC_MOE_ARGS): the static row count of the experts' inputs
(megatron/core/transformer/moe/experts.py TEGroupedMLP: max_num_tokens, avg = max // factor)."""

STASHED_TERMS = frozenset({"moe.fc1_input", "moe.fc1_output", "moe.act_output"})
"""The saved tensors the paged stash takes (planner.cost.activations.moe_terms' names): those Transformer
Engine's fused grouped MLP saves and stamps ``grouped_tensor_scale_inv`` (fc1's input, its output
before the activation, fc2's input), the only ones PagedStashManager.on_save_for_backward pages
(megatron/core/transformer/moe/paged_stash.py); the router, norms and attention stay as they are."""


def is_moe_piece(piece) -> bool:
    """Whether a layer's piece is an MoE layer's: one setting's piece is ("moe", ...); a
    StackedPieces layer's (several settings side by side, the search's tables) is the tuple of its
    settings' pieces, all of one kind. (Reading only the first form left the tables without the
    paged stash: tests/test_cost_tables.py.)"""
    if not isinstance(piece, tuple) or not piece:
        return False
    head = piece[0]
    return head == "moe" if isinstance(head, str) else is_moe_piece(head)


def without_stash(chunk: ChunkMemory, stash: Num, capacity: float, memo: dict | None = None) -> ChunkMemory:
    """``chunk`` with each MoE layer's stashed tensors (``stash`` bytes at the balanced load) moved out
    of its kept bytes into the stash buffer, and their static-shape copies as transients: a layer's
    forward saves them at the capacity's row count until its group commits them to the pages
    (paged_stash_group_commit -> stash_paged_tensors), and its backward reloads them into
    capacity-sized tensors (reload_from_stash), so both transients grow by ``capacity`` x ``stash``.
    ``memo``: shared by the calls for one rank's chunks (one ``stash``), the numbers of each MoE
    piece (LayerMemory.piece names them) computed once, not per layer."""
    memo = {} if memo is None else memo
    out = []
    for layer in chunk.layers:
        piece = layer.piece
        if is_moe_piece(piece):
            nums = memo.get(piece)
            if nums is None:
                nums = memo[piece] = (layer.kept - stash, layer.fwd_transient + capacity * stash,
                                      layer.bwd_transient + capacity * stash, layer.full - stash)
            layer = LayerMemory(layer.name, nums[0], nums[1], nums[2], nums[3], piece)
        out.append(layer)
    return ChunkMemory(chunk.index, tuple(out))


def stash_only(chunk: ChunkMemory, stash: Num) -> ChunkMemory:
    """The chunk's stashed bytes alone (each MoE layer ``stash``, nothing else, no transients): the
    in-flight stash PagedStashManager counts on save and releases on reload (its
    max_avg_tokens_across_vp_stages, the peak the CUDA buffer is sized from)."""
    layers = tuple(LayerMemory(layer.name, stash if is_moe_piece(layer.piece) else 0.0, 0.0, 0.0, 0.0, layer.piece)
                   for layer in chunk.layers)
    return ChunkMemory(chunk.index, layers)


_UNIT_STASH_PEAKS: dict[tuple, np.ndarray] = {}
"""The paged stash's scan with one byte per MoE layer, by (pp, vpp, rank, the rank's chunks' layer
pieces, walked schedules' columns, micro-batch counts): InflightMemory._stash_peak."""
_UNIT_SCANS: dict[tuple, np.ndarray] = {}
"""One column of that scan per (pp, vpp, rank, MoE layers, schedule, micro-batch count, offload):
InflightMemory._schedule_peak with ``unit``."""
_UNIT_STASH_PEAKS_MAX = 4096
"""Entries kept before the cache starts over (a process that costs many models stays bounded)."""


class InflightMemory(RankTimes):
    """Activation memory over the schedule (reads the rank times' weight-gradient bytes where the
    schedule splits the backward)."""

    def pieces(self) -> PieceMemory:
        """Per-micro-batch memory of the repeated pieces (a decoder layer of each kind, MTP, the
        head) for the batch's keys under its (first variant's) levers."""
        return self._pieces(self.lv)

    def _pieces(self, lv: Levers):
        whole = self.ctx.piece_memory(lv)
        return self._memo("pieces", lv.recompute, lv.precision, lv.ep_overlap,
                          fn=lambda: whole.sliced(self.ctx.keys.pk_of[self.batch.key_rows]))

    def chunks(self, r: int) -> tuple[ChunkMemory, ...]:
        """Per-micro-batch memory of each chunk (virtual stage) of rank ``r``, every plan's."""
        key = self._memory_levers(r)
        return self._memo("chunks", r, key, self.lv.offload_activations, self.paged_stash(), fn=lambda: self._chunks(r))

    def paged_stash(self) -> bool:
        """Whether the plan runs the MoE paged stash: a full-iteration graph of a dropless MoE model
        needs it (planner.search.space.STATIC_MOE_FEATURES; the launch writes it with the graph)."""
        return self.lv.cuda_graphs.kind == "full_iteration" and self.ctx.model.is_moe

    def stash_layer(self) -> np.ndarray:
        """Bytes one MoE layer stashes per micro-batch at the balanced load (the stash counts
        avg_num_tokens, the capacity's rows over its factor: TEGroupedMLP), every plan's: the
        :data:`STASHED_TERMS` recompute keeps, in their stored precision."""
        ctx = self.ctx

        def over_piece_keys(v):
            pm = ctx.piece_memory(v)
            sh = dataclasses.replace(pm.sh, imbalance=1.0)
            terms = tuple(t for t in act.layer_terms(pm.model, sh, "moe") if t.name in STASHED_TERMS)
            kept = act.kept_bytes(terms, full=v.recompute.kind == "full", drop=pm.drop, fp8=pm.fp8, fp4=bool(pm.sh.fp4))
            return _column(kept, len(ctx.keys.pk_first))

        def one(v):
            # Over the context's piece keys, once per (recompute, precision, EP overlap), the
            # levers piece_memory reads: the C table's batches list every dispatcher beside them
            # and each layout asks again (7,800 layer_terms calls in the default search, 1.2 s).
            whole = ctx.cached(("stash_layer", v.recompute, v.precision, v.ep_overlap), lambda: over_piece_keys(v))
            return whole[ctx.keys.pk_of[self.batch.key_rows]]
        key = self._interned(("pieces",), lambda: self._row("recompute", "precision", "ep_overlap"))
        return self._memo("stash_layer", key, fn=lambda: self._per_variant(one))

    def _chunks(self, r: int) -> tuple[ChunkMemory, ...]:
        chunks = self._eager_chunks(r)
        if not self.paged_stash():
            return chunks
        stash = self.stash_layer()
        memo: dict = {}
        return tuple(without_stash(c, stash, EXPERT_RANK_CAPACITY_FACTOR, memo) for c in chunks)

    def stash_peak(self, r: int) -> np.ndarray:
        """The most stashed bytes rank ``r`` holds at once over its schedule (0 without the paged
        stash): its chunks' stash alone (:func:`stash_only`) over the same in-flight vectors and
        overlapped steps as the activations."""
        if not self.paged_stash():
            return _column(0.0, self.n)
        key = self._memory_levers(r)
        return self._memo("stash_peak", r, key, fn=lambda: self._stash_peak(r, self.stash_layer()))

    def _stash_peak(self, r: int, stash: np.ndarray) -> np.ndarray:
        # Every number of the stash's scan (held vectors times kept bytes, the combined 1F1B's pair
        # rises, maxima) is a whole multiple of one layer's stash, so the scan of one-byte stashes
        # times the stash is the same float where the stash is whole bytes (sums exact below 2^52).
        # The one-byte scan depends on the rank's layer pieces and schedules only, not on the
        # plan's bytes: the plans a search walks (160 memory reports in the default search, a few
        # layouts among them) share it (_UNIT_STASH_PEAKS).
        chunks = self._eager_chunks(r)
        b = self.batch
        # stash_only(c, 1.0) reads of a layer only whether it is an MoE layer.
        key = (b.pp, b.vpp, r, tuple((c.index, tuple(is_moe_piece(layer.piece) for layer in c.layers)) for c in chunks),
               tuple((sched, sel.tobytes()) for sched, sel in self.schedule_columns()),
               b.micro_batches.dtype.str, b.micro_batches.tobytes())
        unit = _UNIT_STASH_PEAKS.get(key)
        if unit is None:
            if len(_UNIT_STASH_PEAKS) >= _UNIT_STASH_PEAKS_MAX:
                _UNIT_STASH_PEAKS.clear()
            unit = _UNIT_STASH_PEAKS[key] = self._schedule_peak(r, tuple(stash_only(c, 1.0) for c in chunks),
                                                                offload=False, wgrad=False, unit=key[:4])
        out = stash * unit
        if np.array_equal(stash, np.round(stash)) and bool((out < 2.0 ** 52).all()):
            return out
        return self._schedule_peak(r, tuple(stash_only(c, stash) for c in chunks), offload=False, wgrad=False)

    def _eager_chunks(self, r: int) -> tuple[ChunkMemory, ...]:
        # Read twice per rank with the paged stash (its scan and the activations' chunks).
        key = self._memory_levers(r)
        return self._memo("eager_chunks", r, key, self.lv.offload_activations, fn=lambda: self._build_eager_chunks(r))

    def _build_eager_chunks(self, r: int) -> tuple[ChunkMemory, ...]:
        variants = self.batch.variants
        fulls = tuple(v.memory_full_layers(r) for v in variants)
        # Layer-level offload is one way of offloading activations: a plan without offload keeps them.
        host = self.ctx.assumptions.offload_layers if self.lv.offload_activations else 0
        if len(variants) == 1:
            return chunks_from_pieces(self.pieces(), self.ctx.model, self.batch.layout, r, fulls[0], host)
        key = self._interned(("pieces",), lambda: self._row("recompute", "precision", "ep_overlap"))
        stacked = self._memo("stacked_pieces", key, fn=lambda: StackedPieces(
            [self._pieces(v) for v in variants], self.batch.n_keys))
        return chunks_from_pieces(stacked, self.ctx.model, self.batch.layout, r, fulls, host)

    def activation_peak(self, r: int) -> np.ndarray:
        """Highest activation + transient bytes of rank ``r`` over its schedule (exact maximum over
        the distinct in-flight vectors before each forward and backward)."""
        key = self._memory_levers(r)
        return self._memo("act_peak", r, key, self.lv.offload_activations, self.paged_stash(),
                          fn=lambda: self._activation_peak(r))

    def _activation_peak(self, r: int) -> np.ndarray:
        return self._schedule_peak(r, self.chunks(r), self.lv.offload_activations, wgrad=True)

    def _schedule_peak(self, r: int, chunks: tuple[ChunkMemory, ...], offload: bool, wgrad: bool,
                       unit: tuple | None = None) -> np.ndarray:
        """Highest held + rise bytes of ``chunks`` on rank ``r`` over its schedule; ``wgrad``: with
        the bytes held between input and weight gradient where the schedule splits the backward
        (else none: the stash keeps nothing for W). ``unit``: every plan's chunks hold the same
        bytes (the one-byte stash scan), named by this key (pp, vpp, rank, the chunks' MoE
        layers): the plans of one schedule and micro-batch count share one scan, kept across
        batches (_UNIT_SCANS; the C table's batches hold 42 variants of every key, and each
        layout's batches ask again)."""
        b, n = self.batch, self.n
        width = 1 if unit is not None else n  # a unit scan's plans are alike: one column stands for all
        out = np.empty(n)
        rest = np.ones(n, dtype=bool)
        arrays: dict = {}

        def inputs(sched):
            """(held, fwd, bwd, pair rises) of the chunks under ``sched`` (None: Megatron's orders
            without a walked schedule), formed on first need (a unit scan seen before needs none)."""
            if sched not in arrays:
                if "kfb" not in arrays:
                    arrays["kfb"] = _chunk_rows(chunks, width)
                kept, fwd, bwd = arrays["kfb"]
                # The schedule's own in-flight vectors (planner.cost.schedules.inflight), with the
                # bytes held between input and weight gradient where it splits the backward.
                held = np.concatenate([kept, self.wgrad_kept(r) if wgrad else np.zeros_like(kept)]) \
                    if sched is not None and sched.splits_backward else kept
                pairs = _pair_rises(chunks, width) if sched is not None and sched.order == "combined" else None
                arrays[sched] = (held, fwd, bwd, pairs)
            return arrays[sched]

        def scan(cols, mi: int, sched=None):
            if unit is None:
                held, fwd, bwd, pairs = inputs(sched)
                return peak_over_profiles(held[:, cols], fwd[:, cols], bwd[:, cols], b.pp, b.vpp, mi, r, offload,
                                          schedule=sched, pair_rises=_select(pairs, cols))
            key = (unit, sched, mi, offload)
            hit = _UNIT_SCANS.get(key)
            if hit is None:
                if len(_UNIT_SCANS) >= _UNIT_STASH_PEAKS_MAX:
                    _UNIT_SCANS.clear()
                held, fwd, bwd, pairs = inputs(sched)
                hit = _UNIT_SCANS[key] = peak_over_profiles(held, fwd, bwd, b.pp, b.vpp, mi, r, offload,
                                                            schedule=sched, pair_rises=pairs)
            return hit

        # Plans whose schedules show the same in-flight vectors share one matrix product: under
        # Megatron's orders, those whose micro-batch counts cap to the same count.
        m = self._memo("profile_m", len(b.variants), fn=lambda: profile_microbatches(b.pp, b.vpp, b.micro_batches))
        for sched, sel in self.schedule_columns():
            rest[sel] = False
            per = m[sel] if sched.order in MEGATRON_ORDERS else b.micro_batches[sel]
            for mi in np.unique(per):
                cols = sel[per == mi]
                out[cols] = scan(cols, int(mi), sched)
        if not rest.all():
            for mi in np.unique(m[rest]):
                cols = np.flatnonzero(rest & (m == mi))
                out[cols] = scan(cols, int(mi))
            return out
        for mi, cols in self._buckets(m, "profile_m"):
            out[cols] = scan(cols, mi)
        return out

    def graph_pool(self, r: int) -> Num:
        """CUDA-graph static buffers of one GPU of rank ``r`` (an estimate:
        planner.cost.pieces.GRAPH_POOL_SOURCE): per captured decoder layer of each of its chunks,
        those of every micro-batch of the chunk in flight at the rank's peak. 0 without graphs."""
        graphs = self.lv.cuda_graphs
        if not graphs:
            return 0.0
        key = self._memory_levers(r)
        return self._memo("graph_pool", r, graphs, key, fn=lambda: self._graph_pool(r, graphs))

    def _graph_pool(self, r: int, graphs: CudaGraphs) -> np.ndarray:
        ctx, b = self.ctx, self.batch
        if graphs.kind == "full_iteration":
            # One graph of the whole forward-backward (megatron/core/full_cuda_graph.py
            # FullCudaGraphWrapper): no per-layer static buffers; its intermediates are the
            # activations eager holds, in the graph's pool; static are only the step's inputs
            # (StaticBufferLoader: every micro-batch's tokens, labels, positions, loss mask).
            # On an MoE model the paged stash's CUDA buffer too, allocated once at the second step
            # and referenced by the graph (megatron/core/transformer/moe/paged_stash.py
            # paged_stash_reset -> allocate_stash_buffers: pages for factor x the peak in-flight
            # stash at the balanced load), held through the whole step, optimizer included.
            mbs = np.tile(ctx.keys.col["mbs"][b.key_rows], len(b.variants))  # columns: variant-major
            inputs = _column(b.micro_batches * mbs * ctx.job.seq_len * FULL_ITERATION_INPUT_BYTES_PER_TOKEN, self.n)
            return inputs + PAGED_STASH_CUDA_FACTOR * self.stash_peak(r)
        sh = ctx.shard(self.lv, b.rows, True)
        per_slot = {kind: graph_scope_bytes(ctx.model, sh, kind, graphs) for kind in set(ctx.model.layer_kinds)}
        held = self._memo("end_of_warmup", r, self._row("ep_overlap"), fn=lambda: self._end_of_warmup(r))
        total = np.zeros(self.n)
        for c, stage in enumerate(b.layout.rank_stages(r)):
            for i in stage.layers:
                total = total + held[:, c] * per_slot[ctx.model.layer_kinds[i]]
        return total

    def host_activation_bytes(self, r: int) -> np.ndarray:
        """With activation offload, the activations of the chunks in flight at the end of the
        warm-up wait in host memory (under layer-level offload, those of its offloaded layers)."""
        counts = self._memo("end_of_warmup", r, self._row("ep_overlap"), fn=lambda: self._end_of_warmup(r))
        return sum(counts[:, c] * _column(self.offloaded_kept(ch), self.n) for c, ch in enumerate(self.chunks(r)))

    def offloaded_kept(self, chunk: ChunkMemory) -> Num:
        """What activation offload moves to the host of one micro-batch of ``chunk``: its layers'
        host bytes under layer-level offload (Assumptions.offload_layers), else all it keeps."""
        return chunk.host_kept if self.ctx.assumptions.offload_layers and self.lv.offload_activations else chunk.kept

    def _end_of_warmup(self, r: int) -> np.ndarray:
        b = self.batch
        out = np.zeros((self.n, b.layout.chunks_per_rank))
        for m, cols in self._buckets(b.micro_batches, "m"):
            if b.layout.chunks_per_rank == b.vpp:
                out[cols] = inflight_end_of_warmup(b.pp, b.vpp, m, r)
            for sched, sel in self.schedule_columns():
                # No warm-up to speak of in the walked schedules: the most chunks the rank holds.
                out[np.intersect1d(cols, sel)] = most_held(sched, b.pp, b.vpp, m, r)
        return out


def _pair_rises(chunks: tuple[ChunkMemory, ...], n: int):
    """(f, b) -> every plan's rise of the combined 1F1B's overlapped step of chunk f's forward with
    chunk b's backward (planner.cost.pieces.pair_rise), each pair once."""
    memo: dict[tuple[int, int], np.ndarray] = {}
    # A rank's chunks repeat their layers (V3's interleaved layouts: dozens of chunks of one MoE
    # layer each), and a pair's rise depends only on its two chunks' runs, whose pieces name
    # their numbers (LayerMemory.piece; the piece caches read them so): pairs of equal chunks
    # share one pair_rise (the default search asked 39,424 pairs, 6,846 of them distinct).
    same: dict[tuple, np.ndarray] = {}
    names = [_runs_name(c) for c in chunks]
    # A batch of one plan (a memory report) runs pair_rise's loop on Python floats rather than on
    # 1-element arrays: the same IEEE operations, some ten times faster.
    scalar = [c.at(0) for c in chunks] if n == 1 else chunks

    def rise(f: int, b: int) -> np.ndarray:
        hit = memo.get((f, b))
        if hit is None:
            key = (names[f], names[b])
            hit = same.get(key)
            if hit is None:
                hit = same[key] = _column(pair_rise(scalar[f], scalar[b]), n)
            memo[f, b] = hit
        return hit
    return rise


def _chunk_rows(chunks: tuple[ChunkMemory, ...], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept, forward rise, backward rise) of each chunk, (chunks, n) arrays. Each reads only the
    chunk's runs: chunks of equal runs (_runs_name; V3's interleaved layouts repeat one MoE layer
    per chunk dozens of times) are summed once."""
    seen: dict[tuple, tuple] = {}
    rows = []
    for c in chunks:
        name = _runs_name(c)
        hit = seen.get(name)
        if hit is None:
            hit = seen[name] = (_column(c.kept, n), _column(c.fwd_rise, n), _column(c.bwd_rise, n))
        rows.append(hit)
    kept, fwd, bwd = (np.array([row[i] for row in rows]) for i in range(3))
    return kept, fwd, bwd


def _runs_name(chunk: ChunkMemory) -> tuple:
    """What a chunk's pair rises read of it: its runs, each as its piece (the numbers' identity;
    a layer without one stands for itself) and its count."""
    return tuple((layer.piece if layer.piece is not None else id(layer), count) for layer, count in chunk.runs())


def _select(pairs, cols: np.ndarray):
    """``pairs`` (f, b) -> every plan's pair rise, narrowed to the columns ``cols`` (None stays None)."""
    if pairs is None:
        return None
    picked: dict[int, np.ndarray] = {}

    def pick(f: int, b: int) -> np.ndarray:
        # Pairs of equal chunks share one array (_pair_rises): narrowed once.
        whole = pairs(f, b)
        hit = picked.get(id(whole))
        if hit is None:
            hit = picked[id(whole)] = whole[cols]
        return hit
    return pick


def most_held(sched: Schedule, pp: int, vpp: int, m: int, rank: int) -> tuple[int, ...]:
    """The in-flight chunks per chunk of a walked schedule where the rank holds the most of them
    (activations only, not what waits for W; the first such moment)."""
    n = sched.chunks(vpp)
    if sched.order == "combined":
        m = int(profile_microbatches(pp, vpp, m))  # the same vectors (inflight.profiles)
    held = held_matrix(sched, pp, vpp, m, rank)[2][:, :n]
    return tuple(held[int(np.argmax(held.sum(axis=1)))].tolist())
