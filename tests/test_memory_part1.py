"""Memory model part 1: constant memory and the activation inventory against published figures."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost import activations as act
from planner.cost.flops import Shard
from planner.cost.memory import memory_report, stage_memory
from planner.errors import PlanRuleError
from planner.units import GiB

from tests._models import korthikanti_model, setup_for, table3_setup

def _calibration():
    import pathlib

    here = pathlib.Path(__file__).parent / "data" / "calibration.yaml"
    return yaml.safe_load(here.read_text())


# ---- DeepSeek-V3, Table 3 of the Megatron-Core MoE report (arXiv 2603.07685) ------------------

def test_table3_rank2_constant_and_activations():
    cal = _calibration()["megatron_core_moe_2026_table3"]["per_gpu_gib"]
    setup = table3_setup()
    st2 = stage_memory(setup, 2)
    assert sum(len(c.layers) for c in st2.chunks) == 16  # 16 MoE layers, 4 per chunk
    c = st2.constant
    assert (c.weights + c.gradients) / GiB == pytest.approx(cal["weights_and_gradients"], rel=0.03)
    assert c.optimizer / GiB == pytest.approx(cal["master_weights_and_optimizer"], rel=0.03)
    assert st2.max_inflight == 15  # 2(p - r - 1) + (v - 1) p + 1
    assert st2.activations_end_of_warmup / GiB == pytest.approx(cal["activations"], rel=0.05)


def test_table3_worst_rank_is_reported_and_higher():
    setup = table3_setup()
    rep = memory_report(setup)
    rank2 = rep.stages[2]
    total2 = rank2.constant.total + rank2.activations_end_of_warmup
    worst = rep.worst
    assert worst.rank == 1
    total_worst = worst.constant.total + worst.activations_end_of_warmup
    assert total_worst > total2
    # calibration.yaml: under the same model the worst rank is about 217 GiB.
    assert total_worst / GiB == pytest.approx(217, rel=0.03)
    j = rep.to_json()
    assert j["worst_stage"] == 1 and len(j["stages"]) == 4


# ---- Korthikanti et al. 2022 ---------------------------------------------------------------------

KORTHIKANTI = _calibration()["korthikanti_2022"]


def _korthikanti_acts(name: str, recompute: str, sp: bool, layers_only: bool = False) -> float:
    """Activations of the first pipeline stage at the end of the warm-up (Figure 1's quantity),
    with the 2022 unfused fp16 attention (implementation 'megatron-local-fused-softmax').
    ``layers_only`` leaves out the embedding and output head (Figure 7 compares layers)."""
    d = KORTHIKANTI["models"][name]
    lay = KORTHIKANTI["layouts"][name]
    model = korthikanti_model(name.lower(), d["hidden"], d["ffn"], d["heads"], d["head_dim"], d["layers"])
    plan = f"tp={lay['tp']},pp={lay['pp']},vpp={lay['vpp']},mbs={lay['micro_batch']},sharding=ddp,recompute={recompute}"
    setup = setup_for(model, "h100", plan, gpus=lay["gpus"], global_batch=lay["global_batch"], seq_len=2048,
                      implementation="megatron-local-fused-softmax", sequence_parallel=sp)
    stage = stage_memory(setup, 0)
    if not layers_only:
        return stage.activations_end_of_warmup
    return sum(n * sum(layer.kept for layer in c.layers if layer.name.startswith("layer"))
               for n, c in zip(stage.inflight_end_of_warmup, stage.chunks))


@pytest.mark.parametrize("name", list(KORTHIKANTI["models"]))
def test_korthikanti_figure1(name):
    fig1 = KORTHIKANTI["figure1_memory_gib"][name]
    assert _korthikanti_acts(name, "none", sp=False) / GiB == pytest.approx(fig1["activations_none"], rel=0.05)
    assert _korthikanti_acts(name, "core_attn", sp=True) / GiB == pytest.approx(fig1["activations_seqsel"], rel=0.05)
    # Parameters and optimizer: one middle stage's transformer layers at 18 bytes/param (DDP).
    d = KORTHIKANTI["models"][name]
    lay = KORTHIKANTI["layouts"][name]
    model = korthikanti_model(name.lower(), d["hidden"], d["ffn"], d["heads"], d["head_dim"], d["layers"])
    setup = setup_for(model, "h100", f"tp={lay['tp']},pp={lay['pp']},vpp={lay['vpp']},mbs={lay['micro_batch']},sharding=ddp",
                      gpus=lay["gpus"], global_batch=lay["global_batch"], seq_len=2048)
    rank = 1 if lay["pp"] > 1 else 0
    assert stage_memory(setup, rank).constant.total / GiB == pytest.approx(fig1["params_and_optimizer"], rel=0.05)


@pytest.mark.parametrize("name", list(KORTHIKANTI["models"]))
def test_korthikanti_figure7_shares(name):
    fig7 = KORTHIKANTI["figure7_activation_percent_of_none"][name]
    none = _korthikanti_acts(name, "none", sp=False, layers_only=True)
    got = {
        "seq": _korthikanti_acts(name, "none", sp=True, layers_only=True),
        "sel": _korthikanti_acts(name, "core_attn", sp=False, layers_only=True),
        "seqsel": _korthikanti_acts(name, "core_attn", sp=True, layers_only=True),
        "full": _korthikanti_acts(name, "full", sp=False, layers_only=True),
    }
    for key, value in got.items():
        assert 100 * value / none == pytest.approx(fig7[key], rel=0.05), key


def test_flash_attention_example_from_the_seed():
    """B=4, H=32, S=8192, hidden 4096, bf16, dropout on: ~40 GiB of unfused attention
    intermediates (softmax, dropout mask and output) against ~0.254 GiB with flash (output + LSE)."""
    from planner.specs.model import ModelSpec

    m = ModelSpec(name="fa-example", source=["seed"], hidden_size=4096, num_layers=1, vocab_size=32000,
                  attention={"kind": "gqa", "num_heads": 32, "num_kv_heads": 32, "head_dim": 128},
                  ffn={"activation": "swiglu", "hidden_size": 11008}, attention_dropout=0.1, hidden_dropout=0.1)
    sh_unfused = Shard(tp=1, cp=1, ep=1, etp=1, mbs=4, seq=8192, implementation="megatron-local-fused-softmax", sp=False)
    unfused = sum(t.bytes for t in act.core_attention_terms(m, sh_unfused, 32))
    assert unfused / GiB == pytest.approx(40, rel=0.02)
    sh_flash = Shard(tp=1, cp=1, ep=1, etp=1, mbs=4, seq=8192, implementation="te", sp=False)
    terms = {t.name: t.bytes for t in act.layer_terms(m, sh_flash, "dense")}
    flash = terms["attn.output"] + terms["attn.softmax_lse"]
    assert flash / GiB == pytest.approx(0.254, rel=0.02)
    assert not any("softmax_fp32" in n or n == "attn.softmax" for n in terms)


# ---- properties --------------------------------------------------------------------------------

SHARDING_ORDER = ["ddp", "dist_opt", "zero2", "fsdp"]

plans = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]),
    "pp": st.sampled_from([1, 2, 4]),
    "ep": st.sampled_from([1, 2, 4, 8]),
    "mbs": st.sampled_from([1, 2]),
})


def _qwen_like():
    from planner.specs.model import ModelSpec

    return ModelSpec(name="moe-small", source=["test"], hidden_size=2048, num_layers=8, vocab_size=32000,
                     attention={"kind": "gqa", "num_heads": 16, "num_kv_heads": 4, "head_dim": 128},
                     ffn={"activation": "swiglu", "hidden_size": 6144},
                     moe={"num_experts": 32, "top_k": 4, "expert_hidden_size": 768, "num_shared_experts": 1, "first_k_dense": 1})


@settings(max_examples=40, deadline=None)
@given(plans, st.integers(0, 2))
def test_more_sharding_never_increases_a_constant_class(p, i):
    model = _qwen_like()
    base = f"tp={p['tp']},pp={p['pp']},ep={p['ep']},etp=1,mbs={p['mbs']}"
    gpus = 64
    gb = 64 * p["mbs"]
    a = stage_memory(setup_for(model, "h100", base + f",sharding={SHARDING_ORDER[i]}", gpus=gpus, global_batch=gb, seq_len=1024), 0).constant
    b = stage_memory(setup_for(model, "h100", base + f",sharding={SHARDING_ORDER[i + 1]}", gpus=gpus, global_batch=gb, seq_len=1024), 0).constant
    for cls in ("weights", "gradients", "optimizer"):
        assert getattr(b, cls) <= getattr(a, cls) + 1e-6
    # More data parallelism (twice the GPUs) never increases a class either.
    c = stage_memory(setup_for(model, "h100", base + f",sharding={SHARDING_ORDER[i]}", gpus=2 * gpus, global_batch=2 * gb, seq_len=1024), 0).constant
    for cls in ("weights", "gradients", "optimizer"):
        assert getattr(c, cls) <= getattr(a, cls) + 1e-6
        assert getattr(a, cls) >= 0


MODULES = ["core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts"]


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(MODULES)), st.sampled_from(MODULES), st.sampled_from(["dense", "moe"]),
       st.sampled_from([1, 2, 4]), st.booleans())
def test_adding_a_recompute_module_never_increases_stored_activations(mods, extra, kind, tp, fp8):
    from planner.specs.catalog import load_model

    m = load_model("deepseek-v3")
    sh = Shard(tp=tp, cp=1, ep=8, etp=1, mbs=1, seq=4096, sp=tp > 1)
    terms = act.layer_terms(m, sh, kind)
    before = act.kept_bytes(terms, full=False, drop=act.dropped_modules(kind, tuple(mods)), fp8=fp8)
    after = act.kept_bytes(terms, full=False, drop=act.dropped_modules(kind, tuple(mods | {extra})), fp8=fp8)
    full = act.kept_bytes(terms, full=True, drop=set(), fp8=fp8)
    assert 0 <= full <= after <= before
    assert all(t.bytes >= 0 for t in terms)


# ---- plans the model cannot hold ----------------------------------------------------------------

@pytest.mark.parametrize("plan,rule", [
    ("tp=3", "world-divisibility"),
    ("tp=1,ep=512", "experts-divisible-by-ep"),
    ("pp=4,vpp=4,ep=64", "layers-divisible"),
    ("pp=4,vpp=4,ep=64,layout=Ettt|(tttt|)*14tttmL", "layout-layers"),
    ("pp=4,vpp=2,layout=Ettt|(tttt|)*14ttmL", "layout-vpp"),
])
def test_plans_the_model_cannot_hold_name_the_rule(plan, rule):
    with pytest.raises(PlanRuleError) as e:
        table3_setup(plan)
    assert e.value.rule == rule
    assert rule in str(e.value)
