"""Exported Megatron-Bridge launches through Bridge 0.6.2's own config checks, on the CPU.

Needs the Bridge venv (scripts/setup_bridge_env.sh: .bridge-venv, or $PLANNER_BRIDGE_VENV); every
test is skipped, with the reason, without it. bridge_check.py (beside this file) does what
run_recipe.py does before training: the recipe (its model from tests/fixtures/hf/), the mock
dataset, the overrides through Bridge's Hydra override processing, the runner's syncs, then
``runtime_config_update`` (mixed precision, data-parallel size, CommOverlapConfig setup and
``ConfigContainer.validate`` with Megatron-Core's TransformerConfig, OptimizerConfig and DDP
checks). Both directions: planner's exports pass and read back to the same plan, and launches that
break a rule planner checks are refused by Bridge too.
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

from tests._export_specs import resolve  # noqa: E402
from tests.test_export_bridge import CASES  # noqa: E402

from planner.launchers.bridge.recipes import BRIDGE_RECIPES, RECIPE_DEFAULTS, RECIPE_HF_IDS  # noqa: E402
from planner.launchers.bridge.write import bridge_launch  # noqa: E402

VENV = Path(os.environ.get("PLANNER_BRIDGE_VENV", ROOT / ".bridge-venv"))
PY = VENV / "bin" / "python"

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(not PY.exists(), reason=f"no Megatron-Bridge venv at {VENV}: run scripts/setup_bridge_env.sh "
                       "(or set PLANNER_BRIDGE_VENV)"),
]

HF = {hub: str(ROOT / "tests" / "fixtures" / "hf" / model) for recipe, hub in RECIPE_HF_IDS.items()
      for model, r in BRIDGE_RECIPES.items() if r == recipe and (ROOT / "tests" / "fixtures" / "hf" / model).exists()}


def _run(requests: list[dict]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("NVTE_CPU_OFFLOAD_V1", "WORLD_SIZE", "RANK")}
    env.update(PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([str(PY), str(HERE / "bridge_check.py")], input=json.dumps(requests), capture_output=True,
                          text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _request(setup, launch, overrides=None) -> dict:
    return {"recipe": launch.recipe, "overrides": launch.overrides if overrides is None else overrides,
            "world_size": setup.job.gpus, "arch": 10 if setup.hw.generation.startswith("blackwell") else 9,
            "env": launch.env, "hf": HF}


@pytest.fixture(scope="module")
def results():
    cases = []
    for case in CASES:
        *_, setup = resolve(*case)
        launch = bridge_launch(setup)
        cases.append((case, setup, launch))
    return list(zip(cases, _run([_request(s, la) for _, s, la in cases])))


def test_exports_pass_bridge_validation(results):
    failed = [(c[0], r) for c, r in results if not r["ok"]]
    assert not failed, failed


def test_bridge_reads_the_plan_planner_wrote(results):
    """What Bridge's ConfigContainer holds after the overrides is the plan: degrees, the data-parallel
    size it derives, layout, recompute, offload, precision, dispatcher, overlap, sharding, batch."""
    from planner.specs.layout import parse_layout

    for (case, setup, _launch), r in results:
        v, p, d = r["values"], setup.plan, setup.deg
        assert v["data_parallel_size"] == d.dp, case
        assert (v["model.tensor_model_parallel_size"], v["model.pipeline_model_parallel_size"],
                v["model.context_parallel_size"]) == (p.tp, p.pp, p.cp), case
        assert (v["model.virtual_pipeline_model_parallel_size"] or 1) == d.vpp, case
        assert v["model.sequence_parallel"] == (p.tp > 1), case
        if setup.model.is_moe:
            assert (v["model.expert_model_parallel_size"], v["model.expert_tensor_parallel_size"]) == (p.ep, d.etp), case
            assert v["overlap_moe_expert_parallel_comm_final"] == bool(p.ep_overlap), case
            flex = v["model.moe_token_dispatcher_type"] == "flex"
            assert (v["model.moe_flex_dispatcher_backend"] if flex else "alltoall") == p.dispatcher, case
        if p.pp > 1:
            assert parse_layout(v["model.pipeline_model_parallel_layout"]) == setup.layout.symbols(), case
        rc = p.recompute
        assert v["model.recompute_granularity"] == (None if rc.kind == "none" else rc.kind), case
        if rc.kind == "selective":
            assert v["model.recompute_modules"] == list(rc.modules), case
        assert v["optimizer.optimizer_cpu_offload"] == p.offload.optimizer, case
        assert v["model.fine_grained_activation_offloading"] == p.offload.activations, case
        assert (v["optimizer.exp_avg_dtype"], v["optimizer.exp_avg_sq_dtype"]) == (p.moments, p.moments), case
        fp8 = (p.precision or setup.job.default_precision) == "fp8"
        assert (v["fp8_recipe"] is not None) == fp8, case
        if fp8:
            assert v["fp8_recipe"] == setup.hw.fp8_recipe, case
        assert v["ddp.use_megatron_fsdp"] == (p.sharding.kind in ("fsdp", "zero2", "hsdp")), case
        assert (v["train.micro_batch_size"], v["train.global_batch_size"], v["dataset.seq_length"]) == (
            p.mbs, setup.job.global_batch, setup.job.seq_len), case
        impl = {"none": "none", "scoped": "transformer_engine", "full_iteration": "full_iteration"}[p.cuda_graphs.kind]
        assert v["model.cuda_graph_impl"] == impl, case
        if impl == "full_iteration":  # Bridge's own validation refuses the loss's NaN check under it
            assert v.get("rerun_state_machine.check_for_nan_in_loss") in (False, None), case
        assert v["model.num_layers"] == setup.model.num_layers, case  # the recipe built this model


def test_recipe_defaults_are_what_bridge_builds():
    """planner.launchers.bridge.recipes.RECIPE_DEFAULTS (what check --bridge takes for settings a file
    leaves out) against the recipes themselves."""
    reqs, names = [], []
    for recipe in RECIPE_DEFAULTS:
        names.append(recipe)
        reqs.append({"recipe": recipe, "overrides": [], "world_size": 8, "hf": HF, "validate": False})
    for recipe, r in zip(names, _run(reqs)):
        assert r["ok"], (recipe, r)
        for key, want in RECIPE_DEFAULTS[recipe].items():
            assert r["values"][key] == want, (recipe, key, r["values"][key], want)


def _edit(overrides: list[str], **changes) -> list[str]:
    keys = {k.replace("__", "."): v for k, v in changes.items()}
    out = [o for o in overrides if o.split("=", 1)[0] not in keys]
    return out + [f"{k}={v}" for k, v in keys.items()]


def test_bridge_rejects_what_planner_rejects():
    """Launches that break a rule planner checks (built by editing a valid export) fail in Bridge's
    own checks: the rules mirror real ones. (Two Megatron-LM rules are not Bridge config checks:
    experts % EP is checked when the MoE layers are built, and Megatron-LM's validate_args, not
    Megatron-Core, asks the precision-aware optimizer for optimizer offload; planner applies both.)"""
    *_, setup = resolve("deepseek-v3", "h100", 512, 4096,
                        "pp=8,vpp=2,ep=32,mbs=1,recompute=mla_up_proj+layernorm,layout=Ettt|(tttt|)*14ttmL,ep_overlap=on")
    launch = bridge_launch(setup)
    base = launch.overrides
    cases = {
        "world-divisibility": _edit(base, model__tensor_model_parallel_size=3),
        "seq-divisible-by-2cp": _edit(base, model__context_parallel_size=2, dataset__seq_length=4098,
                                      model__seq_length=4098),
        "global-batch-divisible": _edit(base, train__global_batch_size=1000),
        "layout-layers": _edit(base, model__pipeline_model_parallel_layout='"Ettt|(tttt|)*14tttmL"'),
        "ep-overlap-no-full-recompute": _edit(base, model__recompute_granularity="full", model__recompute_method="uniform",
                                              model__recompute_num_layers=1, model__recompute_modules="null"),
        "recompute-selective-method": _edit(base, model__recompute_method="uniform"),
        "ep-overlap-needs-vpp": _edit(base, model__virtual_pipeline_model_parallel_size="null",
                                      model__pipeline_model_parallel_layout="null",
                                      model__num_layers_in_first_pipeline_stage=5,
                                      model__num_layers_in_last_pipeline_stage=8),
        "bf16-moments-need-precision-aware": _edit(base, optimizer__exp_avg_dtype="bf16", optimizer__exp_avg_sq_dtype="bf16"),
        "mtp-at-most-one-with-ep-overlap": _edit(base, model__mtp_num_layers=2),
    }
    results = dict(zip(cases, _run([_request(setup, launch, o) for o in cases.values()])))
    accepted = [rule for rule, r in results.items() if r["ok"]]
    assert not accepted, {rule: results[rule] for rule in accepted}
    assert _run([_request(setup, launch)])[0]["ok"]
