"""torchtitan's per-op selective activation checkpointing (recompute=op): what its policy keeps
(torchtitan parallelize_llama.py ``_save_list`` / SelectiveAC: every matmul output except every
second aten.mm of a block, SDPA's outputs, TP reduce-scatters), what it repeats in the backward
(the other matmuls, every element-wise op, the TP all-gathers), and the launcher rules around it.
The sizes are counted here by hand from Llama 3.1 8B's shapes, not through planner's inventory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cost import activations as act
from planner.cost.comm import tp_comm
from planner.cost.compute import block_time_of, kernel_times
from planner.cost.flops import FusedAttention, Gemm, Shard, model_shape, op_sac_shares
from planner.cost.rates import build_rates
from planner.cost.setup import Assumptions, resolve_setup
from planner.errors import PlanRuleError
from planner.launchers.registry import launcher_violations
from planner.specs.catalog import load_hardware, load_model
from planner.specs.efficiency import load_efficiency
from planner.specs.job import Job
from planner.specs.plan import Plan, Recompute, parse_recompute

LLAMA = load_model("llama3.1-8b")  # h 4096, 32 heads / 8 KV heads of 128, SwiGLU 14336, 32 layers


def test_the_key_parses_and_prints():
    assert parse_recompute("op") == Recompute("op") and str(parse_recompute("op")) == "op"
    assert Plan.parse("mbs=2,recompute=op").to_string() == "mbs=2,recompute=op"


def test_every_second_matmul_of_a_block_is_recomputed():
    """torchtitan's Llama block calls wq, wk, wv, wo, then w2(silu(w1(x)) * w3(x)): w1 before w3."""
    gated = op_sac_shares(True)
    assert [k for k, v in gated.items() if v] == ["wk", "wo", "w3"]
    assert [k for k, v in op_sac_shares(False).items() if v] == ["wk", "wo", "w2"]


@pytest.mark.parametrize("tp", [1, 2])
def test_kept_bytes_are_the_saved_op_outputs(tp):
    T, h, q, kv, f = 2 * 8192, 4096, 4096 // tp, 1024 // tp, 14336 // tp
    sh = Shard(tp=tp, cp=1, ep=1, etp=1, mbs=2, seq=8192, sp=tp > 1)
    per_token = (h / tp            # the block input (sequence-parallel under TP)
                 + q + kv          # wq and wv outputs (mm 1 and 3)
                 + q               # SDPA output
                 + f + h           # w1 and w2 outputs (mm 5 and 7; w2's before its reduce-scatter)
                 + (2 * h / tp if tp > 1 else 0))  # the two reduce-scatter outputs
    expected = 2 * T * per_token + 4 * T * 32 / tp  # bf16, plus SDPA's fp32 log-sum-exp per head
    assert sum(t.bytes for t in act.op_sac_terms(LLAMA, sh)) == pytest.approx(expected, rel=1e-12)


def test_the_recomputed_forward_is_the_unsaved_matmuls_and_every_elementwise_op():
    hw = load_hardware("h100")
    rates = build_rates(hw, load_efficiency(hw.generation), Assumptions(), None, 8)
    ms, sh = model_shape(LLAMA), Shard(tp=1, cp=1, ep=1, etp=1, mbs=2, seq=8192)
    kts = kernel_times(ms, sh, "dense", rates)
    expected = 0.0
    for kt in kts:
        k = kt.kernel
        if isinstance(k, Gemm):
            share = {"qkv": 1024 / (4096 + 2 * 1024), "proj": 1.0, "mlp.fc1": 0.5, "mlp.fc2": 0.0}[k.name]
        else:
            share = 0.0 if isinstance(k, FusedAttention) else 1.0
        expected += share * kt.fwd
    assert block_time_of(kts, rates, "op").recompute == pytest.approx(expected, rel=1e-12)


def test_tp_all_gathers_repeat_and_reduce_scatters_do_not():
    """Per TP pair without overlap: forward AG + RS, backward AG (the RS's mirror), AG + RS (the
    column-parallel GEMM's); the recomputed forward adds its AG (op) or AG + RS (full)."""
    hw = load_hardware("h100")
    rates = build_rates(hw, load_efficiency(hw.generation), Assumptions(), None, 8)
    ms, sh = model_shape(LLAMA), Shard(tp=2, cp=1, ep=1, etp=1, mbs=1, seq=4096)
    bt = block_time_of(kernel_times(ms, sh, "dense", rates), rates, None)
    ag, rs = 1.0, 10.0
    total = {name: tp_comm(ms, "dense", bt, (ag, rs), rates, False, regather, rescatter).total
             for name, regather, rescatter in (("none", False, False), ("op", True, False), ("full", True, True))}
    pair = 3 * ag + 2 * rs
    assert total == pytest.approx({"none": 2 * pair, "op": 2 * (pair + ag), "full": 2 * (pair + ag + rs)})


