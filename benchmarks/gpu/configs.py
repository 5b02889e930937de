"""The validation configurations: one Megatron-Core model and training setup each, and the planner
ModelSpec / Job / Plan that describe the same run.

Pure Python (no torch, no planner import at module level) so the device harness can read it without
planner's dependencies, and planner's tests can read it without torch.

Every model uses the Megatron-Core local layer spec (no Transformer Engine): unfused attention with
torch's fp32 softmax (``masked_softmax_fusion=False``), torch RMSNorm/LayerNorm, SequentialMLP
experts with the alltoall dispatcher on EP=1. bf16 parameters, fp32 main gradients
(``grad_reduce_in_fp32``, Megatron's default for bf16), Adam through ``get_megatron_optimizer``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ModelDims:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    activation: str = "swiglu"  # swiglu | gelu
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    # MoE (None: dense)
    experts: int | None = None
    top_k: int = 2
    expert_ffn: int = 0
    shared_ffn: int = 0
    first_k_dense: int = 0


@dataclass(frozen=True)
class RunConfig:
    name: str
    model: ModelDims
    seq: int
    mbs: int
    micro_batches: int
    recompute: str = "none"
    """planner's recompute key: none | full | full:N | module+module (selective)."""
    recompute_method: str = "uniform"
    """For full recompute: uniform (recompute_num_layers=1) or block (full:N, first N layers)."""
    dist_opt: bool = False
    steps: int = 6
    """Training steps: step 1 allocates the optimizer states (warm-up), the rest are timed."""
    gpus: int = 1
    """World size (one process per GPU, launched by torchrun when above 1)."""
    tp: int = 1
    """Tensor parallel, with sequence parallelism (as planner assumes) when above 1."""
    pp: int = 1
    vpp: int = 1
    """Virtual stages per pipeline rank (interleaved 1F1B when above 1)."""
    ep: int = 1
    """Expert parallel; expert-TP is 1 (Megatron's expert grid: ETP x EP x EDP x PP = gpus)."""
    cuda_graphs: str = "none"
    """planner's cuda_graphs key: none, scoped:layer (the whole decoder layer) or scoped:<modules>.
    Captured with Megatron-Core's own implementation (--cuda-graph-impl local, which needs no
    Transformer Engine: torch.cuda.CUDAGraph with one shared graph memory pool)."""
    moe_capacity: float | None = None
    """Drop-and-pad MoE: Megatron's moe_expert_capacity_factor with moe_pad_expert_input_to_capacity
    (static expert shapes, no device-to-host sync in the alltoall dispatcher's preprocess: what a
    graphed MoE layer needs, TransformerConfig.__post_init__ 'moe cuda graph is only supported with
    drop-padding MoE'). None: dropless."""

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def global_batch(self) -> int:
        return self.mbs * self.micro_batches * self.dp

    def to_json(self) -> dict:
        return asdict(self)


# Llama-3-8B-shaped layers (GQA 32/8, SwiGLU 14336), four of them.
GQA = ModelDims("gqa-h4096", hidden=4096, layers=4, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=32768)
# GPT-style multi-head attention with a GeLU MLP and LayerNorm.
MHA = ModelDims("mha-h3072", hidden=3072, layers=4, heads=24, kv_heads=24, head_dim=128, ffn=12288, vocab=50304,
                activation="gelu", norm="layernorm")
# A small DeepSeek-MoE-shaped model: 16 routed experts, top-4, two shared experts' width.
MOE = ModelDims("moe-h2048", hidden=2048, layers=4, heads=16, kv_heads=4, head_dim=128, ffn=8192, vocab=32768,
                experts=16, top_k=4, expert_ffn=1536, shared_ffn=3072)

