"""Megatron launch reader: what published launches of issue 20 need (found by `planner validate`).

- Megatron-MoE-ModelZoo's Qwen3 runs give --num-layers-per-virtual-pipeline-stage with
  --account-for-embedding/loss-in-pipeline-split: Megatron's validate_args counts the embedding
  and the loss as layers when it derives the virtual-stage count (megatron/training/arguments.py,
  "Uneven virtual pipeline parallelism").
- Launches built from a recipe whose model provider sets the architecture (Megatron-Bridge) carry
  no --num-layers: the pipeline flags are then read with the named model's layer count.
- Their MoE flags carry no --num-experts either: the dispatcher flags still say which dispatcher runs.
"""

from __future__ import annotations

from planner.launchers.megatron.read import job_from_script, plan_from_megatron_args
from planner.specs.layout import parse_layout


def test_layers_per_virtual_stage_count_embedding_and_loss():
    argv = ("--num-layers 94 --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 3 "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split").split()
    plan = plan_from_megatron_args(argv).plan
    assert plan.vpp == 4  # (94 + 2) / 8 / 3
    stages = parse_layout(plan.layout)
    assert len(stages) == 32
    assert stages[0] == "Ett" and stages[-1] == "ttL"


def test_pipeline_flags_without_num_layers_use_the_named_model():
    text = ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 8 "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --seq-length 8192 "
            "--global-batch-size 1536 --micro-batch-size 1 --context-parallel-size 2 --bf16")
    sj = job_from_script(text, model="llama3.1-405b", hw="h100", gpus=1024)
    assert sj.plan.vpp == 8
    stages = parse_layout(sj.plan.layout)
    assert len(stages) == 64 and sum(s.count("t") for s in stages) == 126
    assert stages[0] == "Et" and stages[-1] == "tL"


def test_dispatcher_flags_without_num_experts():
    text = ("--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --seq-length 4096 "
            "--global-batch-size 512 --micro-batch-size 1 --bf16")
    sj = job_from_script(text, model="qwen3-30b-a3b", hw="h100", gpus=8)
    assert sj.plan.dispatcher == "alltoall"  # not the H100's default (deepep)
    text = text.replace("alltoall", "flex --moe-flex-dispatcher-backend hybridep")
    assert job_from_script(text, model="qwen3-30b-a3b", hw="h100", gpus=8).plan.dispatcher == "hybridep"
