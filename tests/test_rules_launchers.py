"""One test per launcher rule: a plan (or command line) that breaks exactly that check is caught,
under the rule's name. The meta-test at the bottom fails when a rule has no case here."""

from __future__ import annotations

import pytest
from tests._export_specs import TOP_PLANS, hw, job, model, resolve

from planner.launchers.megatron import rules as megatron_rules
from planner.launchers.megatron.read import plan_from_megatron_args
from planner.launchers.megatron.rules import ARGS_RULES, args_violations
from planner.launchers.torchtitan import rules as torchtitan_rules
from planner.launchers.torchtitan.rules import torchtitan_batch_violations
from planner.launchers.registry import check_launcher_rules, launcher_violations
from planner.rules import SHARED_RULES, model_violations, shape_violations
from planner.errors import PlanRuleError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

V3 = "deepseek-v3"
L4 = "Et*15|t*15|t*15|t*16mL"  # deepseek-v3 over pp=4


def _variant(name: str, **changes) -> ModelSpec:
    base = model(name).model_dump()
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            base[outer] = {**base[outer], inner: value}
        else:
            base[key] = value
    return ModelSpec.model_validate(base)


def _small_dense(**changes) -> ModelSpec:
    data = dict(name="small", source=["test"], hidden_size=1024, num_layers=8, vocab_size=32000,
                attention=dict(kind="gqa", num_heads=16, num_kv_heads=16, head_dim=64),
                ffn=dict(activation="swiglu", hidden_size=4096))
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            data[outer] = {**data[outer], inner: value}
        else:
            data[key] = value
    return ModelSpec.model_validate(data)


def _hw_variant(name: str, **changes) -> HardwareSpec:
    d = hw(name).model_dump()
    d.update({k: v for k, v in changes.items() if k != "no_fp8"})
    if changes.get("no_fp8"):
        d["gpu"]["peak_flops"].pop("fp8")
        d["fp8_recipe"] = None
    return HardwareSpec.model_validate(d)


# rule -> (model, hardware, (gpus, global batch[, seq]), plan, target)
L8 = "Et*7|(t*8|)*6t*6mL"
"""DeepSeek-V3's 61 layers over 8 stages (pp=4, vpp=2 or a V of two stages per rank)."""

