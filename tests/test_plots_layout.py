"""The PNG figures as a reader sees them, checked on their drawn elements: titles and legends
inside the figure, no title, annotation or legend on another, every pipeline stage drawn, a legend
that does not eat the plot (planner.report.plots.layout_problems measures the rendered extents)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from planner.cost.memory import memory_report
from planner.report.plots import compare_figure, layout_problems, memory_timeline_figure, wrap_title
from tests._export_specs import resolve

FIX = Path(__file__).parent / "fixtures"
LONG_PLAN = "tp=2,pp=16,vpp=2,ep=64,etp=1,recompute=mla_up_proj+moe_act+layernorm,layout=Et|(tt|)*30mL"


def _explain(plan: str, gpus: int = 1024):
    *_, setup = resolve("deepseek-v3", "h100", gpus, 8192, plan)
    mem = memory_report(setup)
    fig, marked = memory_timeline_figure(setup, mem)
    return setup, mem, fig, marked


def test_checker_finds_a_clipped_title_and_an_overlap():
    from planner.report.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("x" * 300)
    ax.text(0.5, 0.5, "label one", transform=ax.transAxes)
    ax.text(0.5, 0.5, "label two", transform=ax.transAxes)
    problems = layout_problems(fig)
    plt.close(fig)
    assert any("clipped" in p and "title" in p for p in problems)
    assert any("overlaps" in p for p in problems)


def test_explain_draws_every_stage_as_small_multiples():
    setup, mem, fig, marked = _explain(LONG_PLAN)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == setup.deg.pp == 16
    for rank, ax in enumerate(panels):
        assert ax.get_title().startswith(f"stage {rank}: peak ")
        assert len(ax.collections) >= 4  # the four stacked classes
        assert ax.get_ylim() == panels[0].get_ylim()  # one memory scale
    worst = panels[mem.worst.rank]
    assert "(worst)" in worst.get_title() and sum("(worst)" in ax.get_title() for ax in panels) == 1
    assert marked == pytest.approx(mem.to_json()["allocated_peak_bytes"], abs=2)
    assert layout_problems(fig) == []


def test_explain_title_keeps_the_whole_plan():
    setup, _, fig, _ = _explain(LONG_PLAN)
    title = fig._suptitle.get_text()
    assert setup.plan.to_string() in title.replace("\n", "").replace("plan ", "", 1).split("bytes)")[-1]
    assert max(len(line) for line in title.splitlines()) <= 130
    assert layout_problems(fig) == []


@pytest.mark.parametrize("plan", ["tp=8,ep=64,etp=1,recompute=full,sharding=fsdp",
                                  "tp=2,pp=8,ep=64,etp=1,recompute=mla_up_proj+moe_act+layernorm,layout=Et*5|(t*8|)*6t*8mL"])
def test_explain_layouts_are_clean(plan):
    setup, _, fig, _ = _explain(plan)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == setup.deg.pp
    assert layout_problems(fig) == []


def test_wrap_title_breaks_a_plan_after_commas():
    text = wrap_title("plan " + LONG_PLAN, 40)
    assert all(len(line) <= 40 for line in text.splitlines())
    assert text.replace("\n", "") == "plan " + LONG_PLAN


def test_compare_legend_is_readable_and_close():
    out = json.loads((FIX / "compare_v3_three_systems.json").read_text())
    fig = compare_figure(out)
    assert layout_problems(fig) == []
    leg = fig.legends[0]
    assert min(t.get_fontsize() for t in leg.get_texts()) >= 8
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    lb = leg.get_window_extent(r)
    lowest = min(ax.get_window_extent(r).y0 for ax in fig.axes)
    assert lowest - lb.y1 < 0.15 * fig.bbox.height  # right under the panels, not far below


def _memtrace(name: str, fallback=None):
    import tempfile

    from planner.memtrace.loader import load_snapshot
    from planner.memtrace.plot import timeline_figure
    from planner.memtrace.report import analyze

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"{name}.pickle"
        p.write_bytes(gzip.decompress((FIX / "memtrace" / "real" / f"{name}.pickle.gz").read_bytes()))
        res = analyze(load_snapshot(p), source=str(p), fallback_capacity=fallback)
    return res, timeline_figure(res.timeline, res.classification, res.report)


def test_memtrace_oom_plot_says_what_case_a_means_and_skips_the_idle_stretch():
    res, fig = _memtrace("oom")
    ax = fig.axes[0]
    assert res.report["diagnosis"]["case"] == "A"
    assert "case A: reserved and allocated are both near the limit" in ax.get_title()
    assert "peak" in ax.get_title()
    assert "evenly spaced" in ax.get_xlabel()  # 3.56 s of 4.22 s pass without an event
    assert layout_problems(fig) == []
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert ax.get_window_extent(r).width > 0.85 * fig.bbox.width  # the legend no longer takes 40 %
    assert all(len(line.get_xdata()) <= 4003 for line in ax.get_lines())


def test_memtrace_limit_far_above_the_trace_is_named_not_drawn():
    res, fig = _memtrace("megatron-none", fallback=(140.4 * 2**30, "usable HBM of h200"))
    ax = fig.axes[0]
    assert "off the scale" in ax.get_title().replace("\n", " ")
    assert ax.get_ylim()[1] < 5  # the trace fills the panel (about 1 GiB), not a flat line under 140 GiB
    assert layout_problems(fig) == []


def test_compare_step_bars_draw_every_term_host_included():
    from planner.report.plots import step_segments

    out = json.loads((FIX / "compare_v3_three_systems.json").read_text())
    entries = out["hardware"]
    entries[0]["summary"]["breakdown"]["host"] = 3.34  # a host term, as issue 43's 3.34 s of a 16.28 s step
    entries[0]["summary"]["breakdown"]["new_cause"] = 0.5  # a cause the colour table does not know yet
    segs = step_segments(entries)
    labels = " | ".join(label for label, _, _ in segs)
    assert "host-bound issue" in labels and "new cause" in labels
    for i, e in enumerate(entries):
        if e["status"] == "ok":
            assert sum(v[i] for _, _, v in segs) == pytest.approx(sum(e["summary"]["breakdown"].values()))
    fig = compare_figure(out)
    assert layout_problems(fig) == []
    drawn = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {label for label, _, _ in segs} <= drawn
