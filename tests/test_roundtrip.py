"""Every export reads back, through the reader `planner check` uses, to the same plan, job and
model (issue 42): each catalog model in each launch format either round-trips or is refused with a
PlannerError naming what the launcher cannot run. Readers take a missing flag as the framework's
default (Megatron-LM trains in fp32 without --bf16/--fp16), and torchtitan's schedules come back.
A Megatron export is also compared with the model its flags alone build (not the catalog model they
match): RoPE, gpt-oss's clamped unit, the router bias... all come back, up to the features
tests/_roundtrip.py megatron_architecture lists with why."""

from __future__ import annotations

import pytest
from tests._roundtrip import FORMATS, default_plan, export_text, flag_model, read_back, roundtrip, setup_for

from planner.errors import PlannerError
from planner.specs.catalog import catalog_names, load_model

# A model per format and per architecture feature (GQA, sliding windows with sinks and biases, MLA).
FAST = [("llama3.1-8b", "megatron"), ("gpt-oss-120b", "megatron"), ("deepseek-v2", "megatron"),
        ("qwen3-30b-a3b", "bridge"), ("llama3.1-8b", "torchtitan"), ("qwen3-30b-a3b", "torchtitan-toml")]


@pytest.mark.parametrize("name,fmt", FAST)
def test_export_reads_back_the_same(name, fmt):
    assert roundtrip(name, fmt) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_model_in_every_format_reads_back_or_is_refused(fmt):
    done = 0
    for name in catalog_names("models"):
        try:
            diffs = roundtrip(name, fmt)
        except PlannerError as exc:
            assert str(exc).strip(), (name, fmt)  # refused: the message names the rule
            continue
        assert diffs == [], (name, fmt, diffs)
        done += 1
    assert done >= 3  # the refusals are the exception: a format runs several catalog models


@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-toml"])
@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"])
def test_torchtitan_schedules_read_back(fmt, schedule):
    vpp = 1 if schedule == "1f1b" else 2
    plan = f"pp=2,vpp={vpp},mbs=1,sharding=fsdp,schedule={schedule}"
    setup = setup_for("llama3.1-8b", plan)
    back = read_back(export_text(setup, fmt), fmt)
    assert back.plan == setup.plan, (back.plan.to_string(), setup.plan.to_string())
    assert setup.schedule.name == schedule and (schedule in ("1f1b", "interleaved")) == (back.plan.schedule is None)


def test_a_torchtitan_schedule_planner_lacks_is_noted():
    setup = setup_for("llama3.1-8b", "pp=2,mbs=1,sharding=fsdp")
    text = export_text(setup, "torchtitan").replace("--parallelism.pipeline_parallel_schedule 1F1B",
                                                    "--parallelism.pipeline_parallel_schedule GPipe")
    back = read_back(text, "torchtitan")
    assert back.plan.schedule is None and any("GPipe modeled as 1F1B" in n for n in back.notes)


def test_megatron_without_bf16_trains_in_fp32():
    setup = setup_for("llama3.1-8b", "tp=2,mbs=1")
    text = export_text(setup, "megatron")
    assert "    --bf16\n" in text
    fp32 = text.replace("    --bf16\n", "")
    with pytest.raises(PlannerError, match="trains in fp32"):
        read_back(fp32, "megatron")
    back = read_back(fp32, "megatron", precision="bf16")  # the user chose to cost it as bf16
    assert back.plan == setup.plan and any("fp32" in n for n in back.notes)
    assert read_back(fp32.replace("PRECISION_ARGS=(\n", "PRECISION_ARGS=(\n    --fp16\n"),
                     "megatron").job.precisions == ["bf16"]  # fp16: modeled as bf16 (same bytes), noted


@pytest.mark.parametrize("fmt", ["bridge", "torchtitan", "torchtitan-toml"])
def test_an_edited_catalog_model_is_refused_where_the_launcher_builds_the_model_by_name(fmt):
    # A recipe or registry function builds the catalog's llama3.1-8b (32 layers) whatever planner
    # was told: exporting a 16-layer edit would train another model.
    from planner.cost.setup import resolve_setup
    from planner.specs.overrides import apply_overrides

    setup = setup_for("llama3.1-8b", "mbs=1,sharding=fsdp")
    model = apply_overrides(setup.model, {"num_layers": 16})
    edited = resolve_setup(model, setup.hw, setup.job, setup.plan)
    with pytest.raises(PlannerError, match="num_layers: catalog 32, this model 16"):
        export_text(edited, fmt)
    assert roundtrip("llama3.1-8b", fmt, "mbs=1,sharding=fsdp") == []  # the catalog model itself exports


def test_the_mtp_depth_a_launch_writes_itself_is_no_edit():
    from planner.launchers.common import catalog_edits
    from planner.specs.catalog import load_model
    from planner.specs.overrides import apply_overrides

    v3 = load_model("deepseek-v3")
    assert catalog_edits(apply_overrides(v3, {"mtp_layers": 0})) == []
    assert catalog_edits(apply_overrides(v3, {"hidden_size": 4096})) == ["hidden_size: catalog 7168, this model 4096"]