PLAN_CASES = {
    "world-divisibility": (V3, "gb200-nvl72", (256, 8192), "tp=3", "megatron"),
    "dp-mismatch": (V3, "gb200-nvl72", (256, 8192), "dp=7,ep=8", "megatron"),
    "expert-world-divisibility": (V3, "gb200-nvl72", (96, 96), "ep=64", "megatron"),
    "heads-divisible-by-tp": (V3, "gb200-nvl72", (256, 256), "tp=256", "megatron"),
    "kv-heads-tp": (_small_dense(**{"attention.num_heads": 12, "attention.num_kv_heads": 6}), "h100", (8, 64), "tp=4", "megatron"),
    "experts-divisible-by-ep": (V3, "gb200-nvl72", (96, 96), "ep=48", "megatron"),
    "expert-ffn-divisible-by-etp": ("qwen3-235b-a22b", "h100", (1024, 1024), "etp=1024", "megatron"),
    "ffn-divisible-by-tp": (_small_dense(**{"ffn.hidden_size": 1000}), "h100", (16, 64), "tp=16", "megatron"),
    "global-batch-divisible": (V3, "gb200-nvl72", (256, 100), "ep=64", "megatron"),
    "seq-divisible-by-2cp": (V3, "gb200-nvl72", (256, 8192, 4098), "cp=2,ep=64", "megatron"),
    "precision-allowed": (V3, "gb200-nvl72", (256, 8192), "ep=64,precision=fp8", "megatron"),
    "fp8-hardware": (V3, _hw_variant("h100", no_fp8=True), (256, 8192, 4096, ("fp8",)), "ep=64,precision=fp8", "megatron"),
    "hsdp-group": (V3, "gb200-nvl72", (256, 8192), "ep=64,sharding=hsdp:3", "megatron"),
    "param-gather-fp8": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,param_gather=fp8", "megatron"),
    "param-gather-fp4": ("llama3.1-405b", "gb200-nvl72", (128, 128), "tp=8,pp=2,param_gather=fp4", "megatron"),
    "nvfp4-hardware": ("llama3.1-405b", "h100", (128, 128, 4096, ("nvfp4",)), "tp=8,pp=2,precision=nvfp4", "megatron"),
    "param-gather-sharded": ("llama3.1-405b", "h100", (128, 128, 4096, ("fp8",)),
                             "tp=8,pp=2,precision=fp8,sharding=ddp,param_gather=fp8", "megatron"),
    "offload-fp8-param-gather": (V3, "gb200-nvl72", (256, 8192, 4096, ("fp8",)),
                                 "ep=64,precision=fp8,param_gather=fp8,offload=optimizer", "megatron"),
    "cuda-graphs-full-recompute": ("llama3.1-70b", "h100", (64, 512), "tp=8,recompute=full,cuda_graphs=scoped:layer", "megatron"),
    "cuda-graphs-dropless-moe": ("qwen3-30b-a3b", "h100", (64, 512), "ep=8,cuda_graphs=scoped:attn+moe", "megatron"),
    "cuda-graphs-full-iteration-moe": ("qwen3-30b-a3b", "h100", (64, 512), "ep=8,dispatcher=alltoall,cuda_graphs=full_iteration",
                                       "megatron"),
    "cuda-graphs-static-experts": ("qwen3-30b-a3b", "h100", (64, 512), "ep=8,dispatcher=hybridep,cuda_graphs=full_iteration",
                                   "megatron"),
    "cuda-graphs-preprocess-router": ("qwen3-30b-a3b", "h100", (64, 512), "ep=8,cuda_graphs=scoped:attn+moe_preprocess", "megatron"),
    "cuda-graphs-module-absent": ("llama3.1-70b", "h100", (64, 512), "tp=8,cuda_graphs=scoped:attn+moe_router", "megatron"),
    "cuda-graphs-ep-overlap": (V3, "gb200-nvl72", (256, 8192), "ep=64,ep_overlap=on,cuda_graphs=scoped:attn+mlp", "megatron"),
    "recompute-mla": ("qwen3-235b-a22b", "h100", (256, 2048), "tp=2,pp=2,ep=16,etp=1,layout=Et*47|t*47L,recompute=mla_up_proj", "megatron"),
    "recompute-moe": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,recompute=moe_act", "megatron"),
    "recompute-shared": ("qwen3-235b-a22b", "h100", (256, 2048), "tp=2,pp=2,ep=16,etp=1,layout=Et*47|t*47L,recompute=shared_experts", "megatron"),
    "recompute-op-layers": ("qwen3-30b-a3b", "h100", (64, 512), "ep=8,sharding=fsdp,recompute=op", "torchtitan"),
    "recompute-op-offload": ("llama3.1-70b", "h100", (64, 512), "tp=8,sharding=fsdp,recompute=op,offload=activations", "torchtitan"),
    "megatron-recompute-op": ("llama3.1-70b", "h100", (64, 512), "tp=8,recompute=op", "megatron"),
    "ep-overlap-needs-vpp": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,ep_overlap=on,layout={L4}", "megatron"),
    "ep-overlap-recompute": (V3, "gb200-nvl72", (256, 8192), "ep=64,ep_overlap=on,recompute=full", "megatron"),
    "layers-divisible": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64", "megatron"),
    "layout-stages": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=Et*10|(t*10|)*4t*11mL", "megatron"),
    "layout-vpp": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=Et*7|(t*8|)*6t*6mL", "megatron"),
    "layout-embedding": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=t*15|t*15|t*15|t*16mL", "megatron"),
    "layout-loss": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=Et*15|t*15|t*15|t*16m", "megatron"),
    "layout-layers": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=Et*15|t*15|t*15|t*15mL", "megatron"),
    "layout-mtp": (V3, "gb200-nvl72", (256, 8192), "pp=4,ep=64,layout=Et*15|t*15|t*15|t*16L", "megatron"),
    "megatron-layout-syntax": (V3, "gb200-nvl72", (256, 8192), "pp=16,vpp=2,ep=16,layout=Et|((tt|)*5)*6mL", "megatron"),
    "layout-mtp-together": (_variant(V3, mtp_layers=2), "gb200-nvl72", (256, 8192), "pp=2,ep=64,layout=Et*61m|mL", "megatron"),
    "megatron-stage-recompute": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,layout={L4},stage_recompute=2/1/0/0", "megatron"),
    "ep-overlap-recompute-moe": (V3, "gb200-nvl72", (256, 8192), "ep=64,ep_overlap=on,recompute=moe", "megatron"),
    "ep-overlap-mtp": (_variant(V3, mtp_layers=2), "gb200-nvl72", (256, 8192), "ep=64,ep_overlap=on", "megatron"),
    "schedule-needs-pp": (V3, "gb200-nvl72", (256, 8192), "ep=64,schedule=zbv", "any"),
    "schedule-vpp": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,schedule=zbv,layout={L4}", "any"),
    "dualpipe-shape": (V3, "gb200-nvl72", (256, 8128), f"pp=4,ep=64,schedule=dualpipe,layout={L4}", "any"),
    "dualpipev-microbatches": (V3, "gb200-nvl72", (256, 256), f"pp=4,vpp=2,ep=64,schedule=dualpipev,layout={L8}", "any"),
    "zero-bubble-rounds": (V3, "gb200-nvl72", (256, 576), f"pp=4,vpp=2,ep=64,schedule=zb-h1,layout={L8}", "any"),
    "ep-overlap-schedule": (V3, "gb200-nvl72", (256, 8192), f"pp=4,vpp=2,ep=64,schedule=zbv,ep_overlap=on,layout={L8}", "any"),
    "ep-overlap-wgrad": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,schedule=dualpipe,ep_overlap=wgrad,layout={L4}", "any"),
    "ep-overlap-groups": (V3, "gb200-nvl72", (256, 384), f"pp=4,vpp=2,ep=64,ep_overlap=on,layout={L8}", "any"),
    "megatron-interleaved-groups": (V3, "gb200-nvl72", (256, 384), f"pp=4,vpp=2,ep=64,layout={L8}", "megatron"),
    "megatron-schedule": (V3, "gb200-nvl72", (256, 8192), f"pp=4,vpp=2,ep=64,schedule=zbv,layout={L8}", "megatron"),
    "torchtitan-schedule": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,schedule=dualpipe,layout={L4}", "torchtitan"),
    "torchtitan-stages-per-rank": (V3, "gb200-nvl72", (256, 8192), f"pp=4,ep=64,schedule=zb-h1,layout={L4}", "torchtitan"),
    "precision-aware-needs-dist-opt": (V3, "gb200-nvl72", (256, 8192), "ep=64,sharding=ddp,moments=bf16", "megatron"),
    "activation-offload-empty": (V3, "gb200-nvl72", (256, 8192), "ep=64,offload=activations,recompute=full", "megatron"),
    "fp8-delayed-recompute": (V3, _hw_variant("h100", fp8_recipe="delayed"), (256, 8192, 4096, ("fp8",)),
                              "ep=64,precision=fp8,recompute=layernorm", "megatron"),
    "expert-bias-score-function": (_variant(V3, **{"moe.score_function": "softmax"}), "gb200-nvl72", (256, 8192), "ep=64", "megatron"),
    "moe-bias-etp": (_variant("qwen3-235b-a22b", **{"moe.expert_bias": True}), "h100", (256, 2048), "tp=2,ep=16,pp=2,layout=Et*47|t*47L", "megatron"),
    "mtp-position-embedding": (_variant(V3, position_embedding="learned"), "gb200-nvl72", (256, 8192), "ep=64", "megatron"),
    "seq-exceeds-max-position": (_small_dense(position_embedding="learned", max_position_embeddings=2048), "h100", (8, 64, 4096), "tp=1", "megatron"),
    "hsdp-expert-dp": (V3, "gb200-nvl72", (256, 8192), "ep=64,sharding=hsdp:32", "megatron"),
    "sp-seq-divisible": ("llama3.1-405b", "h100", (64, 64, 4100), "tp=8,pp=2", "megatron"),
    "torchtitan-model": ("kimi-k2", "gb200-nvl72", (256, 4096), "ep=64,sharding=fsdp,dispatcher=alltoall", "torchtitan"),
    "torchtitan-mtp": (V3, "gb200-nvl72", (256, 8192), "ep=64,sharding=fsdp,dispatcher=alltoall", "torchtitan"),
    "torchtitan-etp": ("qwen3-235b-a22b", "h100", (256, 2048), "tp=2,pp=2,ep=16,layout=Et*47|t*47L,sharding=fsdp,dispatcher=alltoall", "torchtitan"),
    "torchtitan-ep-grid": ("qwen3-235b-a22b", "h100", (256, 2048), "ep=128,sharding=hsdp:64,dispatcher=alltoall", "torchtitan"),
    "torchtitan-sharding": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2", "torchtitan"),
    "torchtitan-hsdp": ("llama3.1-405b", "h100", (128, 128), "tp=8,cp=4,sharding=hsdp:2", "torchtitan"),
    "torchtitan-recompute-modules": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp,recompute=core_attn", "torchtitan"),
    "torchtitan-recompute-layers": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp,recompute=full:1", "torchtitan"),
    "torchtitan-stage-recompute": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp,stage_recompute=3/1", "torchtitan"),
    "torchtitan-offload": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp,offload=optimizer", "torchtitan"),
    "torchtitan-fp8": ("llama3.1-405b", "h100", (128, 128, 4096, ("fp8",)), "tp=8,pp=2,sharding=fsdp,precision=fp8", "torchtitan"),
    "torchtitan-nvfp4": ("llama3.1-405b", "gb200-nvl72", (128, 128, 4096, ("nvfp4",)),
                         "tp=8,pp=2,sharding=fsdp,precision=nvfp4", "torchtitan"),
    "torchtitan-dispatcher": ("qwen3-235b-a22b", "h100", (256, 2048), "ep=16,sharding=fsdp,dispatcher=deepep", "torchtitan"),
    "torchtitan-ep-overlap": ("qwen3-235b-a22b", "h100", (256, 2048), "ep=16,pp=2,vpp=2,sharding=fsdp,dispatcher=alltoall,ep_overlap=on,layout=Et*23|(t*24|)*2t*23L", "torchtitan"),
    "torchtitan-precision": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp", "torchtitan"),
    "torchtitan-grad-reduce": ("llama3.1-405b", "h100", (128, 128), "tp=8,pp=2,sharding=fsdp,grad_reduce=bf16", "torchtitan"),
    "torchtitan-param-gather": ("llama3.1-405b", "h100", (128, 128, 4096, ("fp8",)),
                                "tp=8,pp=2,sharding=fsdp,precision=fp8,param_gather=fp8", "torchtitan"),
    "torchtitan-seq-divisor": ("llama3.1-405b", "h100", (128, 128, 4100), "tp=8,pp=2,sharding=fsdp", "torchtitan"),
}