def _violations(model: str, plan: str, target: str) -> set[str]:
    m, hw = load_model(model), load_hardware("h100")
    setup = resolve_setup(m, hw, Job(gpus=64, global_batch=512, seq_len=4096), Plan.parse(plan))
    return {v.rule for v in launcher_violations(setup, target=target)}


def test_launcher_rules():
    assert "megatron-recompute-op" in _violations("llama3.1-70b", "tp=8,recompute=op", "megatron")
    assert not _violations("llama3.1-70b", "tp=8,sharding=fsdp,recompute=op", "torchtitan")
    with pytest.raises(PlanRuleError, match="recompute-op-layers"):
        _violations("qwen3-30b-a3b", "ep=8,sharding=fsdp,recompute=op", "torchtitan")
    with pytest.raises(PlanRuleError, match="recompute-op-offload"):
        _violations("llama3.1-70b", "tp=8,sharding=fsdp,recompute=op,offload=activations", "torchtitan")


MEASURED = json.loads((Path(__file__).parent / "fixtures" / "h200_op_sac_memory.json").read_text())


@pytest.mark.parametrize("run", [r for r in MEASURED["runs"] if r["mode"] in ("op", "full")],
                         ids=lambda r: f"{r['mode']}-{r['tokens']}")
def test_kept_bytes_match_pytorch_on_an_h200(run):
    """benchmarks/gpu/op_sac_memory.py on the lent H200 (torch 2.11): four Llama-3-8B-shaped blocks
    written as torchtitan's llama3 model writes them, under torch.utils.checkpoint with
    torchtitan's per-op policy and with full checkpointing; memory allocated after the forward,
    per block (each block's output is the next one's saved input). Measured 1 KiB per block
    above planner: SDPA's RNG state tensors."""
    sh = Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=run["tokens"], sp=False)
    if run["mode"] == "op":
        ours = sum(t.bytes for t in act.op_sac_terms(LLAMA, sh))
    else:
        ours = act.kept_bytes(act.layer_terms(LLAMA, sh, "dense"), full=True, drop=frozenset(), fp8=False)
    assert run["kept_bytes_per_layer"] == pytest.approx(ours, rel=1e-5)


@pytest.mark.parametrize("run", MEASURED["loss"], ids=lambda r: "compiled" if r["compiled"] else "eager")
def test_torchtitans_loss_holds_what_pytorch_measured(run):
    """torchtitan's cross_entropy(pred.float()) after the output projection, on the same H200, at
    8,192 tokens x 128,256 logits (benchmarks/gpu/op_sac_memory.py, 'loss'): the kept logits
    tensor (activations.head_terms) and the loss's transients (pieces.head_transients) give the
    measured forward peak, the bytes kept for the backward and the backward peak."""
    from planner.cost.pieces import head_transients

    kind = "torch_compiled" if run["compiled"] else "torch"
    sh = Shard(tp=1, cp=1, ep=1, etp=1, mbs=1, seq=run["tokens"], sp=False, cross_entropy=kind)
    logits = run["tokens"] * run["vocab"]
    kept = next(t.bytes for t in act.head_terms(LLAMA, sh, 1) if t.name.startswith("head.") and t.module == "layer"
                and "norm" not in t.name)
    fwd, bwd = head_transients(kind, logits)
    assert kept == pytest.approx(run["kept_after_loss_bytes"], rel=1e-4)
    assert kept + fwd == pytest.approx(run["forward_peak_bytes"], rel=1e-4)
    assert kept + bwd == pytest.approx(run["backward_peak_bytes"], rel=1e-4)


def test_a_saved_torchtitan_search_explains_with_its_loss(tmp_path, capsys):
    """search --target torchtitan costs torchtitan's eager loss (search.driver.target_assumptions)
    and saves that assumption; explain --from recomputes with it, under what its own command line
    changes."""
    from planner.cli import main

    saved = tmp_path / "tt.json"
    # --max pp=1: the first plan is the unlimited search's (an FSDP plan without pipeline), in a
    # fifth of the time.
    assert main(["search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--target", "torchtitan",
                 "--max", "pp=1", "--top", "1", "--save", str(saved), "--json"]) == 0
    searched = json.loads(capsys.readouterr().out)
    assert searched["assumptions"]["cross_entropy"] == "torch"
    assert main(["explain", "--from", str(saved), "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["assumptions"]["cross_entropy"] == "torch"
    assert explained["memory"]["peak_bytes"] == searched["plans"][0]["memory"]["peak_bytes"]
    assert main(["explain", "--from", str(saved), "--routing-imbalance", "1.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assumptions"]["routing_imbalance"] == 1.5
