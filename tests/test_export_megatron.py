"""The Megatron-LM launch script: flag names, the mapping of each plan key, environment, torchrun."""

from __future__ import annotations

import subprocess

import pytest
from tests._export_specs import TOP_PLANS, resolve

from planner.errors import PlanRuleError
from planner.launchers.megatron.write import export_megatron, megatron_launch
from planner.launchers.megatron.flags import FLAGS, MEGATRON_VERSION
from planner.specs.layout import parse_layout


def _launch(model, hw, gpus, gbs, plan, seq=4096):
    *_, setup = resolve(model, hw, gpus, gbs, plan, seq)
    return megatron_launch(setup), setup


def _flag_values(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    key = None
    for a in argv:
        if a.startswith("--"):
            key = a
            out[key] = []
        else:
            out[key].append(a)
    return out


def test_flag_table_is_megatron_0_19_2():
    assert MEGATRON_VERSION == "0.19.2"
    assert FLAGS["--fp8-format"] == ("fp8", 1)  # dest is fp8 (launchers.md §1.3)
    assert FLAGS["--recompute-modules"][1] == "+"
    assert "--use-custom-fsdp" not in FLAGS  # removed as a flag in 0.19


@pytest.mark.parametrize("case", TOP_PLANS, ids=lambda c: f"{c[0]}-{c[1]}-{c[3][:30]}")
def test_every_emitted_flag_is_a_megatron_flag(case):
    launch, _ = _launch(case[0], case[1], *case[2], case[3])
    flags = [a for a in launch.argv() if a.startswith("--")]
    unknown = [f for f in flags if f not in FLAGS]
    assert not unknown
    assert len(flags) == len(set(flags)), "a flag is given twice"


def test_deepseek_v3_architecture_flags():
    launch, _ = _launch(*TOP_PLANS[0][:2], *TOP_PLANS[0][2], TOP_PLANS[0][3])
    f = _flag_values(launch.argv())
    assert "--multi-latent-attention" in f
    assert f["--q-lora-rank"] == ["1536"] and f["--kv-lora-rank"] == ["512"]
    assert f["--qk-head-dim"] == ["128"] and f["--qk-pos-emb-head-dim"] == ["64"] and f["--v-head-dim"] == ["128"]
    assert f["--num-experts"] == ["256"] and f["--moe-router-topk"] == ["8"] and f["--moe-ffn-hidden-size"] == ["2048"]
    assert f["--moe-layer-freq"] == ["([0]*3+[1]*58)"]
    assert f["--moe-shared-expert-intermediate-size"] == ["2048"]
    assert f["--moe-router-score-function"] == ["sigmoid"] and "--moe-router-enable-expert-bias" in f
    assert f["--moe-router-num-groups"] == ["8"] and f["--moe-router-group-topk"] == ["4"]
    assert f["--mtp-num-layers"] == ["1"]
    assert "--moe-grouped-gemm" in f and "--swiglu" in f and "--untie-embeddings-and-output-weights" in f
    assert f["--normalization"] == ["RMSNorm"] and f["--position-embedding-type"] == ["rope"]
    assert f["--vocab-size"] == ["129280"] and f["--max-position-embeddings"] == ["163840"]
    assert f["--attention-dropout"] == ["0.0"] and "--disable-bias-linear" in f
    # GB200's default dispatcher is HybridEP through the flex dispatcher.
    assert f["--moe-token-dispatcher-type"] == ["flex"] and f["--moe-flex-dispatcher-backend"] == ["hybridep"]
    assert "--group-query-attention" not in f


def test_gqa_flags_for_qwen3():
    launch, _ = _launch("qwen3-235b-a22b", "h100", 256, 2048, "tp=4,pp=8,ep=16,etp=1,layout=Et*11|(t*12|)*6t*11L")
    f = _flag_values(launch.argv())
    assert "--group-query-attention" in f and f["--num-query-groups"] == ["4"] and f["--kv-channels"] == ["128"]
    assert "--qk-layernorm" in f and f["--moe-layer-freq"] == ["1"] and "--mtp-num-layers" not in f
    assert f["--expert-tensor-parallel-size"] == ["1"] and "--sequence-parallel" in f
    assert f["--moe-token-dispatcher-type"] == ["flex"] and f["--moe-flex-dispatcher-backend"] == ["deepep"]


def test_dense_model_has_no_expert_flags():
    launch, _ = _launch("llama3.1-405b", "h100", 1024, 1024, "tp=8,pp=8,vpp=2,cp=2,layout=Et*7|(t*8|)*14t*7L")
    f = _flag_values(launch.argv())
    assert not [k for k in f if "expert" in k or k.startswith("--moe")]
    assert f["--context-parallel-size"] == ["2"] and f["--num-query-groups"] == ["8"]


@pytest.mark.parametrize("plan,expect,absent", [
    # even split: only the VPP count
    ("pp=2,vpp=2,ep=64,layout=Et*16|t*15|t*15|t*15mL", {"--pipeline-model-parallel-layout": ["Et*16|t*15|t*15|t*15mL"]},
     ["--num-virtual-stages-per-pipeline-rank"]),
    # first/last stages uneven, middle even: Megatron's first/last flags
    ("pp=8,ep=32,layout=Et*5|(t*8|)*6t*8mL", {"--decoder-first-pipeline-num-layers": ["5"],
                                                "--decoder-last-pipeline-num-layers": ["8"]},
     ["--pipeline-model-parallel-layout", "--num-virtual-stages-per-pipeline-rank"]),
    ("pp=8,vpp=2,ep=32,layout=Ett|(tttt|)*14tttmL", {"--pipeline-model-parallel-layout": ["Ett|(tttt|)*14tttmL"]},
     ["--num-virtual-stages-per-pipeline-rank"]),
])
def test_pipeline_layout_style(plan, expect, absent):
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192, plan)
    f = _flag_values(launch.argv())
    for k, v in expect.items():
        if k == "--pipeline-model-parallel-layout":  # compare stage by stage (planner writes its own compact form)
            assert parse_layout(f[k][0]) == parse_layout(v[0])
        else:
            assert f[k] == v
    for k in absent:
        assert k not in f