CONFIGS: tuple[RunConfig, ...] = (
    RunConfig("gqa-s2k-b1-none", GQA, seq=2048, mbs=1, micro_batches=2),
    RunConfig("gqa-s4k-b1-none", GQA, seq=4096, mbs=1, micro_batches=2),
    RunConfig("gqa-s2k-b4-none", GQA, seq=2048, mbs=4, micro_batches=1),
    RunConfig("gqa-s4k-b2-coreattn", GQA, seq=4096, mbs=2, micro_batches=2, recompute="core_attn"),
    RunConfig("gqa-s8k-b1-coreattn", GQA, seq=8192, mbs=1, micro_batches=1, recompute="core_attn"),
    RunConfig("gqa-s2k-b2-mlp", GQA, seq=2048, mbs=2, micro_batches=2, recompute="mlp"),
    RunConfig("gqa-s4k-b2-full", GQA, seq=4096, mbs=2, micro_batches=2, recompute="full"),
    RunConfig("gqa-s4k-b1-full2block", GQA, seq=4096, mbs=1, micro_batches=2, recompute="full:2", recompute_method="block"),
    RunConfig("gqa-s4k-b1-distopt", GQA, seq=4096, mbs=1, micro_batches=2, dist_opt=True),
    RunConfig("mha-s2k-b2-none", MHA, seq=2048, mbs=2, micro_batches=2),
    RunConfig("mha-s4k-b1-layernorm-coreattn", MHA, seq=4096, mbs=1, micro_batches=2, recompute="core_attn+layernorm"),
    RunConfig("mha-s2k-b4-full", MHA, seq=2048, mbs=4, micro_batches=1, recompute="full"),
    RunConfig("moe-s4k-b1-none", MOE, seq=4096, mbs=1, micro_batches=2),
    RunConfig("moe-s2k-b4-none", MOE, seq=2048, mbs=4, micro_batches=1),
    RunConfig("moe-s2k-b2-moe", MOE, seq=2048, mbs=2, micro_batches=2, recompute="moe"),
    RunConfig("moe-s4k-b1-shared-coreattn", MOE, seq=4096, mbs=1, micro_batches=2, recompute="core_attn+shared_experts"),
    RunConfig("moe-s4k-b2-full", MOE, seq=4096, mbs=2, micro_batches=1, recompute="full"),
    RunConfig("moe-s2k-b2-distopt", MOE, seq=2048, mbs=2, micro_batches=2, dist_opt=True),
)

# Held out: measured after the memory model was fixed on CONFIGS, to test the fixes on shapes
# they were not derived from.
HOLDOUT: tuple[RunConfig, ...] = (
    RunConfig("holdout-gqa-s6k-b1-none", GQA, seq=6144, mbs=1, micro_batches=2),
    RunConfig("holdout-mha-s4k-b2-none", MHA, seq=4096, mbs=2, micro_batches=1),
    RunConfig("holdout-moe-s8k-b1-coreattn", MOE, seq=8192, mbs=1, micro_batches=1, recompute="core_attn"),
    RunConfig("holdout-gqa-s3k-b2-full1block", GQA, seq=3072, mbs=2, micro_batches=2, recompute="full:1", recompute_method="block"),
)

# The expert range (issue 20 phase 2): the single-GPU host mechanism has to hold from 8 to 128
# experts. Same attention and width as MOE; the routed experts get finer as they multiply (the
# Mixtral-like 8 x 3072 top-2, the Qwen3-30B-A3B-like 64 / 128 x 768 top-8, without shared
# experts, as Qwen3 has none). Measured with 100 steps, the first 50 left out, on two leases
# (benchmarks/gpu/run_experts.sh), chosen before the run.
MOE8 = replace(MOE, name="moe8-h2048", experts=8, top_k=2, expert_ffn=3072, shared_ffn=0)
MOE64 = replace(MOE, name="moe64-h2048", experts=64, top_k=8, expert_ffn=768, shared_ffn=0)
MOE128 = replace(MOE, name="moe128-h2048", experts=128, top_k=8, expert_ffn=768, shared_ffn=0)
EXPERTS: tuple[RunConfig, ...] = (
    RunConfig("moe8-s4k-b1-none", MOE8, seq=4096, mbs=1, micro_batches=2),
    RunConfig("moe8-s2k-b2-full", MOE8, seq=2048, mbs=2, micro_batches=2, recompute="full"),
    RunConfig("moe64-s4k-b1-none", MOE64, seq=4096, mbs=1, micro_batches=2),
    RunConfig("moe64-s2k-b4-moe", MOE64, seq=2048, mbs=4, micro_batches=1, recompute="moe"),
    RunConfig("moe128-s4k-b2-none", MOE128, seq=4096, mbs=2, micro_batches=1),
    RunConfig("moe128-s2k-b4-full", MOE128, seq=2048, mbs=4, micro_batches=1, recompute="full"),
)

