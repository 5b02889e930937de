"""How long the kernels of :mod:`planner.cost.flops` take on one GPU.

Three rate models, one per kernel class:

- GEMMs: a roofline, ``max(FLOPs / (peak * eta), bytes / HBM)``, with ``eta`` the large-shape
  rate of the precision recipe (MAMF, stas00/ml-engineering) times a shape factor: each dimension
  d keeps x / (1 + x), x = (d / d0)^p, of it (tile quantization and SM fill for thin TP shards and few tokens per
  expert, pipeline fill and epilogue for small K), fit to GEMMs measured on an H200; where the
  generation names its output tile (Blackwell's 256-wide two-SM tiles), M and N also pay the empty
  part of their last tile. FP8 speeds up exactly the GEMMs that run in FP8.
  The backward's data-gradient and weight-gradient GEMMs are costed with their own shapes
  (dgrad: M x K over N; wgrad: K x N over M, accumulated in fp32 as Megatron's
  gradient-accumulation fusion does).
- Fused attention: FLOPs over the flash-attention rate of the generation, which approaches its
  asymptote as keys per query grow (kernel_keys / (kernel_keys + half_keys)); the backward runs
  2.5x the forward FLOPs at its own rate (FlashAttention-2/3 papers).
- Memory-bound kernels: bytes over the achievable HBM bandwidth; the bytes PyTorch moves on its
  non-vectorized element-wise path (dtype-converting copies, broadcast operands, mixed-dtype
  arithmetic: the local spec's unfused softmax and gradient accumulation) at the generation's
  ``unvectorized_fraction`` of it.

Every kernel also pays a fixed per-kernel gap (launch and tail). Recompute repeats the forward of
the kernels whose Megatron module is recomputed, inside the backward.

The host issues every kernel (``host_launch_s`` each) and, on the local spec, runs each Megatron
linear layer's Python (``linear_host_fwd_s`` / ``linear_host_bwd_s`` per call). A pass takes the
longer of the GPU's kernel time and the host's issue time; a kernel after which the host reads a
size back from the GPU (``Stream.host_sync``) splits the pass, since the host cannot run ahead
across it: the parts add up, each the longer of its GPU and host time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from planner.cost.arrays import Num, any_true, ceil, hashable, maximum, minimum, where
from planner.cost.flops import (BF16, FP8, FP32, NVFP4, FusedAttention, Gemm, Kernel, ModelShape, Shard, Stream,
                                block_kernels)
from planner.cost.rates import Rates

# Kernel-count for a grouped GEMM of ``count`` experts: Transformer Engine's GroupedLinear runs
# one cuBLAS call per expert spread over several streams, so their gaps overlap.
GROUPED_GEMM_STREAMS = 4


# Shape at which the measured ceiling holds: the MAMF benchmarks' best shapes run at the rate of
# large GEMMs (on an H200, 8192^3 ran at 784 TFLOPS against a MAMF of 795-803).
LARGE_GEMM = (8192, 8192, 8192)


def dim_factor(d: Num, half_dim: Num, exponent: Num) -> Num:
    """Share of the rate one GEMM dimension of size d keeps: x / (1 + x), x = (d / half_dim)^p."""
    x = (d / half_dim) ** exponent
    return x / (1.0 + x)


def tile_fill(d: Num, tile: int) -> Num:
    """Share of the computed output tiles along one output dimension of size d that holds data:
    d / (tiles x tile). A kernel computes whole tiles, so a dimension that is not a multiple of the
    tile pays for the empty part of its last one (2880 = 11.25 x 256 computes 12 tiles: 0.9375).
    Dimensions under one tile keep 1: libraries pick smaller tiles there, and the smooth curve of
    :func:`dim_factor` already prices them. ``tile`` 0: no tile term."""
    if not tile:
        return 1.0
    return where(d >= tile, d / (ceil(d / tile) * tile), 1.0)


def shape_factor(m: Num, n: Num, k: Num, half_dim: Num, exponent: Num, tile: int = 0, k_depth: float = 1.0) -> Num:
    """Fraction of the large-shape GEMM rate kept at shape (m, n, k), relative to a large GEMM
    (capped at 1). Fit to 18 bf16 shapes measured on an H200 (tests/fixtures/
    h200_kernel_rates.json: thin TP shards, 64-1024 tokens per expert, K of 128-1536 for weight
    gradients): every shape within 10%. Where the generation names its output tile
    (ComputeEfficiency.gemm_tile), the output dimensions M and N also pay :func:`tile_fill`; the
    reference shape (8192^3) fills its tiles. ``k_depth``: K counts as K / k_depth, in the
    reference shape too (ComputeEfficiency.fp8_k_depth: an FP8 GEMM's K loop fills its pipeline
    like a BF16 one of half the depth)."""
    f = dim_factor(m, half_dim, exponent) * dim_factor(n, half_dim, exponent) * dim_factor(k / k_depth, half_dim, exponent)
    big: Num = 1.0
    for i, d in enumerate(LARGE_GEMM):
        big *= dim_factor(d / k_depth if i == 2 else d, half_dim, exponent)
    return minimum(1.0, f / big) * tile_fill(m, tile) * tile_fill(n, tile)


SPLIT_ACCUMULATOR: dict[str, tuple[str, ...]] = {
    # Transformer Engine on Hopper: per-tensor scaling (DelayedScaling, Float8CurrentScaling) runs
    # the forward GEMM with fast accumulation and the data- and weight-gradient GEMMs with the split
    # accumulator (transformer_engine/common/recipe: fp8_gemm_fprop/dgrad/wgrad MMParams; the
    # module's _2X_ACC_FPROP/DGRAD/WGRAD = False/True/True); torchao's Float8LinearConfig the same
    # (gemm_config_output use_fast_accum=True, grad_input and grad_weight False); block scaling
    # needs the split accumulator in all three (Float8BlockScaling: "FP8 block scaling requires
    # split accumulation").
    "tensorwise": ("dgrad", "wgrad"),
    "delayed": ("dgrad", "wgrad"),
    "rowwise": ("dgrad", "wgrad"),
    "blockwise": ("fwd", "dgrad", "wgrad"),
}
"""FP8 recipe -> the GEMM passes it runs with the split accumulator (ComputeEfficiency.fp8_split_accumulator)."""


def is_fp8(recipe: str) -> bool:
    """An FP8 GEMM recipe (not bf16/fp16, not NVFP4)."""
    return recipe not in ("bf16", "fp16", "nvfp4")


def gemm_efficiency(m: Num, n: Num, k: Num, recipe: str, rates: Rates, count: int = 1, split: bool = False) -> Num:
    """Achieved fraction of the recipe's dense peak for a GEMM of this shape inside a training
    step: the large-shape ceiling of the recipe (MAMF or calibration), the shape factor (K by the
    generation's FP8 depth for FP8 recipes), the split accumulator's rate where ``split``, the
    sustained fraction and the sensitivity scale (capped at 1). ``count`` GEMMs of a grouped GEMM
    run one after another, each at its own shape."""
    ceiling = rates.ceiling(recipe)
    fp8 = is_fp8(recipe)
    shape = shape_factor(m, n, k, rates.gemm_half_dim, rates.gemm_shape_exponent, rates.gemm_tile,
                         rates.fp8_k_depth if fp8 else 1.0)
    acc = rates.fp8_split_accumulator if split and fp8 else 1.0
    return minimum(1.0, ceiling * shape * acc * rates.gemm_scale * rates.sustained)


def pass_efficiency(m: Num, n: Num, k: Num, count: int, recipe: str, rates: Rates, issue: str = "grouped",
                    split: bool = False) -> Num:
    """:func:`gemm_efficiency` of one pass of ``count`` matrices issued as ``issue``. One
    strided-batched kernel (torch.bmm/baddbmm) schedules the tiles of all its matrices together: a
    thin output dimension no longer leaves SMs idle, so the shape factor sees the batch folded into
    the thinner of M and N (a small K still pays its pipeline fill). Profiled on an H200: the
    unfused attention's batched GEMMs and the projections together ran at 750-770 TFLOPS (0.76-0.78
    of the BF16 peak)."""
    if issue == "batched":
        thin_m = m <= n
        return gemm_efficiency(where(thin_m, m * count, m), where(thin_m, n, n * count), k, recipe, rates, split=split)
    return gemm_efficiency(m, n, k, recipe, rates, count, split)


def _gemm_pass(m: Num, n: Num, k: Num, count: int, recipe: str, in_bytes: Num, out_bytes: Num, rates: Rates,
               issue: str = "grouped", split: bool = False) -> Num:
    flops = 2.0 * m * n * k * count
    eff = pass_efficiency(m, n, k, count, recipe, rates, issue, split)
    if issue == "batched":
        kernels = 1
    else:
        kernels = count if issue == "sequential" else maximum(1, count // GROUPED_GEMM_STREAMS)
    t_math = flops / (rates.peak(recipe) * eff)
    t_mem = count * (in_bytes * (m * k + k * n) + out_bytes * m * n) / rates.hbm_bw
    return maximum(t_math, t_mem) + kernels * rates.kernel_overhead_s


def gemm_recipe(g: Gemm, fp8: bool, rates: Rates, fp4: bool = False) -> str:
    """'bf16', or the recipe of the GEMMs quantization applies to (Gemm.fp8: the linear layers;
    attention's batched GEMMs, the router and the output head stay bf16): 'nvfp4' where the plan
    runs NVFP4 (Megatron-Core fp4_utils.get_fp4_context wraps the same TE linears FP8 would), else
    the hardware's FP8 recipe."""
    if fp8 and g.fp8 and fp4:
        return "nvfp4"
    if fp8 and g.fp8 and rates.fp8_recipe:
        return rates.fp8_recipe
    return "bf16"


def gemm_times(g: Gemm, fp8: bool, rates: Rates, fp4: bool = False) -> tuple[Num, Num, Num]:
    """(forward, data-gradient, weight-gradient) seconds of one GEMM kernel entry."""
    recipe = gemm_recipe(g, fp8, rates, fp4)
    inb = NVFP4 if recipe == "nvfp4" else FP8 if recipe != "bf16" else BF16
    split = SPLIT_ACCUMULATOR.get(recipe, ())
    fwd = _gemm_pass(g.m, g.n, g.k, g.count, recipe, inb, BF16, rates, g.issue, "fwd" in split)
    dgrad = _gemm_pass(g.m, g.k, g.n, g.count, recipe, inb, BF16, rates, g.issue, "dgrad" in split)
    # Weight gradient accumulates into the fp32 main-grad buffer (read and write), or writes a bf16
    # gradient that a separate kernel adds to it (no gradient-accumulation fusion).
    wgrad = _gemm_pass(g.k, g.n, g.m, g.count, recipe, inb, 2 * FP32 if g.fused_wgrad else BF16, rates, g.issue,
                       "wgrad" in split)
    return fwd, dgrad, wgrad


# Head dim of the fused-attention measurements behind the flash fractions (FlashAttention-3 and
# cuDNN at head dim 128): 128 + 128 for the query-key and value dims.
FLASH_REFERENCE_DIMS = 128 + 128


def exp_share_factor(qk_dim: int, v_dim: int, rates: Rates, backward: bool = False) -> float:
    """Time per FLOP of a fused attention pass against head dim 128. Each score costs its matmul
    FLOPs (2 (qk + v) forward, 5 (qk + v) backward) plus one softmax exponential worth
    ``softmax_exp_flops`` tensor-core FLOPs, not overlapped with them: on one H200 (cuDNN,
    tests/fixtures/h200_attention_head_dims.json) head dim 64 runs its forward at 0.71-0.74 and its
    backward at 0.81-0.83 of head dim 128's rate, where this gives 0.75 and 0.86. Larger head dims
    are not credited: they gained 4-8 % there (the exponentials' share would give 13-20 %) and
    their backward lost 20-35 %, a kernel effect this does not hold."""
    x = rates.softmax_exp_flops
    if not x:
        return 1.0
    per_dim = 5.0 if backward else 2.0  # matmul FLOPs per score and unit of qk + v
    f = (1.0 + x / (per_dim * (qk_dim + v_dim))) / (1.0 + x / (per_dim * FLASH_REFERENCE_DIMS))
    return max(1.0, f)


def window_tile_keys(a: FusedAttention, rates: Rates) -> float | None:
    """Keys per query a sliding-window kernel computes: the whole key tiles each query tile's rows
    touch, ceil((w + tile - 1) / tile) x tile (a 128-key window on 128-key tiles computes 256);
    None where the layer has no window or the generation has no window constants."""
    if a.causal_keys is None or not rates.flash_key_tile or rates.flash_window_half_keys is None:
        return None
    t = rates.flash_key_tile
    return float(ceil((a.keys_per_query + t - 1) / t) * t)


def attention_times(a: FusedAttention, rates: Rates) -> tuple[Num, Num]:
    """(forward, backward) seconds of a fused attention kernel. A sliding-window layer computes
    whole key tiles (:func:`window_tile_keys`) at the window kernel's own half-rate point, where
    the generation has them (ComputeEfficiency.flash_window_half_keys: cuDNN's window kernels ran
    at 0.07-0.08 of GB200's peak, well under what the keys alone give). In FP8
    (Assumptions.fp8_attention) each pass is the BF16 kernel's time over the generation's measured
    speed-up; where that FP8 backward does not skip masked tiles, a sliding-window layer's backward
    computes its whole causal row (cudnn-frontend's gpt-oss benchmark on GB200: BF16 backward time
    linear in the sequence, FP8 and MXFP8 quadratic)."""
    tiled = window_tile_keys(a, rates)
    share = tiled / a.keys_per_query if tiled is not None else 1.0  # computed over attended keys
    window = rates.flash_window_half_keys
    half_fwd, half_bwd = window if tiled is not None and window is not None else (rates.flash_half_keys,) * 2
    fwd = (a.flops * share * exp_share_factor(a.qk_dim, a.v_dim, rates)
           / (_flash_rate(a.kernel_keys * share, rates, half_fwd) * rates.flash_fwd))
    # The backward's share of the causal row it computes: the whole row where FP8 does not skip.
    row = (a.causal_keys / a.keys_per_query if a.fp8 and rates.fp8_attention is not None
           and rates.fp8_attention_window_full and a.causal_keys else None)
    if row is not None:
        share, half_bwd = row, rates.flash_half_keys
    bwd_keys = a.kernel_keys * share
    bwd_flops = 2.5 * a.flops * share
    bwd = (bwd_flops * exp_share_factor(a.qk_dim, a.v_dim, rates, backward=True)
           / (_flash_rate(bwd_keys, rates, half_bwd) * rates.flash_bwd))
    if a.fp8 and rates.fp8_attention is not None:
        fwd, bwd = fwd / rates.fp8_attention[0], bwd / rates.fp8_attention[1]
    return fwd + rates.kernel_overhead_s, bwd + 2 * rates.kernel_overhead_s


def _flash_rate(kernel_keys: Num, rates: Rates, half_keys: float | None = None) -> Num:
    """FLOP/s of the fused attention kernel at its asymptotic fraction 1, for rows of this many keys
    (half rate at ``half_keys``, by default the profile's ``flash_half_keys``)."""
    half = rates.flash_half_keys if half_keys is None else half_keys
    return rates.peak_bf16 * rates.sustained * kernel_keys / (kernel_keys + half)


def stream_times(s: Stream, rates: Rates) -> tuple[Num, Num]:
    """(forward, backward) seconds of a memory-bound kernel: its bytes over the streaming
    bandwidth, the share on PyTorch's non-vectorized path over ``unvectorized_fraction`` of it."""
    slow_bw = rates.hbm_bw * rates.unvectorized_fraction
    fwd = (s.bytes_fwd - s.slow_fwd) / rates.hbm_bw + s.slow_fwd / slow_bw
    bwd = (s.bytes_bwd - s.slow_bwd) / rates.hbm_bw + s.slow_bwd / slow_bw
    return fwd + s.kernels * rates.kernel_overhead_s, bwd + s.launches_bwd * rates.kernel_overhead_s


@dataclass(frozen=True)
class ClassTimes:
    """GPU seconds of a block's kernels by class (GEMM, attention, memory-bound) and pass, for one
    micro-batch on one GPU: what a block's kernel sums (:class:`KernelSums`) and its time under a
    recompute setting (:class:`BlockTime`) share."""

    gemm_fwd: Num
    gemm_bwd: Num
    attn_fwd: Num
    attn_bwd: Num
    mem_fwd: Num
    mem_bwd: Num

    @property
    def gpu_fwd(self) -> Num:
        return self.gemm_fwd + self.attn_fwd + self.mem_fwd

    @property
    def gpu_bwd(self) -> Num:
        """The backward's own kernels (no recomputed forward)."""
        return self.gemm_bwd + self.attn_bwd + self.mem_bwd


@dataclass(frozen=True)
class BlockTime(ClassTimes):
    """Seconds of one block (a decoder layer, the embedding, the head, an MTP module) for one
    micro-batch on one GPU, by kernel class and pass (:class:`ClassTimes`); recompute is the forward
    work repeated in the backward. FLOPs are per GPU for the same micro-batch."""

    recompute: Num
    host_fwd: Num
    """Time the block waits for the host beyond its GPU work in the forward (host-bound, or host
    work a host sync keeps from overlapping the GPU's)."""
    host_bwd: Num
    hw_flops_fwd: Num
    hw_flops_bwd: Num
    recompute_flops: Num
    gemms: tuple[tuple[str, Num, Num, Num], ...]
    """(name, forward, dgrad, wgrad) seconds per GEMM, for communication overlap."""

    @property
    def fwd(self) -> Num:
        return self.gpu_fwd + self.host_fwd

    @property
    def bwd(self) -> Num:
        """Backward including the recomputed forward work."""
        return self.gpu_bwd + self.recompute + self.host_bwd

    def gemm(self, name: str) -> tuple[Num, Num, Num]:
        for n, f, d, w in self.gemms:
            if n == name:
                return f, d, w
        return 0.0, 0.0, 0.0

    def attention_fwd_bwd(self) -> tuple[Num, Num]:
        return self.attn_fwd, self.attn_bwd


MOE_MODULES = ("moe", "moe_act", "shared_experts")


def recomputed(module: str, recompute: str | tuple[str, ...] | None) -> bool:
    """Whether Megatron's recompute setting repeats a kernel of ``module`` ('full' repeats every
    forward kernel; the 'moe' module covers the whole MoE block, shared experts included)."""
    if recompute is None:
        return False
    if recompute == "full":
        return True
    if not module:
        return False
    if module in recompute:
        return True
    return "moe" in recompute and module in MOE_MODULES


def recompute_share(k: Kernel, recompute: str | tuple[str, ...] | None) -> Num:
    """Share of a kernel's forward that the recompute setting repeats in the backward: 0 or 1 for
    Megatron's settings (:func:`recomputed`); under torchtitan's per-op selective AC ('op') the
    matmuls its policy does not save (``Gemm.op_sac_recompute``), no attention kernel (SDPA's
    outputs are saved) and every element-wise kernel."""
    if recompute == "op":
        if isinstance(k, Gemm):
            return k.op_sac_recompute
        return 0.0 if isinstance(k, FusedAttention) else 1.0
    return 1.0 if recomputed(k.module, recompute) else 0.0


def launches(k: Kernel) -> tuple[int, int]:
    """(forward, backward) kernels the host issues for one inventory entry."""
    if isinstance(k, Gemm):
        if k.issue == "batched":
            return 1, 2
        return k.count, 2 * k.count
    if isinstance(k, FusedAttention):
        return 1, 1
    return k.kernels, k.launches_bwd


def host_times(k: Kernel, rates: Rates) -> tuple[Num, Num]:
    """(forward, backward) host seconds to issue one inventory entry: its kernel launches, plus the
    Python of each Megatron linear-layer call it stands for (``Gemm.linear_calls``, the local
    spec: the module's forward, the autograd function's Python backward and DDP's per-parameter
    gradient hook), and of the non-linear Megatron modules it stands for (``Stream.module_calls``:
    the local MoE layer's router, dispatcher and expert loop)."""
    lf, lb = launches(k)
    calls = k.linear_calls if isinstance(k, Gemm) else 0
    modules = k.module_calls if isinstance(k, Stream) else 0
    return (lf * rates.host_launch_s + calls * rates.linear_host_s[0] + modules * rates.moe_layer_host_s[0],
            lb * rates.host_launch_s + calls * rates.linear_host_s[1] + modules * rates.moe_layer_host_s[1])


@dataclass(frozen=True)
class KernelTime:
    """One inventory entry's seconds for one micro-batch: forward, and the backward's two parts
    (data and weight gradient for GEMMs; the whole backward in ``dgrad`` otherwise, ``wgrad``
    None); ``host_f``/``host_b``: the host's seconds to issue it (:func:`host_times`)."""

    kernel: Kernel
    fwd: Num
    dgrad: Num
    wgrad: Num | None = None
    host_f: Num = 0.0
    host_b: Num = 0.0


def kernel_times(ms: ModelShape, sh: Shard, block: str, rates: Rates) -> tuple[KernelTime, ...]:
    """Seconds of every kernel of one block (what recompute settings share: :func:`block_time`
    sums them per setting). Shard degrees may be arrays."""
    out = []
    for k in block_kernels(ms, sh, block):
        hf, hb = host_times(k, rates)
        if isinstance(k, Gemm):
            f, d, w = gemm_times(k, sh.fp8, rates, sh.fp4)
            out.append(KernelTime(k, f, d, w, hf, hb))
        elif isinstance(k, FusedAttention):
            f, b = attention_times(k, rates)
            out.append(KernelTime(k, f, b, None, hf, hb))
        else:
            f, b = stream_times(k, rates)
            out.append(KernelTime(k, f, b, None, hf, hb))
    return tuple(out)


def block_time(ms: ModelShape, sh: Shard, block: str, rates: Rates, recompute: str | tuple[str, ...] | None) -> BlockTime:
    """Seconds and FLOPs of one block for one micro-batch (memoized on hashable arguments; with
    array degrees every field is an array). Each pass takes the longer of the GPU's kernel time and
    the host's issue time."""
    if hashable(sh):
        return _block_time_cached(ms, sh, block, rates, recompute)
    return block_time_of(kernel_times(ms, sh, block, rates), rates, recompute)


@dataclass(frozen=True)
class KernelSums(ClassTimes):
    """A block's kernel times (:class:`ClassTimes`) and FLOPs summed by class and pass, before
    recompute."""

    flops_fwd: Num
    flops_bwd: Num
    host_fwd: Num
    """Host seconds to issue the forward / backward (:func:`host_times`)."""
    host_bwd: Num
    gemms: tuple[tuple[str, Num, Num, Num], ...]
    syncs: bool = False
    """Some kernel makes the host wait for the GPU in the forward (``Stream.host_sync``)."""


def kernel_sums(kts: tuple[KernelTime, ...]) -> KernelSums:
    g_f: Num = 0.0
    g_b: Num = 0.0
    a_f: Num = 0.0
    a_b: Num = 0.0
    m_f: Num = 0.0
    m_b: Num = 0.0
    fl_f = fl_b = 0.0
    h_f: Num = 0.0
    h_b: Num = 0.0
    syncs = False
    named = []
    for kt in kts:
        k = kt.kernel
        h_f = h_f + kt.host_f
        h_b = h_b + kt.host_b
        syncs = syncs or (isinstance(k, Stream) and k.host_sync)
        f = kt.fwd
        if isinstance(k, Gemm):
            d, w = kt.dgrad, kt.wgrad
            assert w is not None  # every GEMM has a weight-gradient pass
            g_f += f
            g_b += d + w
            fl_f += k.flops
            fl_b += 2 * k.flops
            named.append((k.name, f, d, w))
        elif isinstance(k, FusedAttention):
            a_f += f
            a_b += kt.dgrad
            fl_f += k.flops
            fl_b += 2.5 * k.flops
        else:
            m_f += f
            m_b += kt.dgrad
    return KernelSums(g_f, g_b, a_f, a_b, m_f, m_b, fl_f, fl_b, h_f, h_b, tuple(named), syncs)


def _forward_segments(kts) -> tuple[Num, Num, Num]:
    """(seconds of the parts closed by host syncs, GPU and host seconds of the open part) of the
    forward of ``kts`` in issue order: at each sync the host waits for every kernel issued so far,
    so a closed part takes the longer of its GPU and host time."""
    closed = g = h = 0.0
    for kt in kts:
        g = g + kt.fwd
        h = h + kt.host_f
        if isinstance(kt.kernel, Stream) and kt.kernel.host_sync:
            closed = closed + maximum(g, h)
            g = h = 0.0
    return closed, g, h


def block_time_of(kts: tuple[KernelTime, ...], rates: Rates, recompute: str | tuple[str, ...] | None,
                  sums: KernelSums | None = None) -> BlockTime:
    """Sum a block's kernel times (:func:`kernel_times`; ``sums`` when already summed) under a
    recompute setting: the recomputed kernels' forward repeats in the backward, and each pass
    waits for the host when it issues kernels faster than they run. Host syncs split a pass (see
    the module docstring); the recomputed forward runs before the backward, its last part
    overlapping the backward's issue."""
    s = sums if sums is not None else kernel_sums(kts)
    rc: Num = 0.0
    fl_rc: Num = 0.0
    h_rc: Num = 0.0
    rc_kts = []
    for kt in kts:
        k = kt.kernel
        share = recompute_share(k, recompute)
        if not any_true(share):
            continue
        h_rc = h_rc + share * kt.host_f
        rc += share * kt.fwd
        whole = isinstance(share, float) and share == 1.0
        rc_kts.append(kt if whole else replace(kt, fwd=share * kt.fwd, host_f=share * kt.host_f))
        if not isinstance(k, Stream):
            fl_rc += share * k.flops
    gpu_f, gpu_b = s.gpu_fwd, s.gpu_bwd
    if not s.syncs:
        host_f = maximum(0.0, s.host_fwd - gpu_f)
        host_b = maximum(0.0, s.host_bwd + h_rc - (gpu_b + rc))
    else:
        closed, g, h = _forward_segments(kts)
        host_f = closed + maximum(g, h) - gpu_f
        closed, g, h = _forward_segments(rc_kts)
        host_b = closed + maximum(g + gpu_b, h + s.host_bwd) - (gpu_b + rc)
    return BlockTime(s.gemm_fwd, s.gemm_bwd, s.attn_fwd, s.attn_bwd, s.mem_fwd, s.mem_bwd, rc, host_f, host_b,
                     s.flops_fwd, s.flops_bwd, fl_rc, s.gemms)


def with_stage_host(bt: BlockTime, seconds: Num) -> BlockTime:
    """``bt`` waiting ``seconds`` more for the host in each pass (the stage scheduling of
    Megatron's combined 1F1B: planner.cost.rates.combined_stage_host_s)."""
    if not any_true(seconds):
        return bt
    return replace(bt, host_fwd=bt.host_fwd + seconds, host_bwd=bt.host_bwd + seconds)


@lru_cache(maxsize=65536)
def _block_time_cached(ms: ModelShape, sh: Shard, block: str, rates: Rates, recompute) -> BlockTime:
    return block_time_of(kernel_times(ms, sh, block, rates), rates, recompute)


def kernel_table(ms: ModelShape, sh: Shard, block: str, rates: Rates) -> list[dict]:
    """Per-kernel seconds of one block (for explain and debugging)."""
    rows = []
    for k in block_kernels(ms, sh, block):
        if isinstance(k, Gemm):
            f, d, w = gemm_times(k, sh.fp8, rates, sh.fp4)
            recipe = gemm_recipe(k, sh.fp8, rates, sh.fp4)
            eff = pass_efficiency(k.m, k.n, k.k, k.count, recipe, rates, k.issue, "fwd" in SPLIT_ACCUMULATOR.get(recipe, ()))
            rows.append({"kernel": k.name, "class": "gemm", "shape": [k.m, k.n, k.k, k.count],
                         "fwd_s": f, "bwd_s": d + w, "efficiency": eff})
        elif isinstance(k, FusedAttention):
            f, b = attention_times(k, rates)
            rows.append({"kernel": k.name, "class": "attention", "fwd_s": f, "bwd_s": b})
        else:
            f, b = stream_times(k, rates)
            rows.append({"kernel": k.name, "class": "memory", "fwd_s": f, "bwd_s": b})
    return rows

