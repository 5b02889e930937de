"""Megatron's layer-level CPU offload (--cpu-offloading-num-layers N): the first N decoder layers'
saved activations wait on the host, the others stay on the GPU (planner.cost.pieces.offloaded_to_host)."""

from __future__ import annotations

import pytest

from planner.cost.compose import costs_of
from planner.cost.memory import memory_report
from planner.launchers.megatron.read import assumptions_from_flags

from tests._models import setup_for

KW = dict(gpus=64, global_batch=256, seq_len=8192)
PLAN = "mbs=1,sharding=fsdp,offload=activations"


def _layer_kept(setup) -> float:
    """Saved bytes of one decoder layer (every layer of the dense model is alike)."""
    chunk = costs_of(setup).chunks(0)[0].at(0)
    kept = {layer.kept for layer in chunk.layers if layer.name.startswith("layer ")}
    assert len(kept) == 1
    return kept.pop()


@pytest.mark.parametrize("n", [20, 40])
def test_offloaded_layers_leave_the_gpu_for_the_host(n):
    whole = setup_for("llama3.1-70b", "gb200-nvl72", PLAN, **KW)
    part = setup_for("llama3.1-70b", "gb200-nvl72", PLAN, offload_layers=n, **KW)
    k = _layer_kept(whole)
    before, after = memory_report(whole), memory_report(part)
    # The peak is the end of the forward: the N offloaded layers are on the host by then.
    assert before.worst.peak_components["activations"] - after.worst.peak_components["activations"] == pytest.approx(n * k)
    assert after.host_needed_bytes == pytest.approx(n * k)
    # Without it, offload=activations of the one chunk PP=1 holds moves nothing off the GPU.
    assert before.host_needed_bytes == pytest.approx(before.worst.peak_components["activations"], rel=0.05)


def test_an_offloaded_layer_is_back_on_the_gpu_for_its_backward():
    part = setup_for("llama3.1-70b", "gb200-nvl72", PLAN, offload_layers=79, **KW)
    chunk = costs_of(part).chunks(0)[0].at(0)
    first = next(layer for layer in chunk.layers if layer.name.startswith("layer 0 "))
    last = next(layer for layer in chunk.layers if layer.name.startswith("layer 79 "))
    assert first.kept == 0 and first.host == pytest.approx(last.kept)
    # reloaded with the group below it (TE's double buffering)
    assert first.bwd_transient == pytest.approx(last.bwd_transient + 2 * last.kept)


def test_without_activation_offload_the_layers_stay():
    plain = memory_report(setup_for("llama3.1-70b", "gb200-nvl72", "mbs=1,sharding=fsdp", **KW))
    named = memory_report(setup_for("llama3.1-70b", "gb200-nvl72", "mbs=1,sharding=fsdp", offload_layers=40, **KW))
    assert named.peak_bytes == plain.peak_bytes and named.host_needed_bytes == 0


def test_the_reader_takes_the_layer_count_from_the_flags():
    assert assumptions_from_flags({"cpu_offloading_num_layers": "40"})["offload_layers"] == 40
    assert "offload_layers" not in assumptions_from_flags({})


def test_a_bridge_launch_gives_the_layer_count_only_with_cpu_offloading_on():
    from planner.launchers.bridge.read import BridgeArgs, launch_assumptions

    on = {"model.cpu_offloading": True, "model.cpu_offloading_num_layers": 20}
    assert launch_assumptions(BridgeArgs("overrides", None, on))["offload_layers"] == 20
    off = {"model.cpu_offloading": False, "model.cpu_offloading_num_layers": 20}
    assert "offload_layers" not in launch_assumptions(BridgeArgs("overrides", None, off))