# Several GPUs of one NVLink domain (issue 13; the device's nvidia-h200-x2 kind): one parallel
# dimension at a time on the validation models, then a combination. Megatron splits the 4 layers
# evenly (embedding on the first stage, output layer and loss on the last).
PARALLEL: tuple[RunConfig, ...] = (
    RunConfig("x2-tp2-gqa-s4k-b1", GQA, seq=4096, mbs=1, micro_batches=2, gpus=2, tp=2),
    RunConfig("x2-pp2-gqa-s4k-b1-m4", GQA, seq=4096, mbs=1, micro_batches=4, gpus=2, pp=2),
    RunConfig("x2-pp2-vpp2-gqa-s4k-b1-m4", GQA, seq=4096, mbs=1, micro_batches=4, gpus=2, pp=2, vpp=2),
    RunConfig("x2-dp2-gqa-s4k-b1-distopt", GQA, seq=4096, mbs=1, micro_batches=2, gpus=2, dist_opt=True),
    RunConfig("x2-ep2-moe-s4k-b1", MOE, seq=4096, mbs=1, micro_batches=2, gpus=2, ep=2),
    RunConfig("x2-tp2-ep2-moe-s4k-b2-full", MOE, seq=4096, mbs=2, micro_batches=2, gpus=2, tp=2, ep=2,
              recompute="full"),
)

# Small runs for the committed memory snapshots (tests/fixtures/memtrace/real/).
SNAP_MODEL = ModelDims("snap-h1024", hidden=1024, layers=2, heads=8, kv_heads=4, head_dim=128, ffn=2816, vocab=8192)
SNAPSHOTS: tuple[RunConfig, ...] = (
    RunConfig("snapshot-none", SNAP_MODEL, seq=1024, mbs=1, micro_batches=1, steps=2),
    RunConfig("snapshot-full", SNAP_MODEL, seq=1024, mbs=1, micro_batches=1, recompute="full", steps=2),
)

# CUDA graphs (issue 39): the same runs eager and with Megatron-Core's local graphs, dense and MoE,
# two micro-batch sizes for the dense layer. Graphs are captured after cuda_graph_warmup_steps (3)
# eager steps, so these run 8 steps and leave the first 5 out (run_graphs.sh). Chosen before the run.
GRAPHS: tuple[RunConfig, ...] = (
    RunConfig("graph-gqa-s2k-b1-none", GQA, seq=2048, mbs=1, micro_batches=2, steps=8),
    RunConfig("graph-gqa-s2k-b1-layer", GQA, seq=2048, mbs=1, micro_batches=2, steps=8, cuda_graphs="scoped:layer"),
    RunConfig("graph-gqa-s2k-b1-attn", GQA, seq=2048, mbs=1, micro_batches=2, steps=8, cuda_graphs="scoped:attn"),
    RunConfig("graph-gqa-s2k-b1-fulliter", GQA, seq=2048, mbs=1, micro_batches=2, steps=8,
              cuda_graphs="full_iteration"),
    RunConfig("graph-gqa-s2k-b2-none", GQA, seq=2048, mbs=2, micro_batches=2, steps=8),
    RunConfig("graph-gqa-s2k-b2-layer", GQA, seq=2048, mbs=2, micro_batches=2, steps=8, cuda_graphs="scoped:layer"),
    RunConfig("graph-gqa-s2k-b2-fulliter", GQA, seq=2048, mbs=2, micro_batches=2, steps=8,
              cuda_graphs="full_iteration"),
    RunConfig("graph-mha-s2k-b2-none", MHA, seq=2048, mbs=2, micro_batches=2, steps=8),
    RunConfig("graph-mha-s2k-b2-layer", MHA, seq=2048, mbs=2, micro_batches=2, steps=8, cuda_graphs="scoped:layer"),
    RunConfig("graph-moe-s2k-b2-none", MOE, seq=2048, mbs=2, micro_batches=2, steps=8),
    RunConfig("graph-moe-s2k-b2-attn", MOE, seq=2048, mbs=2, micro_batches=2, steps=8, cuda_graphs="scoped:attn"),
    RunConfig("graph-moe-s2k-b2-attnrouter", MOE, seq=2048, mbs=2, micro_batches=2, steps=8,
              cuda_graphs="scoped:attn+moe_router+moe_preprocess"),
)

