"""Megatron-Bridge out and in: `export --format bridge` writes run_recipe.py with the recipe and an
override for every plan setting; `check --bridge` reads the script, an override list or a
ConfigContainer YAML back to the same plan. Bridge's own config validation of these exports runs in
tests/megatron_validate/test_bridge.py (it needs the Bridge venv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import PlannerError
from planner.launchers.bridge.read import hydra_parse, job_from_bridge, read_bridge_text
from planner.launchers.bridge.write import bridge_launch, bridge_settings, export_bridge, hydra_value
from tests._export_specs import resolve

FIXTURES = Path(__file__).parent / "fixtures" / "bridge"

# The acceptance set, plus the levers each setting of the mapping needs.
ACCEPTANCE = [
    ("deepseek-v3", "gb200-nvl72", 256, 8192, "pp=4,vpp=4,ep=64,mbs=1,recompute=mla_up_proj+moe_act,layout=Et*3|(tttt|)*14ttmL"),
    ("qwen3-235b-a22b", "gb200-nvl72", 128, 2048, "tp=2,pp=2,ep=32,etp=1,mbs=1,recompute=moe_act,layout=Et*47|t*47L"),
    ("llama3.1-405b", "h100", 1024, 1024, "tp=8,pp=8,vpp=2,cp=2,mbs=1,recompute=full:4,layout=Et*7|(t*8|)*14t*7L"),
    ("llama3.1-8b", "h100", 64, 512, "tp=2,cp=4,mbs=1,precision=fp8,offload=activations"),
]
MORE = [
    ("deepseek-v3", "gb200-nvl72", 256, 8192, "ep=64,etp=1,sharding=zero2,recompute=moe_act,offload=optimizer,dispatcher=hybridep,ep_overlap=on"),
    ("deepseek-v3", "gb200-nvl72", 256, 8192, "tp=2,pp=4,ep=32,etp=1,mbs=1,recompute=full:2,layout=Et*14|(t*16|)*2t*15mL,offload=optimizer,moments=bf16"),
    ("deepseek-v3", "h100", 512, 4096, "pp=8,vpp=2,ep=32,mbs=1,precision=fp8,recompute=mla_up_proj+layernorm,layout=Ettt|(tttt|)*14ttmL,ep_overlap=on"),
    ("qwen3-235b-a22b", "h100", 256, 2048, "tp=4,pp=8,ep=16,etp=1,mbs=1,recompute=full,layout=Et*11|(t*12|)*6t*11L,sharding=fsdp"),
    ("llama3.1-405b", "gb200-nvl72", 576, 1152, "tp=8,pp=9,mbs=1,recompute=full,layout=Et*13|(t*14|)*7t*15L,sharding=hsdp:4"),
    ("llama3.1-70b", "h100", 256, 512, "tp=4,pp=4,vpp=5,cp=2,mbs=1,recompute=core_attn,sharding=ddp"),
    ("qwen3-30b-a3b", "h100", 16, 1024, "ep=16,mbs=2,dispatcher=alltoall"),
    # delayed weight gradients, and the full iteration with static expert shapes (issue 39)
    ("deepseek-v3", "gb200-nvl72", 256, 8192,
     "ep=64,etp=1,recompute=moe_act,dispatcher=hybridep,ep_overlap=wgrad,cuda_graphs=full_iteration"),
]
CASES = ACCEPTANCE + MORE


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[4][:24]}" for c in CASES])
def test_export_reads_back_to_the_same_plan(case, tmp_path):
    *_, setup = resolve(*case)
    script = tmp_path / "run.sh"
    script.write_text(export_bridge(setup))
    bj = job_from_bridge(script, hw=case[1])
    assert bj.plan.to_string() == setup.plan.to_string()
    assert (bj.job.gpus, bj.job.global_batch, bj.job.seq_len) == (setup.job.gpus, setup.job.global_batch, setup.job.seq_len)
    assert bj.model.name == setup.model.name
    assert bj.args.unknown == [] and bj.defaults_used == []  # every setting is written, none left to the recipe


@pytest.mark.parametrize("case", CASES[:4], ids=[c[0] for c in CASES[:4]])
def test_script_words_are_the_overrides_quoted(case):
    """bash reads the script's OVERRIDES array back to exactly the override strings (every value
    quoted: a layout's '|', '*' and parentheses, a list's brackets)."""
    *_, setup = resolve(*case)
    launch = bridge_launch(setup)
    args = read_bridge_text(export_bridge(setup), "run.sh")
    assert args.recipe == launch.recipe and args.kind == "script"
    expected = {k: hydra_parse(hydra_value(v)) for k, v in bridge_settings(setup, launch.recipe)}
    assert args.values == expected
    assert args.launcher["--nproc-per-node"] == str(launch.nproc_per_node)


def test_every_override_value_round_trips_through_hydra_text():
    for value in (None, True, False, 0, 4096, 1.0, "fp32", "bf16_with_mxfp8_mixed", "Et*3|(tttt|)*14ttmL",
                  ["core_attn", "mlp"], "a \"quoted\" value", "null", [], "with space"):
        assert hydra_parse(hydra_value(value)) == value, value


def test_hydra_values():
    assert hydra_parse("[core_attn, moe_act]") == ["core_attn", "moe_act"]
    assert hydra_parse("null") is None and hydra_parse("True") is True
    assert hydra_parse("'Et*7|(t*8|)*14t*7L'") == "Et*7|(t*8|)*14t*7L"
    assert hydra_parse("1e-4") == 1e-4 and hydra_parse("-3") == -3
    for bad in ('"unclosed', "[a,b", "[a] b"):
        with pytest.raises(PlannerError):
            hydra_parse(bad)


def test_partial_overrides_take_the_recipe_defaults(tmp_path):
    """A launch that sets only TP takes the rest from the recipe (llama31_405b_pretrain_config:
    PP8 VPP2 CP4, embedding and loss counted in the pipeline split, GBS 512, seq 131072)."""
    f = tmp_path / "run.sh"
    f.write_text("torchrun --nproc-per-node 8 --nnodes 32 scripts/training/run_recipe.py "
                 "--recipe llama31_405b_pretrain_config --mode pretrain -tp 8 train.global_batch_size=256\n")
    bj = job_from_bridge(f, hw="h100")
    p = bj.plan
    assert (p.tp, p.pp, p.vpp, p.cp) == (8, 8, 2, 4)
    assert bj.job.gpus == 256 and bj.job.global_batch == 256 and bj.job.seq_len == 131072
    # 126 layers + embedding + loss = 128 over 16 chunks: the first and last hold 7 layers.
    from planner.specs.layout import parse_layout

    assert parse_layout(p.layout) == ("E" + "t" * 7,) + ("t" * 8,) * 14 + ("t" * 7 + "L",)
    assert "model.pipeline_model_parallel_size" in bj.defaults_used


def test_bare_override_list_and_convenience_flags(tmp_path):
    f = tmp_path / "overrides.txt"
    f.write_text("--recipe qwen3_30b_a3b_pretrain_config\n-ep 8 -mb 2\nmodel.moe_token_dispatcher_type=alltoall\n"
                 "model.cuda_graph_impl=none\ntrain.train_iters=10\nmodel.some_new_field=3\n")
    bj = job_from_bridge(f, hw="h100", gpus=16)
    assert (bj.plan.ep, bj.plan.mbs, bj.plan.dispatcher) == (8, 2, "alltoall")
    assert bj.args.kind == "overrides"
    assert "train.train_iters" in bj.args.ignored
    assert any("model.some_new_field" in u for u in bj.args.unknown)


def test_recipe_yaml_reads_back():
    bj = job_from_bridge(FIXTURES / "llama31_8b_pretrain_dryrun_tp2.yaml", hw="h100", gpus=16)
    assert bj.model.name == "llama3.1-8b" and bj.model_source == "the YAML's model section"
    assert bj.plan.to_string() == "tp=2,cp=2,precision=bf16"
    assert (bj.job.global_batch, bj.job.seq_len) == (512, 8192)


def test_nested_override_yaml(tmp_path):
    f = tmp_path / "override.yaml"
    f.write_text("recipe: deepseek_v3_pretrain_config\nmodel:\n  tensor_model_parallel_size: 1\n"
                 "  pipeline_model_parallel_size: 1\n  expert_model_parallel_size: 64\n"
                 "  moe_flex_dispatcher_backend: deepep\ntrain:\n  global_batch_size: 8192\n")
    bj = job_from_bridge(f, hw="gb200-nvl72", gpus=256)
    assert (bj.plan.tp, bj.plan.pp, bj.plan.ep, bj.plan.dispatcher) == (1, 1, 64, "deepep")


def test_check_bridge_cli(tmp_path, capsys):
    *_, setup = resolve(*ACCEPTANCE[0])
    f = tmp_path / "run.sh"
    assert main(["export", "--model", "deepseek-v3", "--hw", "gb200-nvl72", "--plan", ACCEPTANCE[0][4], "--format",
                 "bridge", "--out", str(f)]) == 0
    capsys.readouterr()
    assert main(["check", "--bridge", str(f), "--hw", "gb200-nvl72", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plan"] == setup.plan.to_string() and r["recipe"] == "deepseek_v3_pretrain_config"
    assert r["violations"] == [] and "memory" in r


def test_export_refuses_a_model_without_a_recipe(capsys):
    code = main(["export", "--model", "mixtral-8x7b", "--hw", "h100", "--gpus", "64", "--plan", "ep=8", "--format", "bridge"])
    err = capsys.readouterr().err
    assert code == 1 or code == 2
    assert "[bridge-recipe]" in err and "--bridge-recipe" in err


def test_check_bridge_not_a_launch(tmp_path, capsys):
    f = tmp_path / "x.sh"
    f.write_text("echo hello\n")
    assert main(["check", "--bridge", str(f), "--hw", "h100"]) == 2
    assert "no Megatron-Bridge launch" in capsys.readouterr().err


def test_bridge_recipe_name_is_checked(capsys):
    code = main(["export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--plan", "tp=8",
                 "--format", "bridge", "--bridge-recipe", "x; rm -rf /"])
    assert code == 2 and "not a recipe function name" in capsys.readouterr().err


def test_a_bridge_launch_sets_the_optimizations_it_runs(tmp_path, capsys):
    """CUDA graphs, the FP8 recipe and FP8 attention come from the launch, through the Megatron
    reader's own rules, and explain and check cost the plan with them alike."""
    f = tmp_path / "overrides.txt"
    f.write_text("--recipe deepseek_v3_pretrain_config\n-tp 1 -pp 1 -ep 64 mixed_precision=bf16_with_mxfp8_mixed\n"
                 "model.cuda_graph_impl=transformer_engine\nmodel.cuda_graph_scope=[attn,moe_router,moe_preprocess]\n"
                 "model.fp8_dot_product_attention=true\ntrain.global_batch_size=8192\n")
    bj = job_from_bridge(f, hw="gb200-nvl72", gpus=256)
    assert bj.assumptions == {"fp8_recipe": "mxfp8", "cuda_graphs": "scoped", "fp8_attention": True,
                              "cuda_graph_modules": ("attn", "moe_router", "moe_preprocess")}
    assert not any("cuda_graph" in u for u in bj.args.unknown)
    assert main(["explain", "--bridge", str(f), "--hw", "gb200-nvl72", "--gpus", "256", "--json"]) in (0, 1)
    ex = json.loads(capsys.readouterr().out)
    assert ex["assumptions"]["cuda_graphs"] == "scoped" and ex["assumptions"]["fp8_attention"] is True
    main(["check", "--bridge", str(f), "--hw", "gb200-nvl72", "--gpus", "256", "--json"])
    ck = json.loads(capsys.readouterr().out)
    assert ck["time"]["step_time_s"] == ex["time"]["step_time_s"]
    eager = tmp_path / "eager.txt"
    eager.write_text(f.read_text().replace("model.cuda_graph_impl=transformer_engine", "model.cuda_graph_impl=none"))
    main(["check", "--bridge", str(eager), "--hw", "gb200-nvl72", "--gpus", "256", "--json"])
    assert json.loads(capsys.readouterr().out)["time"]["step_time_s"] > ck["time"]["step_time_s"]


