"""Classification of allocations by frames, lifetime and stream, and the invariant that the
classes always sum to the allocated bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "memtrace"))  # the synthetic-snapshot helpers
from memtrace_helpers import GiB, MiB, synth  # noqa: E402
from planner.memtrace import CLASSES  # noqa: E402
from planner.memtrace.classify import (  # noqa: E402
    BWD,
    FWD,
    OPT,
    StackReader,
    class_series,
    classify,
    components_at,
    frame_rule,
    phase_of,
    where_of,
)
from planner.memtrace.loader import parse_snapshot  # noqa: E402
from planner.memtrace.timeline import build_timeline  # noqa: E402


def _f(filename, name, line=1):
    return {"filename": filename, "line": line, "name": name}


@pytest.mark.parametrize(
    "name, filename, cls",
    [
        ("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", "comm_buffers"),
        ("_allgather_base", "x.py", "comm_buffers"),
        ("c10d::ProcessGroupNCCL::allgather", "", "comm_buffers"),
        ("all_to_all", "megatron/core/tensor_parallel/mappings.py", "comm_buffers"),
        ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", "comm_buffers"),
        ("_init_group", "torch/optim/adam.py", "optimizer"),
        ("step", "megatron/core/optimizer/distrib_optimizer.py", "optimizer"),
        ("_init_exp_avg", "mine.py", "optimizer"),
        ("__init__", "megatron/core/distributed/param_and_grad_buffer.py", "gradients"),
        ("alloc_main_grad", "mine.py", "gradients"),
        ("torch::autograd::AccumulateGrad::apply", "", "gradients"),
        ("__init__", "torch/nn/parallel/distributed.py", "gradients"),
        ("c10d::Reducer::initialize_buckets", "", "gradients"),
        ("reset_parameters", "megatron/core/tensor_parallel/layers.py", "weights"),
        ("_apply", "torch/nn/modules/module.py", "weights"),
        ("init_param", "mine.py", "weights"),
        ("forward", "megatron/core/transformer/mlp.py", "activations"),
        ("checkpoint", "torch/utils/checkpoint.py", "activations"),
        ("forward_backward_no_pipelining", "megatron/core/pipeline_parallel/schedules.py", None),
        ("backward", "torch/autograd/__init__.py", None),
        ("autograd_hook", "torch/autograd/graph.py", None),  # 'autograd' is not the token 'grad'
        ("save", "megatron/core/dist_checkpointing/serialization.py", None),
        ("train_step", "megatron/training/training.py", None),
        ("at::cuda::setWorkspaceForHandle(cublasContext*, c10::cuda::CUDAStream)", "", "transient"),
        ("torch::autograd::generated::details::mm_mat1_backward(at::Tensor const&, c10::Layout)", "", None),
    ],
)
def test_frame_rules(name, filename, cls):
    assert frame_rule(name, filename)[0] == cls


def test_innermost_matching_frame_decides():
    r = StackReader()
    fwd = _f("megatron/core/transformer/mlp.py", "forward")
    assert r.verdict([fwd, _f("torch/optim/optimizer.py", "step")])[0] == "activations"
    assert r.verdict([_f("torch/optim/adam.py", "_init_group"), fwd])[0] == "optimizer"
    # The forward of an autograd Function that wraps a collective is communication.
    wrapped = [_f("megatron/core/tensor_parallel/mappings.py", "forward"), _f("torch/autograd/function.py", "apply"),
               _f("megatron/core/tensor_parallel/mappings.py", "all_to_all")]
    assert r.verdict(wrapped)[0] == "comm_buffers"
    # ... but a collective far up the stack does not claim an ordinary forward.
    far = [fwd] + [_f("m.py", f"f{i}") for i in range(5)] + [_f("torch/distributed/distributed_c10d.py", "all_reduce")]
    assert r.verdict(far)[0] == "activations"
    assert r.verdict(None) == (None, 0) and r.verdict([]) == (None, 0)
    assert r.verdict([{"name": 3, "filename": None}, "forward"])[0] == "activations"  # odd frames do not crash


@pytest.mark.parametrize(
    "stack, phase",
    [
        ("fwd", "forward"),
        ("bwd", "backward"),
        ("adam", "optimizer"),
        ("param", "unknown"),
    ],
)
def test_phases(stack, phase):
    assert phase_of(StackReader().verdict(synth.STACKS[stack])[1]) == phase


@pytest.mark.parametrize(
    "name, marks",
    [
        ("torch::autograd::generated::AddmmBackward0::apply", BWD),
        ("torch::autograd::Engine::evaluate_function", BWD),
        ("_engine_run_backward", BWD),
        ("forward", FWD),
        ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", 0),
    ],
)
def test_phase_markers(name, marks):
    assert frame_rule(name, "")[1] == marks


def test_transient_threshold_is_inclusive():
    def lifetime_after(k: int) -> str:
        text = "alloc t 1M none\n" + "".join(f"alloc f{i} 1M none\n" for i in range(k)) + "free t"
        return _cls_of(text)["t"][2]

    assert lifetime_after(8) == "transient" and lifetime_after(9) == "dynamic"


def test_recompute_is_a_forward_under_backward():
    stack = [_f("megatron/core/transformer/mlp.py", "forward"), _f("megatron/core/tensor_parallel/random.py", "backward")]
    cls, marks = StackReader().verdict(stack)
    assert cls == "activations" and marks & FWD and marks & BWD and not marks & OPT
    assert phase_of(marks) == "backward (recompute)"


def test_where_prefers_user_code():
    assert where_of(synth.STACKS["fwd"]) == "mlp.py:130:forward"
    assert where_of([_f("/usr/lib/python3/site-packages/torch/nn/functional.py", "linear")]) == "functional.py:1:linear"
    assert where_of(None) == ""
    cpp = [_f("??", "torch::unwind::unwind()"), _f("memory_snapshot.cpp", "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
           _f("CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long)"),
           _f("accumulate_grad.h", "torch::autograd::AccumulateGrad::accumulateGrad(at::Tensor const&)"), _f("??", "PyEval_EvalCode")]
    assert where_of(cpp) == "accumulate_grad.h:1:torch::autograd::AccumulateGrad::accumulateGrad"


def _cls_of(sim_text: str, sim: synth.Sim | None = None, **snap_kw) -> dict[str, tuple[str, str, str]]:
    """DSL program -> {allocation name: (class, evidence, lifetime)} via the allocation order."""
    from planner.memtrace.classify import EVIDENCE, LIFETIMES

    sim = synth.run_dsl(sim_text, sim)
    names = [line.split()[1] for line in sim_text.splitlines() if line.split() and line.split()[0] in ("alloc", "spike")]
    tl = build_timeline(parse_snapshot(sim.snapshot(**snap_kw)), 0)
    cl = classify(tl)
    order = np.argsort(np.where(tl.allocs.event >= 0, tl.allocs.event, -1), kind="stable")
    made = [r for r in order if tl.allocs.event[r] >= 0]
    return {n: (CLASSES[cl.cls[r]], EVIDENCE[cl.evidence[r]], LIFETIMES[cl.lifetime[r]]) for n, r in zip(names, made)}


def test_lifetime_and_frames_combine():
    got = _cls_of(
        """
        alloc w 1G param
        alloc act 256M fwd
        spike ws 64M ws          # freed at once: transient, whatever its frames
        alloc act2 256M fwd
        free act2 bwd            # made in forward, freed by backward: an activation however soon
        alloc x 128M none
        alloc y 32M none
        alloc z 32M none
        alloc q 32M none
        alloc r 32M none
        alloc s 32M none
        alloc t 32M none
        alloc u 32M none
        alloc v 32M none
        alloc v2 32M none
        free x                   # no stacks, freed after 9 allocations: dynamic -> activations
        alloc keep 64M none      # no stacks, never freed: unknown
        alloc comm 64M plain @7  # another stream, no strong frames: communication
        alloc g2 64M bwd         # made in backward, kept: gradient
        alloc g3 64M bwd
        alloc dx 64M bwd
        alloc f1 1M none
        alloc f2 1M none
        alloc f3 1M none
        alloc f4 1M none
        alloc f5 1M none
        alloc f6 1M none
        alloc f7 1M none
        alloc f8 1M none
        alloc f9 1M none
        free dx bwd              # made and freed in backward: an activation's gradient
        free g3 adam             # made in backward, freed by the optimizer: a parameter's gradient
        """
    )
    assert got["w"] == ("weights", "frames", "constant")
    assert got["act"] == ("activations", "frames", "constant")
    assert got["ws"] == ("transient", "lifetime", "transient")
    assert got["act2"] == ("activations", "frames", "dynamic")
    assert got["x"] == ("activations", "lifetime", "dynamic")
    assert got["keep"] == ("unknown", "none", "constant")
    assert got["comm"] == ("comm_buffers", "stream", "constant")
    assert got["g2"] == ("gradients", "frames", "constant")
    assert got["g3"] == ("gradients", "free_frames", "dynamic")
    assert got["dx"] == ("activations", "frames", "dynamic")


def test_cublas_workspace_by_size():
    got = _cls_of("alloc ws 32M none\nalloc other 33M none\nalloc ws2 32M fwd")
    assert got["ws"] == ("transient", "size", "constant")
    assert got["other"] == ("unknown", "none", "constant")  # any other stackless constant stays unknown
    assert got["ws2"] == ("activations", "frames", "constant")  # a stack outranks the size
    assert _cls_of("alloc ws3 32M bwd")["ws3"] == ("transient", "size", "constant")  # bwd marks only


def test_free_stack_places_an_allocation_without_its_own():
    got = _cls_of("alloc g 64M none\nalloc a 1M\nalloc b 1M\nalloc c 1M\nalloc d 1M\nalloc e 1M\nalloc f 1M\nalloc h 1M\n"
                  "alloc i 1M\nalloc j 1M\nfree g adam")
    assert got["g"] == ("gradients", "free_frames", "dynamic")  # freed by the optimizer (zero_grad)


def test_prewindow_constants_take_their_class_from_dump_block_frames():
    raw = synth.case_a()
    cut = dict(raw, device_traces=[raw["device_traces"][0][-60:]])
    tl = build_timeline(parse_snapshot(cut), 0)
    cl = classify(tl)
    comps = components_at(tl, cl, int(np.argmax(tl.allocated)))["components"]
    assert comps["optimizer"] == 30 * GiB and comps["weights"] == 10 * GiB and comps["unknown"] == 0
    # Without stacks on the blocks the same bytes stay unknown, shown, not guessed.
    bare = synth.Sim()
    synth.constants(bare, 10, 20, 30)
    synth.run_dsl("alloc a 1G\nfree a bwd", bare)
    raw = bare.snapshot(keep_last=3, block_frames=False)  # the window: alloc a, free_requested, free_completed
    tl = build_timeline(parse_snapshot(raw), 0)
    comps = components_at(tl, classify(tl), 1)["components"]
    assert comps["unknown"] == 60 * GiB and comps["activations"] == GiB


_ops = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "free", "spike"]),
        st.integers(1, 3000),  # size in MiB
        st.sampled_from([0, 0, 0, 7]),
        st.sampled_from(["fwd", "bwd", "ws", "adam", "param", "nccl", "none"]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(_ops, st.integers(0, 40))
def test_classes_sum_to_allocated_at_every_moment(ops, drop):
    """Random programs through the allocator model: the classes partition allocated bytes at every
    state, the replay ends at the dump state, and it does so from any truncation of the trace."""
    sim = synth.Sim(capacity=40 * GiB)
    live: list[str] = []
    try:
        for k, (op, mib, stream, stack) in enumerate(ops):
            if op == "free" and live:
                sim.free(live.pop(mib % len(live)), frames=stack)
            elif op == "spike":
                sim.spike(f"s{k}", mib * MiB, stream=stream, frames=stack)
            else:
                sim.alloc(f"a{k}", mib * MiB, stream=stream, frames=stack)
                live.append(f"a{k}")
    except synth.SimOOM:
        pass
    n = len(sim.events)
    raw = sim.snapshot(keep_last=max(n - drop, 0) or None)
    tl = build_timeline(parse_snapshot(raw), 0)
    cl = classify(tl)
    assert tl.dump["reconciled"]
    series = class_series(tl, cl)
    assert np.array_equal(series.sum(axis=0), tl.allocated)
    peak = int(np.argmax(tl.allocated))
    assert sum(components_at(tl, cl, peak)["components"].values()) == tl.allocated[peak]