# Rules no canonical plan can reach; model_violations still enforces them on the plans it is given.
DIRECT_CASES = {
    "vpp-needs-pp": (V3, "vpp=2,ep=64"),
    "ep-needs-moe": ("llama3.1-405b", "tp=8,pp=2,ep=2"),
    "ep-overlap-needs-ep": (V3, "ep_overlap=on"),
}


def _setup_args(case):
    m, h, j, plan, target = case
    m = model(m) if isinstance(m, str) else m
    h = hw(h) if isinstance(h, str) else h
    j = job(*j)
    return m, h, j, Plan.parse(plan), target


@pytest.mark.parametrize("rule", sorted(PLAN_CASES))
def test_plan_rule_fires(rule):
    m, h, j, plan, target = _setup_args(PLAN_CASES[rule])
    found = launcher_violations(plan, m, j, target, hw=h)
    assert rule in [v.rule for v in found], [(v.rule, v.message) for v in found]
    with pytest.raises(PlanRuleError) as exc:
        check_launcher_rules(plan, m, j, target, hw=h)
    assert f"[{found[0].rule}]" in str(exc.value)
    assert "\n" not in exc.value.paragraph() and "Traceback" not in exc.value.paragraph()


@pytest.mark.parametrize("rule", sorted(DIRECT_CASES))
def test_direct_rule_fires(rule):
    name, text = DIRECT_CASES[rule]
    m, h, j = model(name), hw("gb200-nvl72"), job(256, 8192)
    plan = Plan.parse(text)
    # Plan.canonical clears these keys (vpp without pp, ep on a dense model, overlap without EP),
    # so export never emits them; model_violations still refuses them when given as they are.
    found = shape_violations(m, plan) + model_violations(m, h, j, plan, plan.degrees(j.gpus))
    assert rule in [v.rule for v in found]


