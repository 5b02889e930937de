"""Published dense runs the time model is calibrated against, as specs built inline.

Numbers are those of ../shared/reference/calibration.yaml (each table's source is named below).
Unpublished settings are assumptions, stated here once and used by every calibration test:

- Korthikanti et al. 2022 (arXiv 2205.05198) Table 5: layouts as published; 'full' is full
  activation recompute, 'seqsel' sequence parallelism + selective (core attention) recompute;
  2022 Megatron: unfused attention with dropout 0.1 and Megatron's fused scale-mask-softmax,
  Apex's fused LayerNorm/Adam and gradient-accumulation fusion (Assumptions.implementation =
  'megatron-local-fused-softmax'; 'megatron-local' is Megatron-Core's local spec without any of
  those, measured on an H200 in results/validation/gpu-memory.md), no TP communication overlap,
  no distributed optimizer (dp = 1 anyway).
- Megatron-LM README weak scaling (H100, 2024): one micro-batch per step where there is no
  pipeline (pp = 1: micro-batch = global batch / dp = 4 sequences, which fits in 80 GB without
  recompute; splitting it would only add DP-sync exposure), micro-batch 1 with pipelining;
  no recompute, GELU MLP of 4h,
  Megatron GPT defaults (learned positions, tied embeddings, dropout 0.1), Transformer Engine with
  flash attention, distributed optimizer with overlapped grad-reduce/param-gather and TP comm
  overlap (the README's 'overlap' list); VPP as in ``README_VPP`` (interleaving chosen where the
  layers per rank allow it; the README does not publish it). Published TFLOPS count the full
  attention square (Megatron's formula before 2025: issue NVIDIA/Megatron-LM#831).
- Narayanan et al. 2021 (arXiv 2104.04473) Table 1: full recompute, interleaved schedule
  (VPP in ``NARAYANAN_VPP``), micro-batch as for the README rows (one micro-batch per step
  without a pipeline: 16 for the 1.7B model; 1 with pipelining), unfused attention with dropout
  and the fused softmax ('megatron-local-fused-softmax'), data-parallel
  all-reduce after the backward (not overlapped in 2021 Megatron); TFLOPS count the
  recompute forward (96 B s l h^2 (1 + s/6h + V/16lh)).
"""

from __future__ import annotations

from pathlib import Path

from planner.cost.setup import Assumptions, resolve_setup
from planner.specs.catalog import load_hardware
from planner.specs.job import Job
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

FIXTURES = Path(__file__).parent / "fixtures"


def gpt(name: str, hidden: int, layers: int, heads: int, vocab: int, seq: int, dropout: float = 0.1) -> ModelSpec:
    """A Megatron GPT: LayerNorm, learned positions, GELU MLP of 4h with biases, tied embeddings."""
    return ModelSpec.model_validate({
        "name": name, "source": ["calibration.yaml"], "hidden_size": hidden, "num_layers": layers,
        "vocab_size": vocab, "tie_embeddings": True, "position_embedding": "learned",
        "max_position_embeddings": seq, "norm": "layernorm",
        "attention": {"kind": "gqa", "num_heads": heads, "num_kv_heads": heads, "head_dim": hidden // heads,
                      "qkv_bias": True, "output_bias": True},
        "ffn": {"activation": "gelu", "hidden_size": 4 * hidden, "bias": True},
        "attention_dropout": dropout, "hidden_dropout": dropout,
    })


def a100():
    return load_hardware(str(FIXTURES / "a100-80gb.yaml"))


def h100():
    return load_hardware("h100")


# ---- Korthikanti et al. 2022, Table 5 -------------------------------------------------------
KORTHIKANTI_MODELS = {  # hidden, layers, heads
    "megatron-22B": (6144, 48, 64),
    "gpt3-175B": (12288, 96, 96),
    "turing-530B": (20480, 105, 128),
    "megatron-1T": (25600, 128, 160),
}
KORTHIKANTI_LAYOUTS = {  # gpus, tp, pp, vpp, global batch, micro batch
    "megatron-22B": (8, 8, 1, 1, 4, 4),
    "gpt3-175B": (64, 8, 8, 3, 64, 1),
    "turing-530B": (280, 8, 35, 3, 280, 1),
    "megatron-1T": (512, 8, 64, 1, 512, 1),
}
KORTHIKANTI_STEP_S = {
    ("megatron-22B", "full"): 1.42, ("megatron-22B", "seqsel"): 1.10,
    ("gpt3-175B", "full"): 18.13, ("gpt3-175B", "seqsel"): 13.75,
    ("turing-530B", "full"): 49.05, ("turing-530B", "seqsel"): 37.83,
    ("megatron-1T", "full"): 94.42, ("megatron-1T", "seqsel"): 71.49,
}
KORTHIKANTI_ASSUMPTIONS = Assumptions(implementation="megatron-local-fused-softmax")