# Small allocated peaks (issue 41): 2-12 GiB, where the allocator's fixed holding (cached small
# blocks, the first segments) is a large share of reserved memory. One- and two-layer versions of
# the validation models. SMALL is the fit set and SMALL_HOLDOUT is held out, chosen before the run.
GQA1 = replace(GQA, name="gqa1-h4096", layers=1)
MHA1 = replace(MHA, name="mha1-h3072", layers=1)
MOE1 = replace(MOE, name="moe1-h2048", layers=1)
MOE8_1 = replace(MOE8, name="moe8x1-h2048", layers=1)
D2048 = ModelDims("gqa-h2048", hidden=2048, layers=2, heads=16, kv_heads=4, head_dim=128, ffn=5632, vocab=32768)
SMALL: tuple[RunConfig, ...] = (
    RunConfig("small-gqa1-s512-b1-none", GQA1, seq=512, mbs=1, micro_batches=2),
    RunConfig("small-mha1-s1k-b2-none", MHA1, seq=1024, mbs=2, micro_batches=2),
    RunConfig("small-moe1-s2k-b1-none", MOE1, seq=2048, mbs=1, micro_batches=2),
    RunConfig("small-d2048-s2k-b2-none", D2048, seq=2048, mbs=2, micro_batches=2),
    RunConfig("small-snap-s4k-b2-none", SNAP_MODEL, seq=4096, mbs=2, micro_batches=2),
    RunConfig("small-snap-s2k-b2-none", SNAP_MODEL, seq=2048, mbs=2, micro_batches=2),
    RunConfig("small-moe8x1-s1k-b2-none", MOE8_1, seq=1024, mbs=2, micro_batches=2),
)
SMALL_HOLDOUT: tuple[RunConfig, ...] = (
    RunConfig("small-holdout-gqa1-s2k-b2-full", GQA1, seq=2048, mbs=2, micro_batches=2, recompute="full"),
    RunConfig("small-holdout-d2048-s4k-b1-coreattn", D2048, seq=4096, mbs=1, micro_batches=2, recompute="core_attn"),
    RunConfig("small-holdout-moe1-s1k-b4-moe", MOE1, seq=1024, mbs=4, micro_batches=1, recompute="moe"),
    RunConfig("small-holdout-snap-s4k-b1-none", SNAP_MODEL, seq=4096, mbs=1, micro_batches=2),
)

# Second CUDA-graph lease (issue 39), chosen before the run: the full-iteration graph of the dense
# layer (the first lease's harness passed a tuple batch) and graphed MoE layers from 16 to 128
# experts. The MoE runs drop and pad at capacity factor 1.0 (the balanced load: static expert shapes,
# so the alltoall dispatcher needs no host sync and Megatron's local capture works; the first lease's
# dropless captures failed), eager and graphed in the same lease; 20 steps, the first 8 left out,
# so the step times tell the host time the graphs remove.
MOE2_64 = replace(MOE64, name="moe64x2-h2048", layers=2)
MOE2_128 = replace(MOE128, name="moe128x2-h2048", layers=2)
GRAPHS2: tuple[RunConfig, ...] = (
    RunConfig("graph-gqa-s2k-b1-fulliter", GQA, seq=2048, mbs=1, micro_batches=2, steps=8,
              cuda_graphs="full_iteration"),
    RunConfig("graph2-gqa-s2k-b2-none", GQA, seq=2048, mbs=2, micro_batches=2, steps=8),
    RunConfig("graph-gqa-s2k-b2-fulliter", GQA, seq=2048, mbs=2, micro_batches=2, steps=8,
              cuda_graphs="full_iteration"),
    RunConfig("graph2-moe-s2k-b2-pad-none", MOE, seq=2048, mbs=2, micro_batches=2, steps=20, moe_capacity=1.0),
    RunConfig("graph2-moe-s2k-b2-pad-layer", MOE, seq=2048, mbs=2, micro_batches=2, steps=20, moe_capacity=1.0,
              cuda_graphs="scoped:layer"),
    RunConfig("graph2-moe-s2k-b2-pad-fulliter", MOE, seq=2048, mbs=2, micro_batches=2, steps=20, moe_capacity=1.0,
              cuda_graphs="full_iteration"),
    RunConfig("graph2-moe64x2-s2k-b2-pad-none", MOE2_64, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0),
    RunConfig("graph2-moe64x2-s2k-b2-pad-layer", MOE2_64, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="scoped:layer"),
    RunConfig("graph2-moe128x2-s2k-b2-pad-none", MOE2_128, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0),
    RunConfig("graph2-moe128x2-s2k-b2-pad-layer", MOE2_128, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="scoped:layer"),
)

