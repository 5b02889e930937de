"""torchtitan 0.3.0 invocation: the mapping of degrees, batch and layout, and the refusal that names
what torchtitan lacks."""

from __future__ import annotations

import pytest
from tests._export_specs import resolve

from planner.errors import PlanRuleError
from planner.launchers.torchtitan.write import export_torchtitan, torchtitan_launch

LLAMA = ("llama3.1-405b", "h100", 1024, 1024)
# torchtitan's llama3_405b applies Float8 converters (torchtitan-precision): a bf16 plan names a
# user's config_registry function built on model_registry("405B") without them.
BF16_405B = "my_configs:llama3_405b_bf16"


def _opts(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    key = None
    for a in argv:
        if a.startswith("--"):
            key = a
            out[key] = []
        elif key is not None and not a.startswith("activation_checkpoint:"):
            out[key].append(a)
    return out


def test_llama_fsdp_pipeline():
    *_, setup = resolve(*LLAMA, "tp=8,pp=8,vpp=2,cp=2,mbs=1,sharding=fsdp,recompute=full,layout=Et*7|(t*8|)*14t*7L")
    launch = torchtitan_launch(setup, torchtitan_config=BF16_405B)
    argv = launch.argv()
    assert argv[:4] == ["--module", "my_configs", "--config", "llama3_405b_bf16"]
    assert argv[-1] == "activation_checkpoint:full"
    o = _opts(argv)
    assert o["--parallelism.data_parallel_shard_degree"] == ["8"]
    assert o["--parallelism.data_parallel_replicate_degree"] == ["1"]
    assert o["--parallelism.tensor_parallel_degree"] == ["8"] and o["--parallelism.context_parallel_degree"] == ["2"]
    assert o["--parallelism.pipeline_parallel_schedule"] == ["Interleaved1F1B"]
    # With PP, one local batch per step holds all micro-batches: global / dp = 1024 / 8.
    assert o["--training.local_batch_size"] == ["128"] and o["--parallelism.pipeline_parallel_microbatch_size"] == ["1"]
    parts = o["--parallelism.module_fqns_per_model_part"]
    assert len(parts) == 16
    assert parts[0] == "tok_embeddings," + ",".join(f"layers.{i}" for i in range(7))
    assert parts[-1].endswith("layers.125,norm,lm_head")
    assert "--training.disable_cuda_graphs" in o


@pytest.mark.parametrize("sharding,rep,shard,extra", [
    ("ddp", "128", "1", None),
    ("zero2", "1", "128", ["never"]),
    ("hsdp:16", "8", "16", None),
])
def test_sharding_mapping(sharding, rep, shard, extra):
    *_, setup = resolve(*LLAMA, f"tp=8,mbs=1,sharding={sharding}")
    o = _opts(torchtitan_launch(setup, torchtitan_config=BF16_405B).argv())
    assert o["--parallelism.data_parallel_replicate_degree"] == [rep]
    assert o["--parallelism.data_parallel_shard_degree"] == [shard]
    assert o.get("--parallelism.fsdp_reshard_after_forward") == extra
    # Without PP, local batch = mbs and the rest is gradient accumulation.
    assert o["--training.local_batch_size"] == ["1"] and "--parallelism.pipeline_parallel_schedule" not in o


def test_bf16_moments_and_moe():
    *_, setup = resolve("qwen3-235b-a22b", "h100", 256, 2048,
                        "ep=16,mbs=1,sharding=fsdp,moments=bf16,dispatcher=alltoall")
    launch = torchtitan_launch(setup, torchtitan_config="qwen3:qwen3_235b_a22b")
    o = _opts(launch.argv())
    assert o["--optimizer.implementation"] == ["fused_opt_states_bf16"]
    assert o["--parallelism.expert_parallel_degree"] == ["16"]
    assert launch.argv()[-1] == "activation_checkpoint:none"


def test_refusal_lists_what_torchtitan_lacks():
    *_, setup = resolve("deepseek-v3", "h100", 512, 4096,
                        "tp=2,pp=8,ep=32,mbs=1,recompute=moe_act,layout=Et*5|(t*8|)*6t*8mL,offload=optimizer")
    with pytest.raises(PlanRuleError) as exc:
        torchtitan_launch(setup)
    text = exc.value.paragraph()
    for rule in ("torchtitan-mtp", "torchtitan-etp", "torchtitan-sharding", "torchtitan-recompute-modules",
                 "torchtitan-offload", "torchtitan-dispatcher"):
        assert rule in text, rule
    assert text.startswith("[torchtitan-mtp] torchtitan would reject this plan")


def test_script_text():
    *_, setup = resolve(*LLAMA, "tp=8,mbs=1,sharding=fsdp,precision=fp8")
    with pytest.raises(PlanRuleError, match="torchtitan-fp8"):
        export_torchtitan(setup)
    text = export_torchtitan(setup, torchtitan_config="llama3:llama3_405b")  # the Float8 registry config
    assert "-m torchtitan.train" in text and "--module llama3" in text and "activation_checkpoint:none" in text
    assert "--nproc-per-node 8" in text and "NNODES=${NNODES:-128}" in text