def korthikanti_setup(name: str, mode: str, assumptions: Assumptions = KORTHIKANTI_ASSUMPTIONS, hw=None):
    hidden, layers, heads = KORTHIKANTI_MODELS[name]
    gpus, tp, pp, vpp, gbs, mbs = KORTHIKANTI_LAYOUTS[name]
    model = gpt(name, hidden, layers, heads, 51200, 2048)
    job = Job(gpus=gpus, global_batch=gbs, seq_len=2048)
    plan = Plan(tp=tp, pp=pp, vpp=vpp, mbs=mbs, sharding="ddp",
                recompute="full" if mode == "full" else "core_attn")
    return resolve_setup(model, hw or a100(), job, plan, assumptions)


# ---- Megatron-LM README weak scaling (H100) -------------------------------------------------
README_ROWS = [  # name, heads, hidden, layers, tp, pp, gpus, global batch, published model TFLOPS/GPU
    ("mlm-gpt-1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    ("mlm-gpt-7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    ("gpt-16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    ("gpt-32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    ("gpt-70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    ("mlm-gpt-119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    ("mlm-gpt-177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("mlm-gpt-314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    ("mlm-gpt-462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
]
# Assumed VPP: layers per pipeline rank split into chunks of at most ~6 layers where the count
# divides (70B: 42 per rank -> 7 chunks; 119B: 23 -> none divides, plain 1F1B; 177B: 16 -> 4;
# 314B: 12 -> 2; 462B: 7 -> 7 chunks of one layer).
README_VPP = {"gpt-70B": 7, "mlm-gpt-119B": 1, "mlm-gpt-177B": 4, "mlm-gpt-314B": 2, "mlm-gpt-462B": 7}
README_ASSUMPTIONS = Assumptions(implementation="te")


def readme_setup(row, assumptions: Assumptions = README_ASSUMPTIONS):
    name, heads, hidden, layers, tp, pp, gpus, gbs, _ = row
    model = gpt(name, hidden, layers, heads, 131072, 4096)
    job = Job(gpus=gpus, global_batch=gbs, seq_len=4096)
    mbs = gbs // (gpus // (tp * pp)) if pp == 1 else 1
    plan = Plan(tp=tp, pp=pp, vpp=README_VPP.get(name, 1), mbs=mbs)
    return resolve_setup(model, h100(), job, plan, assumptions)


# ---- Narayanan et al. 2021, Table 1 ---------------------------------------------------------
NARAYANAN_ROWS = [  # name, heads, hidden, layers, tp, pp, gpus, global batch, published TFLOPS (with recompute)
    ("ptdp-gpt-1.7B", 24, 2304, 24, 1, 1, 32, 512, 137.0),
    ("ptdp-gpt-145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148.0),
    ("ptdp-gpt-1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163.0),
]
# Assumed VPP: 145.6B has 10 layers per rank (5 chunks of 2); 1008B has 2 per rank (2 chunks of 1).
NARAYANAN_VPP = {"ptdp-gpt-145.6B": 5, "ptdp-gpt-1008B": 2}
# 2021 Megatron all-reduced gradients after the backward (no --overlap-grad-reduce yet).
NARAYANAN_ASSUMPTIONS = Assumptions(implementation="megatron-local-fused-softmax", dp_overlap=False)


def narayanan_setup(row, assumptions: Assumptions = NARAYANAN_ASSUMPTIONS):
    name, heads, hidden, layers, tp, pp, gpus, gbs, _ = row
    model = gpt(name, hidden, layers, heads, 51200, 2048)
    job = Job(gpus=gpus, global_batch=gbs, seq_len=2048)
    mbs = gbs // (gpus // (tp * pp)) if pp == 1 else 1
    plan = Plan(tp=tp, pp=pp, vpp=NARAYANAN_VPP.get(name, 1), mbs=mbs, recompute="full", sharding="ddp")
    return resolve_setup(model, a100(), job, plan, assumptions)
