"""torchtitan's output head and loss under TP (issue 39/41: the Llama 3.1 70B FSDP32 x TP8 runs
under-predicted by 20-25 %): loss parallel's DTensor decomposition holds more fp32 tensors than
the aten kernels (planner.cost.pieces.head_transients), and the output linear keeps its
all-gathered input whole on every TP rank (planner.cost.activations.head_terms). The loss is
checked against one H100's allocator (benchmarks/gpu/loss_parallel_memory.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cost import activations as act
from planner.cost.flops import Shard
from planner.cost.pieces import head_transients
from planner.specs.catalog import load_model

LLAMA = load_model("llama3.1-8b")  # vocabulary 128,256 = 8 x 16,032: the fixture's logits per token
MEASURED = json.loads((Path(__file__).parent / "fixtures" / "h100_loss_parallel_memory.json").read_text())
TP = 8


def _kept_and_transients(kind: str, tokens: int, parallel: bool):
    """The head's kept logits tensor and the loss's (forward, backward) transients for one TP-8 rank
    of Llama 3.1's vocabulary: sharded (loss parallel) or, without loss parallel, the same local
    size as an unsharded head over an eighth of the vocabulary."""
    sh = Shard(tp=TP, cp=1, ep=1, etp=1, mbs=1, seq=tokens, sp=True, cross_entropy=kind)
    vocab_div = TP if parallel else 1
    kept = next(t.bytes for t in act.head_terms(LLAMA, sh, vocab_div)
                if t.module == "layer" and "norm" not in t.name) / (1 if parallel else TP)
    fwd, bwd = head_transients(kind, tokens * LLAMA.vocab_size / TP, loss_parallel=parallel)
    return kept, fwd, bwd


@pytest.mark.parametrize("run", MEASURED["runs"],
                         ids=lambda r: ("parallel" if r["parallel"] else "plain") + ("-compiled" if r["compiled"] else ""))
def test_the_loss_holds_what_one_h100_measured(run):
    """Eager and compiled, with and without loss parallel: kept bytes, forward and backward peaks
    (14 / 16 bytes per logit eager under loss parallel against 10 / 12 without)."""
    kind = "torch_compiled" if run["compiled"] else "torch"
    kept, fwd, bwd = _kept_and_transients(kind, MEASURED["tokens"], run["parallel"])
    assert kept == pytest.approx(run["kept_bytes"], rel=1e-3)  # the compiled graph keeps a per-token fp32 too
    assert kept + fwd == pytest.approx(run["forward_peak_bytes"], rel=1e-3)
    assert kept + bwd == pytest.approx(run["backward_peak_bytes"], rel=1e-3)


def test_loss_parallel_adds_one_fp32_logits_tensor_to_the_eager_backward():
    logits = 1e9
    assert head_transients("torch", logits, loss_parallel=True)[1] - head_transients("torch", logits)[1] == 4 * logits
    assert head_transients("fused", logits, loss_parallel=True) == head_transients("fused", logits)


def test_torchtitans_output_linear_keeps_its_gathered_input_whole():
    """ColwiseParallel(input_layouts=Shard(1)) all-gathers the sequence-sharded final norm output
    and F.linear saves it whole, in bf16 (float8 skips 'output'); Megatron keeps the SP shard."""
    tokens, h = 16_384, LLAMA.hidden_size

    def norm_output(kind: str) -> float:
        sh = Shard(tp=TP, cp=1, ep=1, etp=1, mbs=1, seq=tokens, sp=True, cross_entropy=kind)
        terms = act.head_terms(LLAMA, sh, TP)
        return act.kept_bytes(tuple(t for t in terms if t.name == "head.norm_output"), full=False,
                              drop=frozenset(), fp8=True)

    assert norm_output("torch") == norm_output("torch_compiled") == 2 * tokens * h
    assert norm_output("fused") == pytest.approx(2 * tokens * h / TP / 2 * (1 + 1 / 32))


def test_the_70b_tp8_run_peaks_in_the_loss_backward_with_the_parallel_loss():
    """The published 70B FSDP32 x TP8 run (full AC, 16 x 8,192 tokens a rank): the peak is the
    loss's backward, where loss parallel holds 4 fp32 logits tensors (7.8 GiB each)."""
    from planner.cost.compose import costs_of
    from planner.cost.memory import memory_report
    from planner.cost.setup import Assumptions, resolve_setup
    from planner.specs.catalog import load_hardware
    from planner.specs.job_input import resolve_job
    from planner.specs.plan import Plan

    model, hw = load_model("llama3.1-70b"), load_hardware("h100-96gb-500w")
    job = resolve_job(model, gpus=256, global_batch=512, seq_len=8192, precision="fp8", memory_margin_gib=0.0)
    plan = Plan.parse("tp=8,cp=1,pp=1,mbs=16,sharding=fsdp,recompute=full,precision=fp8")
    setup = resolve_setup(model, hw, job, plan, Assumptions(cross_entropy="torch", attention_kernel="flash2"))
    stage = memory_report(setup, costs_of(setup)).worst
    head = stage.chunks[0].layers[-1]
    fp32_logits = 4 * 16 * 8192 * model.vocab_size / 8
    assert stage.peak_moment["layer"] == "output+loss" and stage.peak_moment["phase"] == "backward"
    assert head.bwd_transient == pytest.approx(3 * fp32_logits)
    assert head.kept == pytest.approx(fp32_logits + 2 * 16 * 8192 * model.hidden_size * (1 + 1 / 8))
