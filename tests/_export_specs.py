"""Models, hardware and plans shared by the export tests.

Catalog models are used when the catalog has them; until kimi-k2, qwen3-235b-a22b and
llama3.1-405b land, the same architectures are built inline from their config.json numbers
(shared/reference/hardware-and-models.md, Part B).
"""

from __future__ import annotations

from planner.errors import PlannerError
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

_SRC = ["shared/reference/hardware-and-models.md (config.json numbers)"]

INLINE = {
    "kimi-k2": dict(
        name="kimi-k2", source=_SRC, hidden_size=7168, num_layers=61, vocab_size=163840,
        max_position_embeddings=131072,
        attention=dict(kind="mla", num_heads=64, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                       qk_rope_head_dim=64, v_head_dim=128),
        ffn=dict(activation="swiglu", hidden_size=18432),
        moe=dict(num_experts=384, top_k=8, expert_hidden_size=2048, num_shared_experts=1, first_k_dense=1,
                 router_bias=True, score_function="sigmoid", num_groups=1, group_top_k=1),
    ),
    "qwen3-235b-a22b": dict(
        name="qwen3-235b-a22b", source=_SRC, hidden_size=4096, num_layers=94, vocab_size=151936,
        max_position_embeddings=40960,
        attention=dict(kind="gqa", num_heads=64, num_kv_heads=4, head_dim=128, qk_norm=True),
        ffn=dict(activation="swiglu", hidden_size=12288),
        moe=dict(num_experts=128, top_k=8, expert_hidden_size=1536),
    ),
    "llama3.1-405b": dict(
        name="llama3.1-405b", source=_SRC, hidden_size=16384, num_layers=126, vocab_size=128256,
        max_position_embeddings=131072,
        attention=dict(kind="gqa", num_heads=128, num_kv_heads=8, head_dim=128),
        ffn=dict(activation="swiglu", hidden_size=53248),
    ),
}


def model(name: str) -> ModelSpec:
    try:
        return load_model(name)
    except PlannerError:
        if name not in INLINE:
            raise
        return ModelSpec.model_validate(INLINE[name])


def hw(name: str):
    return load_hardware(name)


def job(gpus: int, global_batch: int, seq_len: int = 4096, precisions=("bf16",)) -> Job:
    return Job(gpus=gpus, global_batch=global_batch, seq_len=seq_len, precisions=list(precisions))


# Plans near the top of what the search should return for each model, on Hopper (h100) and
# Blackwell (gb200-nvl72): (model, hardware, job args, plan).
TOP_PLANS = [
    ("deepseek-v3", "gb200-nvl72", (256, 8192), "pp=4,vpp=4,ep=64,mbs=1,recompute=mla_up_proj+moe_act,layout=Et*3|(tttt|)*14ttmL"),
    ("deepseek-v3", "gb200-nvl72", (256, 8192), "tp=2,pp=4,ep=32,etp=1,mbs=1,recompute=full:2,layout=Et*14|(t*16|)*2t*15mL,offload=optimizer,moments=bf16"),
    ("deepseek-v3", "h100", (1024, 8192), "tp=2,pp=16,vpp=2,ep=64,etp=1,mbs=1,recompute=mla_up_proj+moe_act+layernorm,layout=Et|(tt|)*30mL"),
    ("deepseek-v3", "h100", (512, 4096), "tp=1,pp=8,vpp=2,ep=32,mbs=1,precision=fp8,param_gather=fp8,grad_reduce=bf16,recompute=mla_up_proj+layernorm,layout=Ettt|(tttt|)*14ttmL,ep_overlap=on"),
    ("deepseek-v3", "h100", (512, 4096), "tp=2,pp=8,ep=32,etp=1,mbs=1,recompute=moe_act,layout=Et*5|(t*8|)*6t*8mL,dispatcher=deepep"),
    ("kimi-k2", "gb200-nvl72", (256, 4096), "pp=8,vpp=2,ep=32,mbs=1,recompute=mla_up_proj+moe_act,layout=Et*3|(tttt|)*14ttL,offload=activations"),
    ("kimi-k2", "h100", (1024, 4096), "tp=2,pp=16,vpp=2,ep=64,etp=1,mbs=1,recompute=full,layout=Et|(tt|)*30L,sharding=dist_opt"),
    ("qwen3-235b-a22b", "gb200-nvl72", (128, 2048), "tp=2,pp=2,ep=32,etp=1,mbs=1,recompute=moe_act,layout=Et*47|t*47L,grad_reduce=bf16"),
    ("qwen3-235b-a22b", "h100", (256, 2048), "tp=4,pp=8,ep=16,etp=1,mbs=1,recompute=full,layout=Et*11|(t*12|)*6t*11L,sharding=fsdp"),
    ("qwen3-235b-a22b", "h100", (256, 2048), "tp=2,pp=4,vpp=2,ep=8,etp=1,cp=2,mbs=1,recompute=core_attn+moe_act,layout=Et*11|(t*12|)*6t*11L,sharding=zero2"),
    ("llama3.1-405b", "h100", (1024, 1024), "tp=8,pp=8,vpp=2,cp=2,mbs=1,recompute=full:4,layout=Et*7|(t*8|)*14t*7L"),
    ("llama3.1-405b", "gb200-nvl72", (576, 1152), "tp=8,pp=9,mbs=1,recompute=full,layout=Et*13|(t*14|)*7t*15L,sharding=hsdp:4"),
    ("llama3.1-405b", "h100", (2048, 2048), "tp=8,pp=16,mbs=1,recompute=none,layout=Et*7|(t*8|)*14t*7L,sharding=ddp,precision=fp8"),
]


def resolve(model_name: str, hw_name: str, gpus: int, gbs: int, plan: str, seq_len: int = 4096):
    """(model, hw, job, export-canonical plan, setup)."""
    from planner.cost.setup import resolve_setup
    from planner.launchers.common import export_canonical

    m, h = model(model_name), hw(hw_name)
    p = Plan.parse(plan)
    j = job(gpus, gbs, seq_len, precisions=("fp8", "bf16") if p.precision == "fp8" else ("bf16",))
    canon = export_canonical(p, m, h, j)
    return m, h, j, canon, resolve_setup(m, h, j, canon)