def test_a_top_level_override_alone_on_its_line_is_kept(tmp_path):
    """In an override list, ``mixed_precision=...`` on a line of its own is an override, not the
    shell variable assignment bash would make of it (it was dropped without a word)."""
    f = tmp_path / "overrides.txt"
    f.write_text("--recipe qwen3_30b_a3b_pretrain_config\n-ep 8\nmixed_precision=bf16_with_fp8_current_scaling_mixed\n")
    bj = job_from_bridge(f, hw="h100", gpus=16)
    assert bj.args.values["mixed_precision"] == "bf16_with_fp8_current_scaling_mixed"
    assert bj.plan.precision == "fp8" and bj.assumptions["fp8_recipe"] == "tensorwise"


def test_a_whole_config_without_mixed_precision_trains_in_fp32():
    """ConfigContainer.mixed_precision defaults to None (Megatron-Bridge training/config.py): a
    whole ConfigContainer YAML without it keeps the model's fp32 and is refused unless --precision
    says how to cost it; a recipe-built launch has its recipe's bf16_mixed (recipes/common.py)."""
    text = (FIXTURES / "llama31_8b_pretrain_dryrun_tp2.yaml").read_text()
    assert "mixed_precision: bf16_mixed\n" in text and "  bf16: true\n" in text
    fp32 = text.replace("mixed_precision: bf16_mixed\n", "").replace("  bf16: true\n", "  bf16: false\n")
    fp32 = fp32.replace("    _target_: torch.bfloat16\n  perform_initialization", "    _target_: torch.float32\n  perform_initialization")
    with pytest.raises(PlannerError, match="trains in fp32"):
        job_from_bridge(fp32, hw="h100", gpus=16)
    back = job_from_bridge(fp32, hw="h100", gpus=16, precision="bf16")
    assert back.job.precisions == ["bf16"] and any("fp32" in n for n in back.notes)
    # without a mixed-precision config the model section's own bf16 decides
    assert job_from_bridge(text.replace("mixed_precision: bf16_mixed\n", ""), hw="h100",
                           gpus=16).job.precisions == ["bf16"]
    assert job_from_bridge(text.replace("mixed_precision: bf16_mixed\n", "mixed_precision: null\n")
                           .replace("  bf16: true\n", "  bf16: false\n"), hw="h100", gpus=16,
                           precision="bf16").plan.to_string() == "tp=2,cp=2,precision=bf16"
    recipe = job_from_bridge("--recipe llama31_8b_pretrain_config\n-tp 2\n", hw="h100", gpus=16)
    assert recipe.job.precisions == ["bf16"]  # the recipe's bf16_mixed


