"""Plan: the key=value string and JSON forms of DESIGN.md section 6 round-trip for every key,
canonical forms compare equal, derived degrees are computed and never written over the user's, and
a bad key or value is an error that names it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerError, PlanRuleError
from planner.specs.plan import GRAPH_MODULES, KEY_ORDER, RECOMPUTE_MODULES, Plan

# ---- strategies: one per key, values as a user writes them -------------------------------------

positive = st.integers(min_value=1, max_value=4096)
LAYOUTS = ["Et|tL", "Ettt|(tttt|)*14ttmL", "Et*3|(t*4|)*14tmL", "E,t,t|t,t,L", "Et|(tt|)*30mL", "E(tt|)*2ttL"]

KEY_STRATEGIES = {
    "tp": positive, "cp": positive, "pp": positive, "vpp": positive, "ep": positive, "mbs": positive,
    "dp": positive | st.none(),
    "etp": positive | st.none(),
    "edp": positive | st.none(),
    "sharding": st.sampled_from(["dist_opt", "ddp", "zero2", "fsdp"]) | positive.map(lambda n: f"hsdp:{n}"),
    "recompute": st.one_of(
        st.just("none"), st.just("full"), st.integers(0, 64).map(lambda n: f"full:{n}"),
        st.lists(st.sampled_from(RECOMPUTE_MODULES), min_size=1, unique=True).map("+".join),
    ),
    "offload": st.sampled_from(["none", "optimizer", "activations", "optimizer+activations"]),
    "precision": st.sampled_from(["bf16", "fp8", None]),
    "moments": st.sampled_from(["fp32", "bf16"]),
    "grad_reduce": st.sampled_from(["fp32", "bf16"]),
    "param_gather": st.sampled_from(["bf16", "fp8"]),
    "layout": st.sampled_from(LAYOUTS) | st.none(),
    "stage_recompute": st.lists(st.integers(0, 16), min_size=1, max_size=8).map(lambda xs: "/".join(map(str, xs))) | st.none(),
    "dispatcher": st.sampled_from(["alltoall", "deepep", "hybridep", None]),
    "ep_overlap": st.sampled_from(["on", "off", "wgrad"]),
    "schedule": st.sampled_from(["1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "dualpipev", None]),
    "cuda_graphs": st.sampled_from(["none", "full_iteration", "scoped:layer", "layer"])
    | st.lists(st.sampled_from(GRAPH_MODULES), min_size=1, unique=True).map(lambda ms: "scoped:" + "+".join(ms)),
}


@st.composite
def plans(draw) -> Plan:
    keys = draw(st.sets(st.sampled_from(sorted(KEY_STRATEGIES))))
    values = {k: draw(KEY_STRATEGIES[k]) for k in keys}
    return Plan.from_mapping({k: v for k, v in values.items() if v is not None})


def test_the_strategies_and_the_string_form_cover_every_plan_key():
    assert set(KEY_STRATEGIES) == set(Plan.model_fields)
    # to_string() writes keys in KEY_ORDER: a key missing there would be dropped silently.
    assert sorted(KEY_ORDER) == sorted(Plan.model_fields) and len(set(KEY_ORDER)) == len(KEY_ORDER)


@settings(max_examples=300, deadline=None)
@given(plans())
def test_string_form_round_trips(plan):
    assert Plan.parse(plan.to_string()) == plan


@settings(max_examples=300, deadline=None)
@given(plans())
def test_json_form_round_trips(plan):
    blob = json.dumps(plan.to_json(), sort_keys=True)
    assert Plan.from_mapping(json.loads(blob)) == plan


@settings(max_examples=300, deadline=None)
@given(plans(), st.booleans(), st.sampled_from(["alltoall", "deepep", "hybridep"]), st.sampled_from(["bf16", "fp8"]))
def test_canonical_form_is_stable(plan, is_moe, dispatcher, precision):
    kw = dict(is_moe=is_moe, default_dispatcher=dispatcher, default_precision=precision)
    canon = plan.canonical(**kw)
    assert canon.canonical(**kw) == canon
    assert Plan.parse(canon.to_string()) == canon
    assert canon.dp is None and canon.edp is None  # derived, so dropped from the canonical form
    if canon.pp == 1:
        assert canon.vpp == 1


def test_every_key_in_one_plan():
    text = ("tp=2,cp=2,pp=4,vpp=2,dp=8,ep=16,etp=1,edp=4,mbs=2,sharding=hsdp:16,recompute=moe_act+mla_up_proj,"
            "offload=optimizer+activations,precision=fp8,moments=bf16,grad_reduce=bf16,param_gather=fp8,layout=Et|(tt|)*30mL,"
            "stage_recompute=4/2/0/0,dispatcher=deepep,ep_overlap=on,schedule=zb-h1,"
            "cuda_graphs=moe_preprocess+attn+moe_router")
    plan = Plan.parse(text)
    assert plan.to_json() == {
        "tp": 2, "cp": 2, "pp": 4, "vpp": 2, "dp": 8, "ep": 16, "etp": 1, "edp": 4, "mbs": 2, "sharding": "hsdp:16",
        "recompute": "mla_up_proj+moe_act", "offload": "optimizer+activations", "precision": "fp8",
        "moments": "bf16", "grad_reduce": "bf16", "param_gather": "fp8", "layout": "Et|(tt|)*30mL", "stage_recompute": "4/2/0/0", "dispatcher": "deepep",
        "ep_overlap": "on", "schedule": "zb-h1", "cuda_graphs": "scoped:attn+moe_router+moe_preprocess",
    }
    assert set(plan.to_json()) == set(Plan.model_fields)
    assert Plan.parse(plan.to_string()) == plan
    assert plan.sharding.group == 16 and plan.recompute.modules == ("mla_up_proj", "moe_act")
    assert plan.stage_recompute == (4, 2, 0, 0) and plan.offload.optimizer and plan.offload.activations


def test_omitted_keys_take_their_defaults():
    plan = Plan.parse("")
    assert (plan.tp, plan.cp, plan.pp, plan.vpp, plan.ep, plan.mbs) == (1, 1, 1, 1, 1, 1)
    assert (plan.sharding, plan.recompute, plan.offload, plan.moments, plan.ep_overlap) == (
        "dist_opt", "none", "none", "fp32", "off")
    assert not plan.ep_overlap and plan.schedule is None
    assert plan.dp is None and plan.etp is None and plan.expert_tp == 1
    assert Plan.parse("tp=4").expert_tp == 4  # etp defaults to tp, as in Megatron


def test_layout_with_commas_and_spaces():
    plan = Plan.parse("pp=2, layout=E,t t|t,tL, mbs=2")
    assert plan.layout == "E,tt|t,tL" and plan.mbs == 2 and plan.pp == 2


@pytest.mark.parametrize(
    "a, b, is_moe",
    [
        ("tp=2,pp=1,vpp=4", "tp=2", False),                      # vpp means nothing without PP
        ("pp=4,tp=2", "tp=2,pp=4", False),                       # order does not matter
        ("recompute=mlp+core_attn", "recompute=core_attn+mlp", False),
        ("recompute=full:0", "", False),                          # no layer recomputed
        ("ep=1,etp=4,dispatcher=deepep,ep_overlap=on", "", False),  # no expert keys on a dense model
        ("tp=2,etp=2", "tp=2", True),                             # etp defaults to tp
        ("dp=32,tp=2", "tp=2", True),                             # dp is derived
        ("ep=1,dispatcher=hybridep", "", True),                   # no dispatcher without EP
        ("ep=8", "ep=8,dispatcher=deepep", True),                 # the hardware's default made explicit
        ("", "precision=bf16", False),                            # the job's default made explicit
        ("stage_recompute=04/2", "stage_recompute=4/2", False),
        ("layout=Et|t L", "layout=Et|tL", False),
    ],
)
def test_canonical_forms_compare_equal(a, b, is_moe):
    kw = dict(is_moe=is_moe, default_dispatcher="deepep", default_precision="bf16")
    assert Plan.parse(a).canonical(**kw) == Plan.parse(b).canonical(**kw)


@pytest.mark.parametrize("a, b", [("tp=2", "tp=4"), ("ep=8", "ep=8,dispatcher=alltoall"), ("pp=2,vpp=2", "pp=2")])
def test_different_plans_stay_different(a, b):
    kw = dict(is_moe=True, default_dispatcher="deepep", default_precision="bf16")
    assert Plan.parse(a).canonical(**kw) != Plan.parse(b).canonical(**kw)


def test_derived_degrees_never_overwrite_the_users():
    plan = Plan.parse("tp=2,pp=4,ep=8")
    deg = plan.degrees(256)
    assert (deg.dp, deg.etp, deg.edp) == (32, 2, 4)
    assert plan.dp is None and plan.etp is None  # computed, not written back
    given = Plan.parse("tp=2,pp=4,dp=32")
    assert given.degrees(256).dp == 32 and given.dp == 32
    with pytest.raises(PlanRuleError, match=r"dp-mismatch.*dp=32.*512 GPUs") as info:
        given.degrees(512)
    assert info.value.rule == "dp-mismatch"
    with pytest.raises(PlanRuleError, match="world-divisibility"):
        Plan.parse("tp=3").degrees(256)
    with pytest.raises(PlanRuleError, match="expert-world-divisibility"):
        Plan.parse("ep=3").degrees(256)


@pytest.mark.parametrize(
    "text, key",
    [
        ("tp=0", "tp"), ("tp=two", "tp"), ("cp=-2", "cp"), ("pp=1.5", "pp"), ("vpp=0", "vpp"), ("dp=-1", "dp"),
        ("ep=x", "ep"), ("etp=0", "etp"), ("mbs=0", "mbs"), ("sharding=zero3", "sharding"),
        ("sharding=hsdp:0", "sharding"), ("sharding=hsdp", "sharding"), ("recompute=foo", "recompute"),
        ("recompute=full:x", "recompute"), ("recompute=mlp+attn", "recompute"), ("offload=disk", "offload"),
        ("precision=fp4", "precision"), ("moments=fp16", "moments"), ("layout=Xtt", "layout"),
        ("stage_recompute=a/b", "stage_recompute"), ("dispatcher=nccl", "dispatcher"),
        ("ep_overlap=maybe", "ep_overlap"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_key_and_value(text, key):
    value = text.split("=", 1)[1]
    with pytest.raises(PlannerError) as info:
        Plan.parse(text)
    msg = info.value.paragraph()
    assert f"'{key}'" in msg and repr(value) in msg and "\n" not in msg
    assert "Value error" not in msg


def test_a_bad_value_in_the_json_form_names_the_key():
    with pytest.raises(PlannerError, match=r"Plan key 'mbs' has a bad value 0"):
        Plan.from_mapping({"tp": 2, "mbs": 0})


@pytest.mark.parametrize("text, words", [
    ("tpp=2", "Unknown plan key 'tpp'. Did you mean 'tp'"),
    ("tp=2,microbatch=2", "Unknown plan key 'microbatch'"),
    ("tp=1,tp=2", "Plan key 'tp' is given twice"),
    ("tp", "Plan item 'tp' is not of the form key=value"),
])
def test_a_bad_key_is_an_error_naming_it(text, words):
    with pytest.raises(PlannerError, match=words.replace("(", r"\(")):
        Plan.parse(text)


def test_unknown_key_in_the_json_form():
    with pytest.raises(PlannerError, match="Unknown plan key 'tensor_parallel'"):
        Plan.from_mapping({"tensor_parallel": 2})
