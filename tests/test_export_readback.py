"""Reading Megatron launch scripts back: export -> read back gives the same plan, job and
predictions; hand-written scripts (continuations, variables, arrays, torchrun) are understood and
whatever planner does not model is listed."""

from __future__ import annotations

import pytest
from tests._export_specs import TOP_PLANS, model, resolve

from planner.cost.setup import resolve_setup
from planner.errors import PlannerError
from planner.launchers.common import export_canonical, predictions
from planner.launchers.megatron.write import export_megatron
from planner.launchers.megatron.model import hint_mismatches, match_catalog_model, model_from_hints
from planner.launchers.megatron.read import parse_megatron_argv, plan_from_megatron_args, read_script


@pytest.mark.parametrize("case", TOP_PLANS, ids=lambda c: f"{c[0]}-{c[1]}-{c[3][:30]}")
def test_export_then_read_back_is_the_same_plan(case):
    m, h, j, plan, setup = resolve(case[0], case[1], *case[2], case[3])
    back = plan_from_megatron_args(export_megatron(setup))
    job, plan2, hints, unknown = back
    assert unknown == [] and back.unresolved == [] and back.notes == []
    assert job == {"gpus": j.gpus, "global_batch": j.global_batch, "seq_len": j.seq_len,
                   "precisions": [setup.precision]}
    canon = export_canonical(plan2, m, h, j)
    assert canon == plan, (canon.to_string(), plan.to_string())
    assert hint_mismatches(m, hints) == []
    # Same plan, same predictions (whatever parts of the cost model are installed).
    assert predictions(resolve_setup(m, h, j, canon)) == predictions(setup)


def test_read_back_finds_the_catalog_model():
    *_, setup = resolve(*TOP_PLANS[0][:2], *TOP_PLANS[0][2], TOP_PLANS[0][3])
    back = plan_from_megatron_args(export_megatron(setup))
    model_, note = match_catalog_model(back.model_hints)
    assert model_.name == "deepseek-v3" and note is None


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "llama3.1-405b", "kimi-k2"])
def test_model_from_flags_has_the_same_parameters(name):
    case = next(c for c in TOP_PLANS if c[0] == name)
    m, h, j, plan, setup = resolve(case[0], case[1], *case[2], case[3])
    back = plan_from_megatron_args(export_megatron(setup))
    built = model_from_hints(back.model_hints)
    assert built.params.total == m.params.total
    assert built.layer_kinds == m.layer_kinds


def test_mismatch_is_reported():
    *_, setup = resolve(*TOP_PLANS[0][:2], *TOP_PLANS[0][2], TOP_PLANS[0][3])
    text = export_megatron(setup).replace("--num-layers 61", "--num-layers 62").replace("[1]*58", "[1]*59")
    back = plan_from_megatron_args(text)
    assert "num_layers: flags say 62, deepseek-v3 has 61" in hint_mismatches(model("deepseek-v3"), back.model_hints)


HAND_WRITTEN = r"""#!/bin/bash
# A typical hand-written launcher.
set -ex
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-4}
TP=2
PP=4
CHECKPOINT_PATH=$1

GPT_ARGS=(
    --num-layers 32 --hidden-size 4096   # inline comment
    --num-attention-heads 32
    --group-query-attention --num-query-groups 8
    --ffn-hidden-size 14336 --swiglu
    --seq-length 8192 --max-position-embeddings=131072
    --normalization RMSNorm --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear
    --vocab-size 128256
)
PARALLEL_ARGS="--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} --sequence-parallel"

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --master_addr $MASTER_ADDR \
    pretrain_gpt.py \
    "${GPT_ARGS[@]}" $PARALLEL_ARGS \
    --micro-batch-size 2 --global-batch-size 512 \
    --recompute-activations \
    --use-distributed-optimizer --overlap-grad-reduce \
    --lr 3e-4 --save $CHECKPOINT_PATH --tokenizer-model $TOKENIZER \
    --moe-shared-expert-overlap --my-custom-flag 3 \
    --bf16
"""


