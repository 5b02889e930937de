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
    for (setup, launch), r in zip(launches, _run("torchtitan_check.py", reqs)):
        assert r["ok"], (setup.plan.to_string(), r)
        assert r["dp_replicate"] * r["dp_shard"] == setup.deg.dp
        assert (r["tp"], r["cp"], r["pp"]) == (setup.deg.tp, setup.deg.cp, setup.deg.pp)
        assert r["global_batch_size"] == setup.job.global_batch and r["seq_len"] == setup.job.seq_len
        if setup.plan.pp > 1:
            assert len(r["module_fqns_per_model_part"]) == setup.deg.pp * setup.deg.vpp
            assert r["local_batch_size"] // r["pp_microbatch"] == setup.micro_batches
        # activation_checkpoint:full gives FullAC.Config; activation_checkpoint:none gives None.
        expect_ac = "FullAC.Config" if setup.plan.recompute == "full" else "NoneType"
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