# Third CUDA-graph lease (issue 39), chosen before the run and held out of the full-iteration rule
# (derived from Megatron's FullCudaGraphWrapper and the three runs of GRAPHS2): a longer sequence of the
# dense GQA layer, the MHA/GeLU layer at four micro-batches of one (does the graph's pool grow per
# micro-batch?), the 16-expert MoE at a larger micro-batch and a shorter sequence. Each with its eager
# twin in the same lease; 10 steps, the first 5 left out (capture happens after 3 warm-up calls).
GRAPHS3: tuple[RunConfig, ...] = (
    RunConfig("graph3-gqa-s4k-b1-none", GQA, seq=4096, mbs=1, micro_batches=2, steps=10),
    RunConfig("graph3-gqa-s4k-b1-fulliter", GQA, seq=4096, mbs=1, micro_batches=2, steps=10,
              cuda_graphs="full_iteration"),
    RunConfig("graph3-mha-s2k-b1-m4-none", MHA, seq=2048, mbs=1, micro_batches=4, steps=10),
    RunConfig("graph3-mha-s2k-b1-m4-fulliter", MHA, seq=2048, mbs=1, micro_batches=4, steps=10,
              cuda_graphs="full_iteration"),
    RunConfig("graph3-moe-s1k-b4-pad-none", MOE, seq=1024, mbs=4, micro_batches=2, steps=10, moe_capacity=1.0),
    RunConfig("graph3-moe-s1k-b4-pad-fulliter", MOE, seq=1024, mbs=4, micro_batches=2, steps=10, moe_capacity=1.0,
              cuda_graphs="full_iteration"),
)

# Fourth CUDA-graph lease (issue 39: the host-bound MoE model and CUDA graphs "from 8 to 256 experts"),
# chosen before the run and held out of every rule and constant: GRAPHS2's protocol (drop and pad at
# capacity factor 1.0, 20 steps, the first 8 left out) at 256 routed experts (DeepSeek-V3's count; 768
# wide, top 8, as MOE128) eager, graphed by whole layers and as the full iteration, the same at a
# shorter sequence and a larger micro-batch, and at 8 experts (Mixtral-like, 3072 wide, top 2: the
# bottom of the range, measured eager only so far). Predictions written before the run:
# results/validation/gpu-graphs4-predictions.json (python -m benchmarks.gpu.predictions graphs4).
MOE2_256 = replace(MOE128, name="moe256x2-h2048", layers=2, experts=256)
MOE2_8 = replace(MOE8, name="moe8x2-h2048", layers=2)
GRAPHS4: tuple[RunConfig, ...] = (
    RunConfig("graph4-moe256x2-s2k-b2-pad-none", MOE2_256, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0),
    RunConfig("graph4-moe256x2-s2k-b2-pad-layer", MOE2_256, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="scoped:layer"),
    RunConfig("graph4-moe256x2-s2k-b2-pad-fulliter", MOE2_256, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="full_iteration"),
    RunConfig("graph4-moe256x2-s1k-b4-pad-none", MOE2_256, seq=1024, mbs=4, micro_batches=2, steps=20,
              moe_capacity=1.0),
    RunConfig("graph4-moe256x2-s1k-b4-pad-layer", MOE2_256, seq=1024, mbs=4, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="scoped:layer"),
    RunConfig("graph4-moe8x2-s2k-b2-pad-none", MOE2_8, seq=2048, mbs=2, micro_batches=2, steps=20, moe_capacity=1.0),
    RunConfig("graph4-moe8x2-s2k-b2-pad-layer", MOE2_8, seq=2048, mbs=2, micro_batches=2, steps=20,
              moe_capacity=1.0, cuda_graphs="scoped:layer"),
)

