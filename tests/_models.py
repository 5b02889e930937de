"""Inline model specs and setup helpers for tests (independent of the catalogs)."""

from __future__ import annotations

from planner.cost.setup import Assumptions, resolve_setup
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

TABLE3_LAYOUT = "Ettt|(tttt|)*14ttmL"
TABLE3_PLAN = f"tp=1,pp=4,vpp=4,ep=64,etp=1,mbs=1,recompute=none,layout={TABLE3_LAYOUT}"


def korthikanti_model(name: str, hidden: int, ffn: int, heads: int, head_dim: int, layers: int) -> ModelSpec:
    """A 2022 Megatron GPT: GELU MLP, LayerNorm, biases, learned positions, tied embeddings,
    dropout 0.1 (calibration.yaml, korthikanti_2022.common)."""
    return ModelSpec(
        name=name, source=["Korthikanti et al. 2022, arXiv 2205.05198"], hidden_size=hidden, num_layers=layers,
        vocab_size=51200, tie_embeddings=True, position_embedding="learned", max_position_embeddings=2048,
        norm="layernorm",
        attention={"kind": "gqa", "num_heads": heads, "num_kv_heads": heads, "head_dim": head_dim,
                   "qkv_bias": True, "output_bias": True},
        ffn={"activation": "gelu", "hidden_size": ffn, "bias": True},
        attention_dropout=0.1, hidden_dropout=0.1,
    )


def setup_for(model, hw: str, plan: str, *, gpus: int, global_batch: int, seq_len: int, **assumptions):
    m = load_model(model) if isinstance(model, str) else model
    h = load_hardware(hw)
    job = Job(gpus=gpus, global_batch=global_batch, seq_len=seq_len, precisions=["bf16", "fp8"])
    return resolve_setup(m, h, job, Plan.parse(plan), Assumptions(**assumptions))


def table3_setup(plan: str = TABLE3_PLAN, hw: str = "h100", **assumptions):
    """DeepSeek-V3 as in Table 3 of the Megatron-Core MoE report: its figures close with the
    standard token permutation (calibration.yaml, reproduces_under)."""
    assumptions.setdefault("memory_efficient_permutation", False)
    return setup_for("deepseek-v3", hw, plan, gpus=256, global_batch=8192, seq_len=4096, **assumptions)