@pytest.mark.parametrize("hw,converter", [("h100", "quantize.linear.float8"), ("gb200-nvl72", "quantize.linear.mx")])
def test_an_fp8_toml_names_the_converters_torchtitan_0_2_registers(hw, converter):
    # 0.1.0's float8/mx are a KeyError in 0.2.x's ModelConvertersContainer; the reader takes 0.2.x's
    # names as FP8 (it once read a real 0.2.x FP8 job as bf16).
    setup = setup_for("llama3.1-8b", "mbs=1,sharding=fsdp,precision=fp8", hw=hw, precision="fp8")
    text = export_text(setup, "torchtitan-toml")
    assert f'converters = ["{converter}"]' in text
    back = read_back(text, "torchtitan-toml")
    assert back.plan == setup.plan and back.plan.precision == "fp8"


def test_megatron_flags_state_every_bundled_architecture_but_the_listed_features():
    # What test_every_model_in_every_format_reads_back_or_is_refused lets differ between the
    # exported model and the one its flags build: only these, each for the reason given.
    from tests._roundtrip import megatron_architecture

    listed = {name: megatron_architecture(load_model(name))[1] for name in catalog_names("models")}
    listed = {name: why for name, why in listed.items() if why}
    assert listed["kimi-k2"] == ["rope.beta_fast 1.0: MLA's YaRN takes it from no flag (32.0 stands)"]
    chunk = "attention_chunk 8192: Megatron-LM has no chunked-attention flag (the export notes it)"
    assert listed["llama4-scout"] == ["rope.high_freq_factor 1.0: --use-rope-scaling takes Llama 3.1's (4.0 stands)", chunk]
    assert listed["llama4-maverick"] == [chunk]
    assert all(why == ["rope: the model states no RoPE; Megatron rotates with its --rotary-base default 10000"]
               for name, why in listed.items() if not name.startswith(("kimi-k2", "llama4-"))), listed
    assert "beta_fast 1" in export_text(setup_for("kimi-k2", "pp=1,mbs=1,ep=8"), "megatron")  # the export says so


def test_gpt_oss_exports_its_clamped_unit_and_router_bias():
    text = export_text(setup_for("gpt-oss-120b", default_plan(load_model("gpt-oss-120b"))), "megatron")
    assert "--quick-geglu" in text and "--activation-func-clamp-value 7" in text and "--swiglu" not in text
    assert "--disable-bias-linear" not in text  # biases everywhere, the router's included
    back = read_back(text, "megatron")
    built = flag_model(back)
    assert built.ffn.clamp == 7.0 and built.moe.router_linear_bias and built.moe.expert_bias


@pytest.mark.parametrize("name,fmt,plan", [
    ("llama3.1-8b", "megatron", "pp=2,mbs=1,cuda_graphs=scoped:layer"),
    ("llama3.1-8b", "megatron", "pp=2,mbs=1,cuda_graphs=full_iteration"),
    ("qwen3-30b-a3b", "megatron", "pp=2,mbs=1,ep=4,dispatcher=alltoall,cuda_graphs=scoped:attn+moe_router+moe_preprocess"),
    ("qwen3-30b-a3b", "bridge", "pp=2,mbs=1,sharding=fsdp,ep=4,dispatcher=alltoall,"
                                "cuda_graphs=scoped:attn+moe_router+moe_preprocess"),
    ("llama3.1-8b", "bridge", "pp=2,mbs=1,cuda_graphs=full_iteration"),
])
def test_cuda_graphs_read_back(name, fmt, plan):
    """The plan's cuda_graphs is written (--cuda-graph-impl/--cuda-graph-modules; Bridge
    model.cuda_graph_impl/cuda_graph_scope) and read back as the same key."""
    assert roundtrip(name, fmt, plan) == []
    setup = setup_for(name, plan)
    assert setup.plan.cuda_graphs and read_back(export_text(setup, fmt), fmt).plan.cuda_graphs == setup.plan.cuda_graphs


@pytest.mark.parametrize("fmt,plan,flags", [
    ("megatron", "mbs=1,precision=nvfp4", ["--fp4-format e2m1", "--fp4-recipe nvfp4"]),
    ("megatron", "mbs=1,precision=nvfp4,param_gather=fp4", ["--fp4-format e2m1", "--fp4-param-gather"]),
    ("bridge", "mbs=1,precision=nvfp4", ["mixed_precision=bf16_with_nvfp4_mixed"]),
])
def test_nvfp4_reads_back(fmt, plan, flags):
    # Megatron's --fp4-format / --fp4-recipe / --fp4-param-gather and Bridge's NVFP4 preset
    # (issue 39): the plan comes back in NVFP4, not bf16.
    setup = setup_for("llama3.1-8b", plan, hw="gb200-nvl72", precision="nvfp4")
    text = export_text(setup, fmt)
    assert all(f in " ".join(text.split()) for f in flags), text
    back = read_back(text, fmt, hw="gb200-nvl72")
    assert back.plan == setup.plan and back.plan.precision == "nvfp4", back.plan.to_string()