def test_even_split_gives_only_vpp():
    launch, setup = _launch("llama3.1-405b", "h100", 896, 896, "tp=8,pp=7,vpp=2,layout=Et*9|(t*9|)*12t*9L")
    f = _flag_values(launch.argv())
    assert setup.plan.layout is None
    assert f["--num-virtual-stages-per-pipeline-rank"] == ["2"]
    assert not {"--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers"} & set(f)


def test_first_last_with_vpp():
    # pp=4, vpp=2: rank 0 holds 14 (7+7), middle ranks 16 (8+8), last rank 15.
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192,
                        "pp=4,vpp=2,ep=64,layout=Et*7|t*8|t*8|t*7|t*7|t*8|t*8|t*8mL")
    f = _flag_values(launch.argv())
    assert "--pipeline-model-parallel-layout" in f  # rank 3 has 15 layers: not splittable in 2 equal chunks


@pytest.mark.parametrize("plan,granularity,method,layers,modules", [
    ("ep=64,recompute=full", "full", "uniform", "1", None),
    ("ep=64,recompute=full:3", "full", "block", "3", None),
    ("ep=64,recompute=mla_up_proj+moe_act+layernorm", "selective", None, None, ["mla_up_proj", "layernorm", "moe_act"]),
])
def test_recompute_flags(plan, granularity, method, layers, modules):
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192, plan)
    f = _flag_values(launch.argv())
    assert f["--recompute-granularity"] == [granularity]
    assert f.get("--recompute-method") == ([method] if method else None)
    assert f.get("--recompute-num-layers") == ([layers] if layers else None)
    if modules:
        assert sorted(f["--recompute-modules"]) == sorted(modules)


@pytest.mark.parametrize("sharding,present,strategy,instances", [
    ("dist_opt", ["--use-distributed-optimizer", "--overlap-param-gather"], None, None),
    ("ddp", ["--overlap-grad-reduce"], None, None),
    ("fsdp", ["--use-megatron-fsdp", "--ckpt-format"], "optim_grads_params", None),
    ("zero2", ["--use-megatron-fsdp"], "optim_grads", None),
    ("hsdp:64", ["--use-megatron-fsdp"], "optim_grads_params", "4"),
])
def test_sharding_flags(sharding, present, strategy, instances):
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192, f"ep=64,sharding={sharding}")
    f = _flag_values(launch.argv())
    for k in present:
        assert k in f
    assert f.get("--data-parallel-sharding-strategy") == ([strategy] if strategy else None)
    assert f.get("--num-distributed-optimizer-instances") == ([instances] if instances else None)
    if sharding == "ddp":
        assert "--use-distributed-optimizer" not in f and "--overlap-param-gather" not in f
    if strategy:
        assert f["--ckpt-format"] == ["fsdp_dtensor"]