def test_hand_written_script():
    r = plan_from_megatron_args(HAND_WRITTEN)
    job, plan, hints, unknown = r
    assert r.launcher["--nproc-per-node"] == "8" and r.launcher["--nnodes"] == "4"
    assert job == {"gpus": 32, "global_batch": 512, "seq_len": 8192, "precisions": ["bf16"]}
    assert (plan.tp, plan.pp, plan.mbs, plan.sharding, plan.recompute) == (2, 4, 2, "dist_opt", "core_attn")
    assert r.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert "$1" in r.unresolved and "$MASTER_ADDR" in r.unresolved and "$TOKENIZER" in r.unresolved
    assert "--my-custom-flag 3 (not a megatron-core 0.19.2 flag)" in unknown
    assert "--moe-shared-expert-overlap (not modeled by planner)" in unknown
    assert "--lr" in r.ignored_flags and "--save" in r.ignored_flags
    assert hints["attention"] == {"kind": "gqa", "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                                  "qk_norm": False, "qkv_bias": False, "output_bias": False}
    assert hints["max_position_embeddings"] == 131072 and hints["ffn"] == {"activation": "swiglu", "hidden_size": 14336, "bias": False}


def test_bare_argument_list_and_argv():
    text = "--tensor-model-parallel-size 4 \\\n  --pipeline-model-parallel-size 2 --micro-batch-size 1 --seq-length 4096\n"
    r = plan_from_megatron_args(text, gpus=64)
    assert (r.plan.tp, r.plan.pp) == (4, 2) and r.job["gpus"] == 64 and r.job["global_batch"] == 8
    r2 = plan_from_megatron_args(["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
                                  "--micro-batch-size", "1", "--seq-length", "4096"], gpus=64)
    assert r2.plan == r.plan


def test_python_m_torch_distributed_run_and_prefix_env():
    text = ("NVTE_CPU_OFFLOAD_V1=1 python -m torch.distributed.run --nproc-per-node=4 --nnodes=2 "
            "/opt/Megatron-LM/pretrain_gpt.py --micro-batch-size 1 --fine-grained-activation-offloading "
            "--offload-modules core_attn attn_proj --seq-length 2048")
    r = plan_from_megatron_args(text)
    assert r.job["gpus"] == 8 and r.env["NVTE_CPU_OFFLOAD_V1"] == "1" and r.plan.offload == "activations"


@pytest.mark.parametrize("flags,expect", [
    ("--pipeline-model-parallel-size 8 --num-layers 61 --decoder-first-pipeline-num-layers 5 "
     "--decoder-last-pipeline-num-layers 8 --mtp-num-layers 1", "Ettttt|(tttttttt|)*6ttttttttmL"),
    ("--pipeline-model-parallel-size 4 --num-layers 30 --account-for-embedding-in-pipeline-split "
     "--account-for-loss-in-pipeline-split", "Ettttttt|tttttttt|tttttttt|tttttttL"),
    ("--pipeline-model-parallel-size 2 --num-layers 8 --num-layers-per-virtual-pipeline-stage 2", None),
])
def test_pipeline_flags_to_layout(flags, expect):
    r = plan_from_megatron_args(flags.split() + ["--micro-batch-size", "1"], gpus=16)
    assert r.plan.layout == expect
    if expect is None:
        assert r.plan.vpp == 2


@pytest.mark.parametrize("flags,key,value", [
    ("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1", "recompute", "full"),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 3", "recompute", "full:3"),
    ("--recompute-granularity selective", "recompute", "core_attn"),
    ("--moe-layer-recompute --num-experts 8", "recompute", "moe"),
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", "sharding", "zero2"),
    ("--use-megatron-fsdp --num-distributed-optimizer-instances 4", "sharding", "hsdp:4"),
    ("--optimizer-cpu-offload --use-precision-aware-optimizer", "offload", "optimizer"),
    ("--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", "moments", "bf16"),
    ("--fp8-format e4m3 --fp8-recipe blockwise", "precision", "fp8"),
    ("--num-experts 8 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", "dispatcher", "hybridep"),
    ("--num-experts 8 --moe-token-dispatcher-type flex --moe-enable-deepep", "dispatcher", "deepep"),
    ("--num-experts 8 --expert-model-parallel-size 2 --overlap-moe-expert-parallel-comm", "ep_overlap", "on"),
])
def test_flag_to_plan_key(flags, key, value):
    r = plan_from_megatron_args(flags.split() + ["--micro-batch-size", "1"], gpus=16)
    assert r.plan.to_json().get(key) == value  # the plan's string form


def test_approximations_are_noted():
    r = plan_from_megatron_args("--num-experts 8 --recompute-granularity full --recompute-method uniform "
                                "--recompute-num-layers 2 --optimizer-cpu-offload --optimizer-offload-fraction 0.5".split(),
                                gpus=8)
    assert any("uniform groups of 2" in n for n in r.notes)
    assert any("allgather" in n for n in r.notes)
    assert any("offload-fraction 0.5" in n for n in r.notes)


def test_parse_uses_megatron_arities():
    p = parse_megatron_argv(["--recompute-modules", "core_attn", "mlp", "--no-overlap-p2p-communication",
                             "--rampup-batch-size", "16", "16", "1000", "--bf16"])
    assert p.values["recompute_modules"] == ["core_attn", "mlp"]
    assert p.values["overlap_p2p_comm"] is False
    assert p.values["rampup_batch_size"] == ["16", "16", "1000"] and p.values["bf16"] is True


def test_no_command_is_an_error():
    with pytest.raises(PlannerError, match="no Megatron command"):
        read_script("echo hello\nls -l\n")


SEARCHED = [
    ("deepseek-v3", "h100", 1024, 8192, 4096),
    ("deepseek-v3", "gb200-nvl72", 256, 8192, 4096),
    ("kimi-k2", "h200", 512, 4096, 4096),
    ("kimi-k2", "gb200-nvl72", 512, 4096, 4096),
    ("qwen3-235b-a22b", "h100", 256, 1024, 4096),
    ("qwen3-235b-a22b", "gb300-nvl72", 256, 1024, 4096),
    ("llama3.1-405b", "h100", 1024, 1024, 8192),
    ("llama3.1-405b", "b200", 512, 512, 8192),
]


@pytest.mark.parametrize("case", SEARCHED, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_searched_top_plans_export_and_read_back_unchanged(case):
    """The top plans `planner search` ranks, exported to Megatron-LM and read back: the same
    canonical plan, the same job, the same predictions (issue 10's acceptance)."""
    from planner.search.driver import Options, run_search
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job

    name, hw, gpus, gb, seq = case
    m, h = load_model(name), load_hardware(hw)
    j = Job(gpus=gpus, global_batch=gb, seq_len=seq)
    res = run_search(m, h, j, Options(top=3, per_stage=False))
    assert res.plans
    for ranked in res.plans:
        setup = ranked.setup
        back = plan_from_megatron_args(export_megatron(setup))
        job, plan2, hints, unknown = back
        assert unknown == [] and back.unresolved == []
        assert (job["gpus"], job["global_batch"], job["seq_len"]) == (gpus, gb, seq)
        canon = export_canonical(plan2, m, h, j)
        assert canon == export_canonical(setup.plan, m, h, j), (canon.to_string(), setup.plan.to_string())
        assert predictions(resolve_setup(m, h, j, canon)) == predictions(setup)