# The micro-batch lever on host-bound eager MoE (issue 39, search mode): the search's largest credited
# gain on published eager MoE runs is micro-batch 1 -> 2 at the same global batch (the host's
# per-layer work after the dropless dispatcher's token-count sync, planner.cost.compute
# block_time_of, hidden behind twice the GPU work). Here the same composition on the local spec:
# dropless (the alltoall dispatcher's sync), eager, the same tokens per step split as 4 x 1, 2 x 2 and
# 1 x 4 sequences of 2K, at 128 fine experts (2 layers, 768 wide, top 8) and at 16 DeepSeek-MoE-like
# experts (4 layers, top 4, shared experts). 60 steps, the first 30 left out. Chosen, and planner's
# predictions written (results/validation/gpu-mbs5-predictions.json), before the run.
MBS5: tuple[RunConfig, ...] = tuple(
    RunConfig(f"mbs5-{m.name.split('-')[0]}-s2k-b{mbs}-m{4 // mbs}", m, seq=2048, mbs=mbs, micro_batches=4 // mbs,
              steps=60)
    for m in (MOE2_128, MOE) for mbs in (1, 2, 4))

# The full iteration without stranded blocks (issue 39; planner.cost.terms.peak_memory._strands, written
# after the fourth lease, whose 256-expert full iteration it moved from +8.1 to -2.7 %): four MoE models
# the rule has not seen, each graphed as the full iteration beside its eager twin, GRAPHS2's protocol
# (drop and pad at capacity 1.0, 20 steps, the first 8 left out): 64 experts at 2K x 2, 128 at 1K x 4,
# 8 at 4K x 1, 256 at 2K x 1. Chosen, and planner's predictions written
# (results/validation/gpu-graphs6-predictions.json), before the run.
GRAPHS6: tuple[RunConfig, ...] = tuple(
    RunConfig(f"graph6-{m.name.split('-')[0]}-s{seq // 1024}k-b{mbs}-pad-{tag}", m, seq=seq, mbs=mbs, micro_batches=2,
              steps=20, moe_capacity=1.0, cuda_graphs=graphs)
    for m, seq, mbs in ((MOE2_64, 2048, 2), (MOE2_128, 1024, 4), (MOE2_8, 4096, 1), (MOE2_256, 2048, 1))
    for tag, graphs in (("none", "none"), ("fulliter", "full_iteration")))

# Issue 41's knee (allocated peaks of 12-22 GiB, where the shipped fixed term meets the large runs'
# fraction): held out of every fit, chosen before the run from planner's predicted allocated peaks.
GQA2 = replace(GQA, name="gqa2-h4096", layers=2)
MHA2 = replace(MHA, name="mha2-h3072", layers=2)
MOE2 = replace(MOE, name="moe2-h2048", layers=2)
KNEE_HOLDOUT: tuple[RunConfig, ...] = (
    RunConfig("knee-gqa2-s2k-b2-none", GQA2, seq=2048, mbs=2, micro_batches=2),
    RunConfig("knee-gqa2-s4k-b1-coreattn", GQA2, seq=4096, mbs=1, micro_batches=2, recompute="core_attn"),
    RunConfig("knee-mha2-s2k-b2-none", MHA2, seq=2048, mbs=2, micro_batches=2),
    RunConfig("knee-moe1-s4k-b2-none", MOE1, seq=4096, mbs=2, micro_batches=2),
    RunConfig("knee-moe2-s2k-b2-none", MOE2, seq=2048, mbs=2, micro_batches=2),
    RunConfig("knee-moe-s1k-b2-none", MOE, seq=1024, mbs=2, micro_batches=2),
    RunConfig("knee-moe8x1-s4k-b2-none", MOE8_1, seq=4096, mbs=2, micro_batches=2),
)