@pytest.mark.parametrize("case", TOP_PLANS, ids=lambda c: f"{c[0]}-{c[1]}-{c[3][:30]}")
def test_top_plans_pass_megatron(case):
    m, h, j, plan, setup = resolve(case[0], case[1], *case[2], case[3])
    assert launcher_violations(setup, target="megatron") == []
    assert launcher_violations(plan, m, j, "any", hw=h) == []


def test_any_target_keeps_only_shared_rules():
    m, h, j = model(V3), hw("gb200-nvl72"), job(256, 8192)
    plan = Plan.parse(f"pp=4,ep=64,layout={L4},stage_recompute=2/1/0/0")
    assert launcher_violations(plan, m, j, "any", hw=h) == []
    assert [v.rule for v in launcher_violations(plan, m, j, "megatron", hw=h)] == ["megatron-stage-recompute"]


def test_torchtitan_batch_rule():
    assert [v.rule for v in torchtitan_batch_violations(1024, 6, 16, pp=8, pp_microbatch=4)] == ["torchtitan-batch"] * 2
    assert torchtitan_batch_violations(1024, 64, 16, pp=8, pp_microbatch=2) == []


def test_violation_lists_every_rule_in_one_paragraph():
    m, h, j = model("llama3.1-405b"), hw("h100"), job(128, 128)
    plan = Plan.parse("tp=8,pp=2,recompute=core_attn,offload=optimizer")
    with pytest.raises(PlanRuleError) as exc:
        check_launcher_rules(plan, m, j, "torchtitan", hw=h)
    text = exc.value.paragraph()
    assert exc.value.rule == "torchtitan-sharding"
    for rule in ("torchtitan-recompute-modules", "torchtitan-offload"):
        assert f"[{rule}]" in text