def test_offload_precision_and_moments():
    launch, _ = _launch("deepseek-v3", "h100", 512, 4096,
                        "tp=2,pp=8,ep=32,etp=1,layout=Et*5|(t*8|)*6t*8mL,offload=optimizer+activations,"
                        "precision=fp8,moments=bf16,recompute=moe_act")
    f = _flag_values(launch.argv())
    assert "--optimizer-cpu-offload" in f and f["--use-precision-aware-optimizer"] == []
    assert f["--exp-avg-dtype"] == ["bf16"] and f["--exp-avg-sq-dtype"] == ["bf16"]
    assert f["--fp8-format"] == ["e4m3"] and f["--fp8-recipe"] == ["blockwise"]  # Hopper
    assert "--fine-grained-activation-offloading" in f
    assert "moe_act" not in f["--offload-modules"]  # recomputed: nothing to offload
    assert {"core_attn", "attn_proj", "expert_fc1"} <= set(f["--offload-modules"])
    assert launch.env["NVTE_CPU_OFFLOAD_V1"] == "1"
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192, "ep=64,precision=fp8")
    assert _flag_values(launch.argv())["--fp8-recipe"] == ["mxfp8"]  # Blackwell


@pytest.mark.parametrize("hw_name,plan,expect", [
    ("h100", "tp=2,pp=8,ep=32,etp=1,layout=Et*5|(t*8|)*6t*8mL", "1"),
    ("h100", "tp=2,pp=8,ep=32,etp=1,layout=Et*5|(t*8|)*6t*8mL,sharding=fsdp", None),
    ("h100", "tp=2,pp=8,vpp=2,ep=32,etp=1,layout=Ettt|(tttt|)*14ttmL,ep_overlap=on", "32"),
    ("h100", "pp=8,ep=32,layout=Et*5|(t*8|)*6t*8mL", None),
    ("gb200-nvl72", "tp=2,pp=8,ep=16,etp=1,layout=Et*5|(t*8|)*6t*8mL", None),
])
def test_cuda_device_max_connections(hw_name, plan, expect):
    gpus = 512 if hw_name == "h100" else 256
    launch, _ = _launch("deepseek-v3", hw_name, gpus, 4096, plan)
    assert launch.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == expect


def test_torchrun_geometry():
    launch, _ = _launch("deepseek-v3", "h100", 512, 4096, "pp=8,ep=32,layout=Et*5|(t*8|)*6t*8mL")
    assert (launch.nproc_per_node, launch.nnodes) == (8, 64)
    launch, _ = _launch("deepseek-v3", "gb200-nvl72", 256, 8192, "ep=64")
    assert (launch.nproc_per_node, launch.nnodes) == (4, 64)  # NVL72 compute trays: 4 GPUs per host


def test_script_header_and_bash_syntax(tmp_path):
    *_, setup = resolve(*TOP_PLANS[0][:2], *TOP_PLANS[0][2], TOP_PLANS[0][3])
    pred = {"memory": {"peak_bytes": 150 * 2**30, "capacity_bytes": 186e9, "worst_stage": 0},
            "time": {"step_time_s": 12.5, "tokens_per_s_per_gpu": 10485.8, "mfu": 0.3}}
    text = export_megatron(setup, predictions=pred)
    assert text.startswith("#!/usr/bin/env bash\n# Megatron-LM launch script written by planner ")
    assert f"# plan: {setup.plan.to_string()}" in text
    assert "# predicted: peak memory 150.0 GiB of 173.2 GiB (worst stage 0)" in text
    assert "step 12.50 s, 10,486 tokens/s/GPU, MFU 30.0%" in text
    assert '"$MEGATRON_LM/pretrain_gpt.py"' in text
    path = tmp_path / "run.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_script_expands_to_the_argument_list(tmp_path):
    """Run the script with torchrun stubbed: bash itself must produce exactly megatron_launch's argv."""
    *_, setup = resolve(*TOP_PLANS[2][:2], *TOP_PLANS[2][2], TOP_PLANS[2][3])
    launch = megatron_launch(setup)
    text = export_megatron(setup)
    stub = tmp_path / "torchrun"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$OUT"\nenv | grep -E "^(CUDA_DEVICE_MAX|NVTE_)" >> "$OUT.env" || true\n')
    stub.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(text)
    out = tmp_path / "argv.txt"
    subprocess.run(["bash", str(script)], check=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin", "OUT": str(out)})
    words = out.read_text().splitlines()
    script_idx = next(i for i, w in enumerate(words) if w.endswith("pretrain_gpt.py"))
    assert words[script_idx + 1:] == launch.argv()
    assert words[:2] == ["--nproc-per-node", "8"]
    env = (tmp_path / "argv.txt.env").read_text()
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in env  # TP=2 on Hopper (validate_args)


def test_refuses_a_plan_megatron_rejects():
    *_, setup = resolve("deepseek-v3", "gb200-nvl72", 256, 8192, "ep=64")
    bad = setup.plan.replace(stage_recompute="1")
    with pytest.raises(PlanRuleError) as exc:
        megatron_launch(type(setup)(setup.model, setup.hw, setup.job, bad, setup.deg, setup.layout))
    assert exc.value.rule == "megatron-stage-recompute"