# A tiny configuration for CPU tests of the harness.
TINY = ModelDims("tiny", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=256)
TINY_MOE = replace(TINY, name="tiny-moe", experts=4, top_k=2, expert_ffn=32, shared_ffn=64)
TINY_MHA = replace(TINY, name="tiny-mha", kv_heads=4, activation="gelu", norm="layernorm")
TINY_PARALLEL: tuple[RunConfig, ...] = (  # CPU (gloo) tests of the multi-process path
    RunConfig("tiny-pp2-vpp2", replace(TINY, layers=4), seq=32, mbs=1, micro_batches=2, gpus=2, pp=2, vpp=2, steps=2),
    RunConfig("tiny-ep2", TINY_MOE, seq=32, mbs=1, micro_batches=2, gpus=2, ep=2, steps=2),
    RunConfig("tiny-tp2-ep2-full", TINY_MOE, seq=32, mbs=2, micro_batches=2, gpus=2, tp=2, ep=2, recompute="full",
              steps=2),
)
TINY_CONFIGS: tuple[RunConfig, ...] = (
    RunConfig("tiny-none", TINY, seq=32, mbs=2, micro_batches=2, steps=2),
    RunConfig("tiny-mha-none", TINY_MHA, seq=32, mbs=2, micro_batches=1, steps=2),
    RunConfig("tiny-full", TINY, seq=32, mbs=1, micro_batches=2, recompute="full", steps=2),
    RunConfig("tiny-coreattn", TINY, seq=32, mbs=1, micro_batches=1, recompute="core_attn+layernorm", steps=2),
    RunConfig("tiny-moe-none", TINY_MOE, seq=32, mbs=2, micro_batches=1, steps=2),
    RunConfig("tiny-moe-distopt", TINY_MOE, seq=32, mbs=1, micro_batches=2, recompute="moe+shared_experts", dist_opt=True, steps=2),
)


def by_name(name: str) -> RunConfig:
    for c in (CONFIGS + HOLDOUT + EXPERTS + PARALLEL + SNAPSHOTS + GRAPHS + SMALL + SMALL_HOLDOUT + GRAPHS2
              + GRAPHS3 + GRAPHS4 + MBS5 + GRAPHS6 + KNEE_HOLDOUT + TINY_CONFIGS + TINY_PARALLEL):
        if c.name == name:
            return c
    raise KeyError(name)


# ---- Megatron-Core ------------------------------------------------------------------------------

