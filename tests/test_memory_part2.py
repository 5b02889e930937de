"""Memory model part 2: the peak over time (timeline, recompute windows, offload, the plot)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.memory import memory_report
from planner.cost.timeline import stage_timeline
from planner.specs.model import ModelSpec

from tests._models import TABLE3_LAYOUT, setup_for, table3_setup


def test_peak_moment_moves_from_end_of_warmup_to_backward_with_full_recompute():
    none = memory_report(table3_setup()).to_json()
    assert none["peak_moment"]["window"] == "end_of_warmup"
    full = memory_report(table3_setup(f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},recompute=full")).to_json()
    for stage in full["stages"]:
        if stage["rank"] != 3:  # the last stage's peak is its loss (logits), not a recompute window
            assert stage["peak_moment"]["window"] == "recompute_window"
            assert stage["peak_moment"]["phase"] == "backward"
    assert full["peak_bytes"] < none["peak_bytes"]


def test_a_recompute_window_can_raise_the_peak():
    """The seed's warning: recompute only postpones the peak into backward, and when the window
    outweighs what recompute saved, the peak rises. With one layer and one micro-batch in flight
    nothing is saved (the layer's intermediates come back in its window), while the window also
    holds the re-run's own output beside the original one (Megatron's CheckpointFunction): full
    recompute peaks higher than no recompute."""
    m = ModelSpec(name="one-layer", source=["test construction"], hidden_size=4096, num_layers=1, vocab_size=1024,
                  attention={"kind": "gqa", "num_heads": 32, "num_kv_heads": 8, "head_dim": 128},
                  ffn={"activation": "swiglu", "hidden_size": 14336})
    kw = dict(gpus=8, global_batch=8, seq_len=8192)
    none = memory_report(setup_for(m, "h100", "mbs=1", **kw))
    full = memory_report(setup_for(m, "h100", "mbs=1,recompute=full", **kw))
    assert full.worst.peak_bytes > none.worst.peak_bytes
    assert full.to_json()["peak_moment"]["window"] == "recompute_window"
    # With many layers in flight the savings dominate and the peak falls (Table 3 layout).
    many_none = memory_report(table3_setup()).worst.peak_bytes
    many_full = memory_report(table3_setup(f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},recompute=full")).worst.peak_bytes
    assert many_full < many_none


def test_recomputing_core_attention_does_not_lower_a_one_layer_peak():
    """Measured on an H200 (results/validation/gpu-memory.md): unfused attention's softmax backward
    holds three fp32 s^2 buffers beside the saved probabilities either way, so recomputing core
    attention moves the one-layer peak into its window without lowering it."""
    m = ModelSpec(name="one-layer", source=["test construction"], hidden_size=4096, num_layers=1, vocab_size=1024,
                  attention={"kind": "gqa", "num_heads": 32, "num_kv_heads": 32, "head_dim": 128},
                  ffn={"activation": "swiglu", "hidden_size": 11008})
    kw = dict(gpus=8, global_batch=8, seq_len=8192, implementation="megatron-local")
    none = memory_report(setup_for(m, "h100", "mbs=1", **kw))
    window = memory_report(setup_for(m, "h100", "mbs=1,recompute=core_attn", **kw))
    assert window.worst.peak_bytes >= none.worst.peak_bytes * (1 - 1e-9)
    assert window.to_json()["peak_moment"]["window"] == "recompute_window"


def _components_sum(stage_json) -> float:
    return sum(stage_json["components"].values())


plans = st.fixed_dictionaries({
    "recompute": st.sampled_from(["none", "full", "core_attn", "moe_act+layernorm", "mla_up_proj+moe_act", "moe", "full:2"]),
    "mbs": st.sampled_from([1, 2]),
    "sharding": st.sampled_from(["dist_opt", "ddp", "zero2", "fsdp"]),
    "offload": st.sampled_from(["none", "optimizer", "activations"]),
})


@settings(max_examples=25, deadline=None)
@given(plans)
def test_peak_bounds_on_the_table3_layout(p):
    plan = (f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},recompute={p['recompute']},mbs={p['mbs']},"
            f"sharding={p['sharding']},offload={p['offload']}")
    setup = table3_setup(plan)
    rep = memory_report(setup)
    for stage in rep.stages:
        events = stage_timeline(setup, stage.rank)
        totals = [e.total for e in events]
        peak = stage.peak_bytes
        assert max(totals) == pytest.approx(peak, rel=1e-9)  # the walk and the fast path agree
        const_comm = stage.constant.total + stage.comm_buffers
        assert peak >= const_comm - 1e-6
        for cls, value in stage.peak_components.items():
            assert value >= -1e-6, cls
            assert peak >= value - 1e-6
        # Never above the sum of each class's own maximum over the step.
        maxima = max(e.constant for e in events) + max(e.comm_buffers for e in events) + \
            max(e.activations for e in events) + max(e.transient for e in events)
        assert peak <= maxima + 1e-6


def test_peak_is_strictly_below_the_sum_of_maxima_for_table3():
    """With full recompute the worst stage is the last one: its largest transient (the loss's
    logits) and its largest activation holding do not happen at the same moment."""
    setup = table3_setup(f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},recompute=full")
    stage = memory_report(setup).worst
    events = stage_timeline(setup, stage.rank)
    maxima = max(e.constant for e in events) + max(e.comm_buffers for e in events) + \
        max(e.activations for e in events) + max(e.transient for e in events)
    assert stage.peak_bytes < maxima


def test_table3_layout_reports_every_stage_and_names_the_worst_and_its_moment():
    j = memory_report(table3_setup()).to_json()
    assert [s["rank"] for s in j["stages"]] == [0, 1, 2, 3]
    assert all(s["peak_bytes"] > 0 for s in j["stages"])
    assert j["worst_stage"] == max(j["stages"], key=lambda s: s["peak_bytes"])["rank"]
    moment = j["peak_moment"]
    assert moment["phase"] in ("forward", "backward") and moment["layer"] and moment["window"]
    assert j["components"] == j["stages"][j["worst_stage"]]["components"]
    assert j["peak_bytes"] == pytest.approx(_components_sum(j["stages"][j["worst_stage"]]), abs=8)


def test_optimizer_offload_beyond_host_memory_is_rejected_with_the_reason():
    # DeepSeek-V3 on 32 H100 with PP4/EP8: each GPU's optimizer shard is far beyond 256 GB of host memory.
    setup = setup_for("deepseek-v3", "h100", f"pp=4,vpp=4,ep=8,layout={TABLE3_LAYOUT},offload=optimizer",
                      gpus=32, global_batch=256, seq_len=4096)
    rep = memory_report(setup)
    assert rep.host_needed_bytes > rep.host_capacity_bytes
    assert not rep.fits
    j = rep.to_json()
    assert j["host"]["needed_bytes"] > j["host"]["capacity_bytes"]
    assert "host memory" in rep.reason()
    small = memory_report(table3_setup(f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},offload=optimizer"))
    assert small.host_needed_bytes <= small.host_capacity_bytes
    assert small.worst.constant.optimizer == 0


def test_plot_is_written_and_marks_the_json_peak(tmp_path):
    import matplotlib.image as mpimg

    from planner.report.plots import plot_memory_timeline

    setup = table3_setup(f"pp=4,vpp=4,ep=64,layout={TABLE3_LAYOUT},recompute=full")
    rep = memory_report(setup)
    path, marked = plot_memory_timeline(setup, rep, tmp_path / "mem.png")
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 600
    assert marked == pytest.approx(rep.to_json()["allocated_peak_bytes"], abs=2)
