"""Exported plans through Megatron-LM's and torchtitan's own start-up code, on the CPU.

Needs the validation environment (scripts/setup_validation_env.sh: Python 3.11 venv with the CPU
torch, megatron-core 0.19.2 unzipped, torchtitan 0.3.0). Found at $PLANNER_MEGATRON_VENV or
<checkout>/.megatron-venv; every test here is skipped, with the reason, when it is absent.

Megatron (launchers.md §2): parse_args -> validate_args -> ConstantNumMicroBatchesCalculator ->
core_transformer_config_from_args, the two GPU probes stubbed, the exported environment variables
set, TE-only settings off for the config step. torchtitan (§3): ConfigManager().parse_args +
ParallelDims + the Trainer's batch/sequence checks. Both directions are tested: planner's plans
pass, and command lines that break one of planner's rules are rejected by the launcher too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from tests._export_specs import TOP_PLANS, resolve  # noqa: E402

from planner.launchers.megatron.write import megatron_launch  # noqa: E402
from planner.launchers.torchtitan.write import torchtitan_launch  # noqa: E402

VENV = Path(os.environ.get("PLANNER_MEGATRON_VENV", ROOT / ".megatron-venv"))
PY = VENV / "bin" / "python"

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(not PY.exists(), reason=f"no validation venv at {VENV}: run scripts/setup_validation_env.sh "
                       "(or set PLANNER_MEGATRON_VENV)"),
]


def _run(script: str, requests: list[dict]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_CPU_OFFLOAD_V1")}
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONPATH"] = str(HERE)  # tt_configs for torchtitan's --module
    proc = subprocess.run([str(PY), str(HERE / script)], input=json.dumps(requests), capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _arch(hw) -> int:
    return 10 if hw.generation.startswith("blackwell") else 9


@pytest.fixture(scope="module")
def megatron_results():
    cases, reqs = [], []
    for case in TOP_PLANS:
        m, h, j, plan, setup = resolve(case[0], case[1], *case[2], case[3])
        launch = megatron_launch(setup)
        cases.append((case, setup))
        reqs.append({"argv": launch.argv(), "world_size": j.gpus, "arch": _arch(h), "env": launch.env})
    return list(zip(cases, _run("megatron_check.py", reqs)))


def test_top_plans_pass_megatron_validators(megatron_results):
    failed = [(c[0], r) for c, r in megatron_results if not r["ok"]]
    assert not failed, failed
    for (case, setup), r in megatron_results:
        # Megatron derives the same degrees and micro-batch count as planner.
        assert r["data_parallel_size"] == setup.deg.dp, case
        assert (r["virtual_pipeline_model_parallel_size"] or 1) == setup.deg.vpp, case
        assert r["num_microbatches"] == setup.micro_batches, case
        assert r["expert_tensor_parallel_size"] == setup.deg.etp, case
        assert r["sequence_parallel"] == (setup.plan.tp > 1), case
        assert r["config_class"] == ("MLATransformerConfig" if setup.model.attention.kind == "mla" else "TransformerConfig")
        # grad_reduce and param_gather reach Megatron's gradient buffer and FP8 parameter settings.
        assert r["accumulate_allreduce_grads_in_fp32"] == (setup.plan.grad_reduce == "fp32"), case
        assert r["te_flags"]["fp8_param_gather"] == (setup.plan.param_gather == "fp8"), case
    assert {(s.plan.grad_reduce, s.plan.param_gather) for (_, s), _ in megatron_results} >= {("bf16", "fp8"), ("bf16", "bf16")}


def _with(argv: list[str], **changes) -> list[str]:
    """Replace (value None: drop) flags of an argument list; new flags are appended."""
    out, i = [], 0
    keys = {"--" + k.replace("_", "-"): v for k, v in changes.items()}
    while i < len(argv):
        a = argv[i]
        if a in keys:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(a)
        i += 1
    for k, v in keys.items():
        if v is None:
            continue
        out += [k] if v is True else [k, *str(v).split()]
    return out


def test_megatron_rejects_what_planner_rejects():
    """Command lines that break planner's rules (built by editing a valid export) fail in Megatron's
    own code too: the rules mirror real checks."""
    m, h, j, plan, setup = resolve("deepseek-v3", "h100", 512, 4096,
                                   "tp=2,pp=8,ep=32,etp=1,mbs=1,layout=Et*5|(t*8|)*6t*8mL,recompute=moe_act")
    launch = megatron_launch(setup)
    base, env = launch.argv(), launch.env
    cases = {
        "world-divisibility": (_with(base, tensor_model_parallel_size=3), 512, env),
        "experts-divisible-by-ep": (_with(base, expert_model_parallel_size=48), 768, env),
        "global-batch-divisible": (_with(base, global_batch_size=1000), 512, env),
        "layers-divisible": (_with(base, decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None), 512, env),
        "uneven-pp": (_with(base, decoder_first_pipeline_num_layers=7), 512, env),
        "heads-divisible-by-tp": (_with(base, tensor_model_parallel_size=256 // 1, pipeline_model_parallel_size=1,
                                        decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None), 512, env),
        "vpp-layers-per-stage-uneven": (_with(base, num_layers_per_virtual_pipeline_stage=1), 512, env),
        "recompute-full-method": (_with(base, recompute_granularity="full", recompute_modules=None, recompute_num_layers=1), 512, env),
        "recompute-selective-method": (_with(base, recompute_method="uniform"), 512, env),
        "recompute-moe-act-grouped-gemm": (_with(base, moe_grouped_gemm=None), 512, env),
        "optimizer-offload-needs-precision-aware": (_with(base, optimizer_cpu_offload=True), 512, env),
        "overlap-param-gather-needs-grad-reduce": (_with(base, overlap_grad_reduce=None), 512, env),
        "megatron-fsdp-ckpt-format": (_with(base, use_megatron_fsdp=True), 512, {}),
        "cuda-device-max-connections": (base, 512, {}),
        "seq-divisible-by-2cp": (_with(base, context_parallel_size=2, seq_length=4098), 512, env),
        "ep-overlap-needs-vpp": (_with(base, overlap_moe_expert_parallel_comm=True), 512, env),
        "deepep-needs-flex": (_with(base, moe_token_dispatcher_type="alltoall", moe_enable_deepep=True,
                                    moe_flex_dispatcher_backend=None), 512, env),
        "tp-comm-overlap-needs-sp": (_with(base, sequence_parallel=None, tp_comm_overlap=True), 512, env),
    }
    reqs = [{"argv": argv, "world_size": world, "arch": 9, "env": e} for argv, world, e in cases.values()]
    results = dict(zip(cases, _run("megatron_check.py", reqs)))
    accepted = [rule for rule, r in results.items() if r["ok"]]
    assert not accepted, {rule: results[rule] for rule in accepted}
    # And the unedited line passes (the edits are what Megatron refuses).
    assert _run("megatron_check.py", [{"argv": base, "world_size": 512, "arch": 9, "env": env}])[0]["ok"]


# torchtitan's llama3_405b adds Float8 converters and its deepseek_v3_671b builds no MTP module: the
# plans name the functions of tt_configs.py (beside this file) instead, as the refusals suggest.
L405 = "tt_configs:llama3_405b_bf16"
TORCHTITAN_PLANS = [
    ("llama3.1-405b", "h100", (1024, 1024), "tp=8,pp=8,vpp=2,cp=2,mbs=1,sharding=fsdp,recompute=full,layout=Et*7|(t*8|)*14t*7L", L405),
    ("llama3.1-405b", "gb200-nvl72", (576, 1152), "tp=8,pp=9,mbs=1,sharding=hsdp:4,recompute=full,layout=Et*13|(t*14|)*7t*15L", L405),
    ("llama3.1-405b", "h100", (512, 512), "tp=8,mbs=1,sharding=zero2,moments=bf16", L405),
    ("llama3.1-405b", "h100", (512, 512), "tp=8,pp=2,mbs=2,sharding=ddp", L405),
    ("llama3.1-405b", "h100", (512, 512), "tp=8,pp=2,mbs=1,sharding=fsdp,recompute=op", L405),
    ("deepseek-v3", "h100", (1024, 1024), "tp=8,pp=8,vpp=2,ep=32,etp=1,mbs=2,sharding=fsdp,recompute=full,"
     "dispatcher=alltoall,layout=Ettt|(tttt|)*14ttmL", "tt_configs:deepseek_v3_671b_mtp"),
]


def test_torchtitan_accepts_exported_invocations():
    launches, reqs = [], []
    for name, hw_name, (g, b), text, cfg in TORCHTITAN_PLANS:
        *_, setup = resolve(name, hw_name, g, b, text)
        launch = torchtitan_launch(setup, torchtitan_config=cfg)
        launches.append((setup, launch))
        reqs.append({"argv": launch.argv(), "world_size": g})
    for (setup, _launch), r in zip(launches, _run("torchtitan_check.py", reqs)):
        assert r["ok"], (setup.plan.to_string(), r)
        assert r["dp_replicate"] * r["dp_shard"] == setup.deg.dp
        assert (r["tp"], r["cp"], r["pp"]) == (setup.deg.tp, setup.deg.cp, setup.deg.pp)
        assert r["global_batch_size"] == setup.job.global_batch and r["seq_len"] == setup.job.seq_len
        if setup.plan.pp > 1:
            assert len(r["module_fqns_per_model_part"]) == setup.deg.pp * setup.deg.vpp
            assert r["local_batch_size"] // r["pp_microbatch"] == setup.micro_batches
        # activation_checkpoint:full gives FullAC.Config, :selective (recompute=op) the per-op
        # SelectiveAC.Config, :none None.
        expect_ac = {"full": "FullAC.Config", "op": "SelectiveAC.Config"}.get(setup.plan.recompute.kind, "NoneType")
        assert r["activation_checkpoint"] == expect_ac, r["activation_checkpoint"]


def test_torchtitan_rejects_what_planner_rejects():
    bad = [
        # the removed expert-TP option (torchtitan-etp)
        ["--module", "llama3", "--config", "llama3_405b", "--parallelism.expert_tensor_parallel_degree", "2"],
        # dp_shard*tp != world (world-divisibility)
        ["--module", "llama3", "--config", "llama3_405b", "--parallelism.data_parallel_shard_degree", "3",
         "--parallelism.tensor_parallel_degree", "8"],
        # local batch not divisible by the PP micro-batch (torchtitan-batch)
        ["--module", "llama3", "--config", "llama3_405b", "--parallelism.pipeline_parallel_degree", "2",
         "--training.local_batch_size", "6", "--parallelism.pipeline_parallel_microbatch_size", "4"],
        # global batch not a multiple of local*dp (torchtitan-batch)
        ["--module", "llama3", "--config", "llama3_405b", "--parallelism.tensor_parallel_degree", "8",
         "--training.local_batch_size", "3", "--training.global_batch_size", "1000"],
    ]
    results = _run("torchtitan_check.py", [{"argv": a, "world_size": 512} for a in bad])
    assert [r["ok"] for r in results] == [False] * len(bad), results


# Pipeline schedules (issue 21): torchtitan's zero-bubble and DualPipeV schedules, Megatron's
# combined 1F1B with and without --delay-wgrad-compute.
V3_TT = "tt_configs:deepseek_v3_671b_mtp"
V3_TT_PLAN = "tp=8,pp=8,vpp=2,ep=32,etp=1,mbs=2,sharding=fsdp,recompute=full,dispatcher=alltoall,layout=Ettt|(tttt|)*14ttmL"
SCHEDULE_TT_PLANS = [
    ("deepseek-v3", "h100", (1024, 1024), V3_TT_PLAN + ",schedule=zb-h1", V3_TT, "InterleavedZeroBubble"),
    ("deepseek-v3", "h100", (1024, 1024), V3_TT_PLAN + ",schedule=zbv", V3_TT, "ZBVZeroBubble"),
    ("deepseek-v3", "h100", (1024, 1024), V3_TT_PLAN + ",schedule=dualpipev", V3_TT, "DualPipeV"),
    ("llama3.1-405b", "h100", (1024, 1024), "tp=8,pp=8,vpp=2,cp=2,mbs=1,sharding=fsdp,recompute=full,"
     "layout=Et*7|(t*8|)*14t*7L,schedule=zbv", L405, "ZBVZeroBubble"),
]


def test_torchtitan_accepts_exported_schedules():
    """Zero-bubble and DualPipeV exports pass ConfigManager, torch's schedule lookup and
    torchtitan's stage checks, and torchtitan places every stage on the rank planner's layout does
    (a V for ZBVZeroBubble and DualPipeV)."""
    launches, reqs = [], []
    for name, hw_name, (g, b), text, cfg, _ in SCHEDULE_TT_PLANS:
        *_, setup = resolve(name, hw_name, g, b, text)
        launch = torchtitan_launch(setup, torchtitan_config=cfg)
        launches.append(setup)
        reqs.append({"argv": launch.argv(), "world_size": g})
    for setup, case, r in zip(launches, SCHEDULE_TT_PLANS, _run("torchtitan_check.py", reqs)):
        assert r["ok"], (setup.plan.to_string(), r)
        assert r["schedule"] == case[5]
        planner_stages = [[st.index for st in setup.layout.rank_stages(q)] for q in range(setup.deg.pp)]
        assert r["stage_indices"] == planner_stages, (case[5], r["stage_indices"], planner_stages)


def test_torchtitan_rejects_schedules_planner_rejects():
    """What planner's schedule rules refuse, torch or torchtitan refuse too: ZBV with three stages
    per rank (schedule-vpp), 1F1B with two (torchtitan-stages-per-rank), DualPipeV with fewer
    micro-batches than stages (dualpipev-microbatches)."""
    *_, setup = resolve("deepseek-v3", "h100", 1024, 1024, V3_TT_PLAN + ",schedule=zbv")
    base = torchtitan_launch(setup, torchtitan_config=V3_TT).argv()

    def swap(argv, flag, value):
        i = argv.index(flag)
        return argv[:i + 1] + [value] + argv[i + 2:]

    fqns = base.index("--parallelism.module_fqns_per_model_part")
    parts = base[fqns + 1:fqns + 17]
    bad = [
        swap(base, "--parallelism.pipeline_parallel_schedule", "1F1B"),
        base[:fqns + 1] + [",".join(parts[0:2]), *parts[2:16]] + base[fqns + 17:],  # 15 stages: not 2 per rank
        swap(swap(base, "--parallelism.pipeline_parallel_schedule", "DualPipeV"), "--training.local_batch_size", "16"),
    ]
    results = _run("torchtitan_check.py", [{"argv": a, "world_size": 1024} for a in bad])
    assert [r["ok"] for r in results] == [False] * len(bad), results


SCHEDULE_MEGATRON_PLANS = [
    ("deepseek-v3", "h100", (512, 4096), "tp=1,pp=8,vpp=2,ep=32,mbs=1,precision=fp8,recompute=mla_up_proj+layernorm,"
     "layout=Ettt|(tttt|)*14ttmL,ep_overlap=on"),
    ("deepseek-v3", "h100", (512, 4096), "tp=1,pp=8,vpp=2,ep=32,mbs=1,precision=fp8,recompute=mla_up_proj+layernorm,"
     "layout=Ettt|(tttt|)*14ttmL,ep_overlap=wgrad"),
    ("qwen3-235b-a22b", "h100", (256, 2048), "tp=2,ep=32,etp=1,mbs=1,recompute=moe_act,ep_overlap=wgrad,sharding=dist_opt"),
]


def test_megatron_accepts_exported_moe_overlap():
    """Megatron's combined 1F1B (--overlap-moe-expert-parallel-comm, with --delay-wgrad-compute
    for ep_overlap=wgrad) passes validate_args and the TransformerConfig build."""
    setups, reqs = [], []
    for name, hw_name, (g, b), text in SCHEDULE_MEGATRON_PLANS:
        _, h, _, _, setup = resolve(name, hw_name, g, b, text)
        launch = megatron_launch(setup)
        argv = launch.argv()
        assert "--overlap-moe-expert-parallel-comm" in argv
        assert ("--delay-wgrad-compute" in argv) == (setup.plan.ep_overlap == "wgrad")
        setups.append(setup)
        # --delay-wgrad-compute with --overlap-grad-reduce needs TE >= 2.8 (validate_args): the
        # version of a current NGC PyTorch container, which the CPU venv lacks.
        reqs.append({"argv": argv, "world_size": g, "arch": _arch(h), "env": launch.env, "te_version": "2.8.0"})
    for setup, r in zip(setups, _run("megatron_check.py", reqs)):
        assert r["ok"], (setup.plan.to_string(), r)
        assert r["num_microbatches"] == setup.micro_batches
    # The version stub is what validate_args reads: an older Transformer Engine is refused.
    old = [dict(q, te_version="2.7.0") for q, s in zip(reqs, setups) if s.plan.ep_overlap == "wgrad"]
    assert not any(r["ok"] for r in _run("megatron_check.py", old))


# ---- architecture fidelity (issue 22): every architecture field planner knows and megatron-core
# 0.19.2 has a flag for is exported, and Megatron parses and builds the same architecture ---------

ARCH_PLANS = [
    ("deepseek-v3", "gb200-nvl72", (256, 8192), "pp=4,vpp=4,ep=64,mbs=1,recompute=mla_up_proj+moe_act,layout=Et*3|(tttt|)*14ttmL"),
    ("gpt-oss-120b", "gb200-nvl72", (64, 512), "ep=8,mbs=1,recompute=full"),
    ("qwen3-235b-a22b", "h100", (256, 2048), "tp=4,pp=8,ep=16,etp=1,mbs=1,recompute=full,layout=Et*11|(t*12|)*6t*11L"),
    ("llama3.1-8b", "h100", (8, 128), "tp=2,mbs=1,recompute=full"),
    ("llama3.1-405b", "h100", (1024, 1024), "tp=8,pp=8,vpp=2,cp=2,mbs=1,recompute=full:4,layout=Et*7|(t*8|)*14t*7L"),
]


@pytest.fixture(scope="module")
def arch_results():
    cases, reqs = [], []
    for case in ARCH_PLANS:
        m, h, j, plan, setup = resolve(case[0], case[1], *case[2], case[3])
        launch = megatron_launch(setup)
        cases.append((setup, launch))
        reqs.append({"argv": launch.argv(), "world_size": j.gpus, "arch": _arch(h), "env": launch.env})
    return {setup.model.name: (setup, launch, r) for (setup, launch), r in zip(cases, _run("megatron_check.py", reqs))}


def test_architecture_flags_pass_megatron_and_build_the_model(arch_results):
    for name, (setup, launch, r) in arch_results.items():
        assert r["ok"], (name, r)
        # The CPU check turned RoPE fusion off itself (Transformer Engine is absent); the script did not.
        assert r["cpu_flags"] == ["--no-rope-fusion"] and "--no-rope-fusion" not in launch.argv()
        m = setup.model
        arch = r["arch"]
        assert arch["rotary_base"] == int(m.rope.theta), name
        if m.moe is not None:
            assert arch["moe_router_topk_scaling_factor"] == m.moe.routed_scaling_factor, name


def test_deepseek_v3_latent_norms_routed_scaling_and_yarn(arch_results):
    setup, launch, r = arch_results["deepseek-v3"]
    argv, arch, cfg = launch.argv(), r["arch"], r["config"]
    for flag in ("--qk-layernorm", "--moe-router-topk-scaling-factor", "--rope-type", "--rotary-scaling-factor",
                 "--mscale", "--mscale-all-dim", "--rotary-base"):
        assert flag in argv, flag
    assert cfg["qk_layernorm"] is True and cfg["moe_router_topk_scaling_factor"] == 2.5
    assert cfg["rope_type"] == "yarn" and cfg["rotary_scaling_factor"] == 40.0 and cfg["rotary_base"] == 10000
    assert arch["mscale"] == 1.0 and arch["mscale_all_dim"] == 1.0 and r["config_class"] == "MLATransformerConfig"
    assert arch["moe_router_enable_expert_bias"] and arch["moe_router_score_function"] == "sigmoid"


def test_gpt_oss_sliding_window_sinks_and_yarn(arch_results):
    setup, launch, r = arch_results["gpt-oss-120b"]
    arch, cfg = r["arch"], r["config"]
    # config.json's sliding_window 128 (a query and the 127 keys before it) is TE's (127, 0), every
    # second layer from the first (layer_number % 2 != 0): as Megatron-Bridge's gpt-oss provider.
    assert cfg["window_size"] == [127, 0] and cfg["window_attn_skip_freq"] == 2
    assert cfg["softmax_type"] == "learnable"  # the learned sinks
    assert arch["position_embedding_type"] == "yarn" and arch["rotary_scaling_factor"] == 32.0
    assert arch["yarn_original_max_position_embeddings"] == 4096 and arch["yarn_beta_fast"] == 32.0
    assert arch["yarn_correction_range_round_to_int"] is False and arch["rotary_base"] == 150000


def test_qwen3_and_llama_rope_and_norms(arch_results):
    _, launch, r = arch_results["qwen3-235b-a22b"]
    assert r["config"]["qk_layernorm"] is True and r["arch"]["kv_channels"] == 128 and r["arch"]["rotary_base"] == 1000000
    for name in ("llama3.1-8b", "llama3.1-405b"):
        _, launch, r = arch_results[name]
        assert r["arch"]["use_rope_scaling"] is True and r["arch"]["rope_scaling_factor"] == 8.0
        assert r["arch"]["rotary_base"] == 500000 and r["arch"]["num_query_groups"] == 8


def test_new_families_export_what_megatron_can_express():
    """Gemma 3's window pattern, Llama 4's no-RoPE layers, L2 QK norm and interleaved MoE layers,
    GLM-4.5's partial rotary and QKV bias: Megatron parses them and builds the config; what it has no
    flag for is a note in the script."""
    from tests._export_specs import job
    from planner.cost.setup import resolve_setup
    from planner.launchers.common import export_canonical
    from planner.specs.catalog import load_hardware
    from planner.specs.hf_import import import_hf_config
    from planner.specs.plan import Plan

    public = ROOT / "tests" / "fixtures" / "hf_public"
    cases = [("gemma-3-27b", "tp=2,pp=2,mbs=1,recompute=full", 16),
             ("llama-4-maverick-17b-128e-instruct", "tp=2,pp=2,ep=16,etp=1,mbs=1,recompute=full", 64),
             ("glm-4.5-air", "pp=2,ep=16,mbs=1,recompute=full,layout=Et*22|t*24mL", 64)]
    launches, reqs = [], []
    for name, text, gpus in cases:
        m, h = import_hf_config(public / name / "config.json"), load_hardware("h100")
        j = job(gpus, 4 * gpus)
        setup = resolve_setup(m, h, j, export_canonical(Plan.parse(text), m, h, j))
        launch = megatron_launch(setup)
        launches.append((name, launch))
        reqs.append({"argv": launch.argv(), "world_size": gpus, "arch": 9, "env": launch.env})
    results = dict(zip([n for n, _ in launches], _run("megatron_check.py", reqs)))
    notes = {n: " ".join(launch.notes) for n, launch in launches}
    for name, r in results.items():
        assert r["ok"], (name, r)
    g = results["gemma-3-27b"]
    assert g["config"]["window_size"] == [1023, 0] and g["config"]["window_attn_skip_freq"] == 6
    assert g["config"]["qk_layernorm"] is True
    assert "GeGLU" in notes["gemma-3-27b"] and "post-attention" in notes["gemma-3-27b"]
    assert "query_pre_attn_scalar" in notes["gemma-3-27b"] and "10000" in notes["gemma-3-27b"]
    mv = results["llama-4-maverick-17b-128e-instruct"]
    assert mv["config"]["no_rope_freq"] == [0, 0, 0, 1] * 12  # TransformerConfig expands --no-rope-freq 4
    assert mv["arch"]["moe_layer_freq"] == [0, 1] * 24 and mv["arch"]["moe_shared_expert_intermediate_size"] == 8192
    assert "chunked attention" in notes["llama-4-maverick-17b-128e-instruct"]
    gl = results["glm-4.5-air"]
    assert gl["arch"]["rotary_percent"] == 0.5 and gl["arch"]["add_qkv_bias"] and not gl["arch"]["add_bias_linear"]
    assert gl["arch"]["mtp_num_layers"] == 1 and gl["arch"]["kv_channels"] == 128