def cuda_graph_kwargs(cfg: RunConfig) -> dict:
    """TransformerConfig CUDA-graph arguments for planner's cuda_graphs key (Megatron-Core's local
    implementation: megatron/core/transformer/cuda_graphs.py CudaGraphManager; an empty module
    list captures the whole layer; the local implementation captures moe_router and moe_preprocess
    together, TransformerConfig.__post_init__)."""
    if cfg.cuda_graphs == "none":
        return {}
    if cfg.cuda_graphs == "full_iteration":  # the harness wraps the schedule (FullCudaGraphWrapper)
        return {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": []}
    body = cfg.cuda_graphs.removeprefix("scoped:")
    modules = [] if body == "layer" else body.split("+")
    return {"cuda_graph_impl": "local", "cuda_graph_modules": modules}


def recompute_kwargs(cfg: RunConfig) -> dict:
    """TransformerConfig recompute arguments for planner's recompute key."""
    rc = cfg.recompute
    if rc == "none":
        return {}
    if rc == "full" or rc.startswith("full:"):
        n = int(rc.split(":")[1]) if ":" in rc else (1 if cfg.recompute_method == "uniform" else cfg.model.layers)
        return {"recompute_granularity": "full", "recompute_method": cfg.recompute_method, "recompute_num_layers": n}
    return {"recompute_granularity": "selective", "recompute_modules": rc.split("+")}


def megatron_config_kwargs(cfg: RunConfig) -> dict:
    """Keyword arguments of megatron.core.transformer.TransformerConfig (torch imported by the caller
    supplies activation_func and dtypes)."""
    m = cfg.model
    kw = dict(
        num_layers=m.layers,
        hidden_size=m.hidden,
        num_attention_heads=m.heads,
        num_query_groups=m.kv_heads,
        kv_channels=m.head_dim,
        ffn_hidden_size=m.ffn,
        normalization="RMSNorm" if m.norm == "rmsnorm" else "LayerNorm",
        gated_linear_unit=m.activation == "swiglu",
        add_bias_linear=False,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        bf16=True,
        # unfused attention with torch's fp32 softmax: Megatron's fused softmax kernels need TE/apex
        masked_softmax_fusion=False,
        attention_softmax_in_fp32=True,
        # Megatron-LM's default --bias-swiglu-fusion: SwiGLUFunction keeps only its input. Pure
        # PyTorch (no TE); the harness turns Megatron's jit fuser (torch.compile) off, so it runs eager.
        # GeLU without biases has no fused path (Megatron requires add_bias_linear for it).
        bias_activation_fusion=m.activation == "swiglu",
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        cross_entropy_loss_fusion=False,
    )
    if m.experts:
        kw.update(
            num_moe_experts=m.experts,
            moe_router_topk=m.top_k,
            moe_ffn_hidden_size=m.expert_ffn,
            moe_shared_expert_intermediate_size=m.shared_ffn or None,
            moe_token_dispatcher_type="alltoall",
            moe_grouped_gemm=False,
            moe_router_dtype="fp32",
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=1e-3,
            moe_layer_freq=[0] * m.first_k_dense + [1] * (m.layers - m.first_k_dense),
        )
        if cfg.moe_capacity is not None:
            kw.update(moe_expert_capacity_factor=cfg.moe_capacity, moe_pad_expert_input_to_capacity=True)
    kw.update(recompute_kwargs(cfg))
    kw.update(cuda_graph_kwargs(cfg))
    kw.update(tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp,
              sequence_parallel=cfg.tp > 1)
    if cfg.vpp > 1:
        kw["virtual_pipeline_model_parallel_size"] = cfg.vpp
    if m.experts:
        kw.update(expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=1)
    return kw


# ---- planner ------------------------------------------------------------------------------------

def planner_model(m: ModelDims):
    """The planner ModelSpec of these dimensions."""
    from planner.specs.model import ModelSpec

    data = dict(
        name=m.name, source=["benchmarks/gpu/configs.py (validation model)"], hidden_size=m.hidden,
        num_layers=m.layers, vocab_size=m.vocab, tie_embeddings=False, norm=m.norm,
        attention={"kind": "gqa", "num_heads": m.heads, "num_kv_heads": m.kv_heads, "head_dim": m.head_dim},
        ffn={"activation": m.activation, "hidden_size": m.ffn},
    )
    if m.experts:
        data["moe"] = {"num_experts": m.experts, "top_k": m.top_k, "expert_hidden_size": m.expert_ffn,
                       "shared_expert_hidden_size": m.shared_ffn or None, "first_k_dense": m.first_k_dense}
    return ModelSpec(**data)


def planner_plan_string(cfg: RunConfig) -> str:
    parts = [f"tp={cfg.tp}", f"pp={cfg.pp}", f"mbs={cfg.mbs}", f"recompute={cfg.recompute}",
             "sharding=" + ("dist_opt" if cfg.dist_opt else "ddp")]
    if cfg.vpp > 1:
        parts.append(f"vpp={cfg.vpp}")
    if cfg.model.experts:
        parts += [f"ep={cfg.ep}", "etp=1", "dispatcher=alltoall"]
    if cfg.cuda_graphs != "none":
        parts.append(f"cuda_graphs={cfg.cuda_graphs}")
    return ",".join(parts)


def planner_setup(cfg: RunConfig, hardware: str = "h200", calibration: str | None = None):
    """resolve_setup for this run on its GPUs with the megatron-local implementation profile
    (optionally with a calibration file for the time model)."""
    from planner.cost.setup import Assumptions, resolve_setup
    from planner.specs.catalog import load_hardware
    from planner.specs.job import Job
    from planner.specs.plan import Plan

    hw = load_hardware(hardware)
    job = Job(gpus=cfg.gpus, global_batch=cfg.global_batch, seq_len=cfg.seq, precisions=["bf16"])
    assumptions = {"implementation": "megatron-local"}
    if calibration is not None:
        assumptions["calibration"] = str(calibration)
    return resolve_setup(planner_model(cfg.model), hw, job, Plan.parse(planner_plan_string(cfg)),
                         Assumptions(**assumptions))