# ---- command-line rules --------------------------------------------------------------------

BASE = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
        "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 64 --bf16").split()
MOE = "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024 --expert-model-parallel-size 2".split()

# rule -> (extra flags, environment, gpus, hardware)
ARGS_CASES = {
    "vpp-args-exclusive": ("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                           "--pipeline-model-parallel-layout Ett|tt|tt|ttL", {}, 8, None),
    "vpp-layers-per-stage-uneven": ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
                                    "--decoder-first-pipeline-num-layers 4", {}, 8, None),
    "vpp-layers-per-stage": ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3", {}, 8, None),
    "uneven-pp": ("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 1", {}, 8, None),
    "uneven-pp-vpp": ("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                      "--decoder-first-pipeline-num-layers 3", {}, 8, None),
    "layout-conflict": ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Etttt|ttttL "
                        "--decoder-first-pipeline-num-layers 4", {}, 8, None),
    "account-for-conflict": ("--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split "
                             "--decoder-first-pipeline-num-layers 4", {}, 8, None),
    "overlap-param-gather-needs-grad-reduce": ("--use-distributed-optimizer --overlap-param-gather", {}, 8, None),
    "overlap-param-gather-needs-dist-opt": ("--overlap-grad-reduce --overlap-param-gather", {}, 8, None),
    "optimizer-offload-needs-precision-aware": ("--use-distributed-optimizer --optimizer-cpu-offload", {}, 8, None),
    "optimizer-offload-fp8-param-gather": ("--use-distributed-optimizer --use-precision-aware-optimizer "
                                           "--optimizer-cpu-offload --fp8-format e4m3 --fp8-recipe blockwise "
                                           "--fp8-param-gather", {}, 8, None),
    "precision-aware-needs-dist-opt": ("--use-precision-aware-optimizer", {}, 8, None),
    "moments-dtype-needs-precision-aware": ("--use-distributed-optimizer --exp-avg-dtype bf16", {}, 8, None),
    "fp8-param-gather-needs-dist-opt": ("--fp8-format e4m3 --fp8-param-gather", {}, 8, None),
    "recompute-selective-method": ("--recompute-granularity selective --recompute-method uniform", {}, 8, None),
    "recompute-selective-num-layers": ("--recompute-activations --recompute-num-layers 1", {}, 8, None),
    "recompute-full-method": ("--recompute-granularity full --recompute-num-layers 1", {}, 8, None),
    "recompute-full-num-layers": ("--recompute-granularity full --recompute-method block", {}, 8, None),
    "recompute-moe-act-grouped-gemm": (" ".join(MOE) + " --recompute-granularity selective --recompute-modules moe_act", {}, 8, None),
    "moe-layer-recompute-full": (" ".join(MOE) + " --recompute-granularity full --recompute-method uniform "
                                 "--recompute-num-layers 1 --moe-layer-recompute", {}, 8, None),
    "distribute-saved-activations": ("--tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full "
                                     "--recompute-method uniform --recompute-num-layers 1 --distribute-saved-activations",
                                     {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8, None),
    "tp-comm-overlap-needs-sp": ("--tensor-model-parallel-size 2 --tp-comm-overlap", {}, 8, None),
    "megatron-fsdp-ckpt-format": ("--use-megatron-fsdp", {}, 8, None),
    "megatron-fsdp-cuda-connections": ("--use-megatron-fsdp --ckpt-format fsdp_dtensor",
                                       {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8, None),
    "cuda-device-max-connections": ("--tensor-model-parallel-size 2 --sequence-parallel", {}, 8, "h100"),
    "fine-grained-offload-env": ("--fine-grained-activation-offloading --offload-modules core_attn", {}, 8, None),
    "fine-grained-offload-modules": ("--fine-grained-activation-offloading --offload-modules attn_proj",
                                     {"NVTE_CPU_OFFLOAD_V1": "1"}, 8, None),
    "fine-grained-offload-with-cpu-offloading": ("--fine-grained-activation-offloading --offload-modules core_attn "
                                                 "--cpu-offloading-num-layers 2", {"NVTE_CPU_OFFLOAD_V1": "1"}, 8, None),
    "cpu-offloading-layers": ("--pipeline-model-parallel-size 2 --cpu-offloading-num-layers 2", {}, 8, None),
    "deepep-needs-flex": (" ".join(MOE) + " --moe-token-dispatcher-type alltoall --moe-enable-deepep", {}, 8, None),
    "shared-expert-overlap-dispatcher": (" ".join(MOE) + " --moe-shared-expert-intermediate-size 1024 "
                                         "--moe-shared-expert-overlap", {}, 8, None),
    "ep-overlap-shared-expert-overlap": (" ".join(MOE) + " --moe-token-dispatcher-type alltoall "
                                         "--moe-shared-expert-intermediate-size 1024 --moe-shared-expert-overlap "
                                         "--overlap-moe-expert-parallel-comm", {}, 8, None),
    "delay-wgrad-needs-ep-overlap": (" ".join(MOE) + " --delay-wgrad-compute", {}, 8, None),
    "router-topk1-pre-softmax": ("--num-experts 8 --moe-router-topk 1", {}, 8, None),
    "hierarchical-cp": ("--context-parallel-size 4 --cp-comm-type a2a+p2p", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8, None),
    "expert-dp-order": (" ".join(MOE) + " --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping", {}, 8, None),
    "mla-gqa-exclusive": ("--multi-latent-attention --group-query-attention --num-query-groups 4", {}, 8, None),
    "sequence-parallel-needs-tp": ("--sequence-parallel", {}, 8, None),
    # a value with blanks, as a quoted script argument gives it
    "moe-layer-freq-syntax": (MOE + ["--moe-layer-freq", "([0]*2 + [1]*6)"], {}, 8, None),
}


@pytest.mark.parametrize("rule", sorted(ARGS_CASES))
def test_args_rule_fires(rule):
    extra, env, gpus, hw_name = ARGS_CASES[rule]
    argv = BASE + (extra.split() if isinstance(extra, str) else extra)
    parsed = plan_from_megatron_args(argv, gpus=gpus)
    parsed.env.update(env)
    found = [v.rule for v in args_violations(parsed, hw(hw_name) if hw_name else None)]
    assert rule in found, found


def test_clean_command_line_has_no_args_violations():
    argv = BASE + ("--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
                   "--overlap-grad-reduce --overlap-param-gather --recompute-granularity full "
                   "--recompute-method block --recompute-num-layers 2").split()
    parsed = plan_from_megatron_args(argv, gpus=8)
    parsed.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    assert args_violations(parsed, hw("h100")) == []


def test_every_rule_has_a_case():
    # software-lever needs a --software release: its cases are in tests/test_software.py.
    covered = set(PLAN_CASES) | set(DIRECT_CASES) | set(ARGS_CASES) | {"torchtitan-batch", "software-lever"}
    rules = set(SHARED_RULES) | set(megatron_rules.PLAN_RULES) | set(torchtitan_rules.PLAN_RULES)
    missing = (rules | set(ARGS_RULES)) - covered
    assert not missing, f"rules without a test case: {sorted(missing)}"


def test_router_groups_are_the_model_specs_rule():
    """Experts that do not split into the router groups are refused when the model is built (for
    every launcher), so Megatron's TransformerConfig check needs no rule of its own here."""
    with pytest.raises(ValueError, match="equal groups"):
        _variant(V3, **{"moe.num_groups": 7})


def test_export_format_help_names_every_registered_format():
    """`export --format`'s help is written out by hand (importing the launcher registry at start-up
    would cost the CLI over a second): a format added to planner.launchers.registry must be named
    there too, or this fails."""
    import typer.main

    from planner.cli import _register, app
    from planner.launchers.registry import formats

    _register()
    export = typer.main.get_command(app).commands["export"]
    text = next(p.help for p in export.params if p.name == "fmt")
    missing = [f.name for f, _ in formats() if f.name not in text]
    assert not missing, f"export --format help lacks {missing}"


def test_launch_format_help_names_every_launcher_read_back():
    """`--launch-format`'s help (check and explain) is written out by hand for the same start-up reason:
    a launcher whose record reads launches back must be named there, or this fails."""
    import typer.main

    from planner.cli import _register, app
    from planner.launchers.registry import readable

    _register()
    commands = typer.main.get_command(app).commands
    for name in ("check", "explain"):
        text = next(p.help for p in commands[name].params if p.name == "launch_format")
        missing = [x.name for x in readable() if x.name not in text]
        assert not missing, f"{name} --launch-format help lacks {missing}"