def test_fsdp_sharding_strategy_default_per_source():
    """Without ddp.data_parallel_sharding_strategy, a whole ConfigContainer has MCore's 'no_shard';
    a recipe-built launch has the recipes' optim_grads_params (recipes/common.py _pretrain_common)."""
    text = (FIXTURES / "llama31_8b_pretrain_dryrun_tp2.yaml").read_text()
    assert text.count("  data_parallel_sharding_strategy: no_shard\n") == 1
    whole = text.replace("  data_parallel_sharding_strategy: no_shard\n", "").replace(
        "  use_megatron_fsdp: false\n", "  use_megatron_fsdp: true\n", 1)
    assert job_from_bridge(whole, hw="h100", gpus=16).plan.sharding == "ddp"
    recipe = job_from_bridge("--recipe llama31_8b_pretrain_config\nddp.use_megatron_fsdp=true\n", hw="h100", gpus=16)
    assert recipe.plan.sharding == "fsdp"


def test_whole_config_reads_gradient_and_gather_dtypes():
    """A whole ConfigContainer YAML written out as fields: mixed_precision.grad_reduce_in_fp32 and
    fp8_param_gather (MixedPrecisionConfig, megatron/bridge/training/mixed_precision.py v0.6.0) are
    what setup() puts on the DDP config; with a preset named by string, the preset's values win."""
    text = (FIXTURES / "llama31_8b_pretrain_dryrun_tp2.yaml").read_text()
    assert text.count("mixed_precision: bf16_mixed\n") == 1
    named = job_from_bridge(text.replace("  grad_reduce_in_fp32: true\n", "  grad_reduce_in_fp32: false\n"),
                            hw="h100", gpus=16)
    assert (named.plan.grad_reduce, named.plan.param_gather) == ("fp32", "bf16")  # bf16_mixed reduces in fp32
    fields = ("mixed_precision:\n  bf16: true\n  fp8: hybrid\n  fp8_recipe: blockwise\n"
              "  grad_reduce_in_fp32: {gr}\n  fp8_param_gather: {pg}\n")
    for gr, pg, want in (("false", "true", ("bf16", "fp8")), ("true", "false", ("fp32", "bf16"))):
        doc = text.replace("mixed_precision: bf16_mixed\n", fields.format(gr=gr, pg=pg)).replace(
            "  use_distributed_optimizer: false\n", "  use_distributed_optimizer: true\n")
        bj = job_from_bridge(doc, hw="h100", gpus=16)
        assert bj.plan.precision == "fp8" and (bj.plan.grad_reduce, bj.plan.param_gather) == want, bj.plan.to_string()
