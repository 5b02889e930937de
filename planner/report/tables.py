"""Rich tables for the human output of explain, search and compare."""

from __future__ import annotations

from planner.units import GiB, fmt_gib, fmt_time

CLASSES = ("weights", "gradients", "optimizer", "activations", "transient", "comm_buffers", "allocator")


def console():
    """Rich console; piped output (no terminal, no COLUMNS) gets 160 columns instead of rich's 80,
    so that tables are not truncated in files and CI logs."""
    import os
    import sys


    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return _SafeConsole(highlight=False, width=width)


def esc(text) -> str:
    """A user's text (a name, a path, a flag) for rich output: '[' starts no markup tag."""
    from rich.markup import escape

    return escape(str(text))


def _safe_console_class():
    from rich.console import Console
    from rich.errors import MarkupError

    class SafeConsole(Console):
        """A console whose markup never raises: should a user's text that reached a format string
        unescaped look like a closing tag ('[/]'), the line is printed without markup instead."""

        def render_str(self, text, *args, **kwargs):
            try:
                return super().render_str(text, *args, **kwargs)
            except MarkupError:
                kwargs["markup"] = False
                return super().render_str(text, *args, **kwargs)

    return SafeConsole


def _SafeConsole(**kwargs):  # noqa: N802 - a class built on first use (rich is imported lazily)
    return _safe_console_class()(**kwargs)


def header_lines(setup) -> list[str]:
    m, h, j, d = setup.model, setup.hw, setup.job, setup.deg
    lines = [
        f"[bold]{esc(m.display_name or m.name)}[/bold] on [bold]{esc(h.name)}[/bold] ({esc(h.gpu.name)}, NVLink domain of "
        f"{h.domain_size}) · {j.gpus} GPUs · global batch {j.global_batch} x seq {j.seq_len} · {setup.precision}",
        f"plan: [bold]{setup.plan.to_string()}[/bold]",
        f"degrees: tp {d.tp} · cp {d.cp} · pp {d.pp} (vpp {d.vpp}) · dp {d.dp}"
        + (f" · ep {d.ep} · etp {d.etp} · edp {d.edp}" if m.is_moe else "")
        + f" · {setup.micro_batches} micro-batches of {setup.plan.mbs} per step",
    ]
    if j.source:
        lines.append(f"job: {esc(j.source)}")
    return lines


def margin_text(hw, job, margin_bytes: float) -> str:
    """How the capacity is made: usable HBM, less the CUDA context and the memory margin, said
    once above a table (why the margin, and how to drop it)."""
    from planner.cost.efficiency_access import memory_constants

    usable = hw.gpu.hbm_usable_bytes.value
    context = memory_constants(hw).cuda_context_bytes.value
    if job.memory_margin_fraction and not job.memory_margin_bytes:
        why = (f" ({job.memory_margin_fraction:.0%} of usable HBM, the default: planner's largest measured memory "
               "error, rounded up; --memory-margin 0 ranks plans up to the edge)")
    elif margin_bytes:
        why = " (--memory-margin)"
    else:
        why = " (--memory-margin 0: plans may reach the capacity)"
    return (f"capacity = {fmt_gib(usable)} usable HBM - {fmt_gib(context)} CUDA context - {fmt_gib(margin_bytes)} "
            f"memory margin{why}; headroom = capacity - peak")


def headroom_text(mem: dict) -> str:
    """Headroom of a plan's memory JSON as GiB and a share of its capacity."""
    h = mem["headroom_bytes"]
    share = h / mem["capacity_bytes"] if mem["capacity_bytes"] > 0 else 0.0
    return f"{h / GiB:.1f} ({share:.0%})" if h >= 0 else f"short {-h / GiB:.1f}"


def moment_text(moment: dict) -> str:
    w = moment.get("window")
    where = f"chunk {moment.get('chunk')}, micro-batch {moment.get('microbatch')}, {moment.get('layer')}"
    return {
        "end_of_warmup": f"end of the warm-up forward ({where}): most micro-batches in flight",
        "recompute_window": f"early backward, recompute window ({where}): re-created intermediates and their gradients",
        "forward": f"forward ({where})",
        "backward": f"backward ({where})",
        "optimizer": "optimizer step",
    }.get(w, str(moment))


def print_explain(setup, mem, result: dict, unknown_flags=()) -> None:
    from rich.table import Table

    c = console()
    for line in header_lines(setup):
        c.print(line)
    mj = result["memory"]
    t = Table(title="Memory per GPU by pipeline stage, GiB (2^30 B), at each stage's peak moment")
    t.add_column("stage")
    for k in CLASSES:
        t.add_column(k.replace("_", " "), justify="right")
    t.add_column("peak", justify="right")
    t.add_column("headroom", justify="right")
    t.add_column("moment")
    cap = mj["capacity_bytes"]
    for s in mj["stages"]:
        row = [str(s["rank"])] + [f"{s['components'][k] / GiB:.1f}" for k in CLASSES] + [f"{s['peak_bytes'] / GiB:.1f}"]
        row.append(headroom_text({"headroom_bytes": cap - s["peak_bytes"], "capacity_bytes": cap}))
        row.append(s["peak_moment"]["window"].replace("_", " "))
        style = "bold" if s["rank"] == mj["worst_stage"] else None
        t.add_row(*row, style=style)
    c.print(t)
    c.print(margin_text(setup.hw, setup.job, mj.get("margin_bytes", 0.0)))
    worst = mj["worst_stage"]
    verdict = (f"[green]fits[/green]: {fmt_gib(mj['headroom_bytes'])} headroom" if mj["headroom_bytes"] >= 0
               else f"[red]does not fit[/red]: short by {fmt_gib(-mj['headroom_bytes'])}")
    c.print(f"worst stage {worst}: peak {fmt_gib(mj['peak_bytes'])} (allocated {fmt_gib(mj['allocated_peak_bytes'])} + allocator margin) "
            f"vs capacity {fmt_gib(cap)} ({setup.hw.gpu.name} usable HBM less CUDA context and margins): {verdict}")
    c.print(f"peak moment: {moment_text(mj['peak_moment'])}")
    ph = mj.get("phase_peaks")
    if ph:
        fb, opt = ph["forward_backward"], ph["optimizer_step"]
        c.print(f"phase peaks (allocated, worst stage): forward-backward {fmt_gib(fb['allocated_peak_bytes'])}"
                + (f" ({moment_text(fb['moment'])})" if "moment" in fb else "")
                + f" · optimizer step {fmt_gib(opt['allocated_peak_bytes'])}")
    warm = ", ".join(f"{s['rank']}: {s['activations_end_of_warmup_bytes'] / GiB:.1f}" for s in mj["stages"])
    c.print(f"activations held at the end of the warm-up forward, by stage (GiB): {warm}")
    host = mj["host"]
    if host["needed_bytes"]:
        ok = "ok" if host["needed_bytes"] <= host["capacity_bytes"] else "[red]exceeds host memory[/red]"
        c.print(f"host memory for offload: {fmt_gib(host['needed_bytes'])} of {fmt_gib(host['capacity_bytes'])} per GPU ({ok})")
    tj = result.get("time", {})
    if tj.get("modeled", True) and "step_time_s" in tj:
        c.print(f"time: step {fmt_time(tj['step_time_s'])} · {tj['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU · "
                f"{tj['model_tflops_per_gpu']:.0f} model TFLOP/s/GPU · MFU {tj['mfu']:.1%}")
        if tj.get("error_band"):
            from planner.validate.bands import band_text

            c.print(f"  {esc(band_text(tj['error_band']))}")
        bd = tj.get("breakdown", {})
        if bd:
            parts = ", ".join(f"{k.replace('_', ' ')} {fmt_time(v)}" for k, v in sorted(bd.items(), key=lambda kv: -kv[1]) if v)
            c.print(f"  breakdown: {parts}")
        if tj.get("bottleneck"):
            c.print(f"  bottleneck: {tj['bottleneck']}")
        pj = tj.get("pipeline", {})
        if pj.get("walked"):
            slow = pj["ranks"][pj["slowest_rank"]]
            c.print(f"  pipeline: {pj['schedule']} walked over {pj['pp']} ranks · bubble {pj['bubble_share']:.1%} of the step "
                    f"(busiest rank {pj['slowest_rank']}: all-to-all {fmt_time(slow['a2a_hidden_s'])} hidden, "
                    f"{fmt_time(slow['a2a_exposed_s'])} exposed)")
    else:
        c.print(f"time: {tj.get('note', 'not modeled')}")
    vs = result.get("versus_top_plan")
    if vs:
        word = "slower" if vs["slower_by"] > 0 else "faster"
        c.print(f"versus the search's top plan {esc(vs['top_plan'])}: step {fmt_time(vs['step_time_s'])} vs "
                f"{fmt_time(vs['top_step_time_s'])} ({abs(vs['slower_by']):.1%} {word})")
    if unknown_flags:
        c.print("[yellow]Megatron flags planner does not model:[/yellow] " + esc(" ".join(unknown_flags)))
    if "plot" in result:
        c.print(f"plot written to {esc(result['plot'])}")


def short_band(band: dict | None) -> str:
    """The error band in a table cell: the class's median signed error [middle half] on the
    validation runs (planner.validate.bands); '-' without validation runs of the class."""
    if not band or not band.get("n"):
        return "-"
    return (f"{100 * band['median_signed_error']:+.0f}% [{100 * band['p25_signed_error']:+.0f}, "
            f"{100 * band['p75_signed_error']:+.0f}]")


def print_search(result, out: dict, saved=None) -> None:
    from rich.table import Table

    c = console()
    space = result.space
    m, h, j = space.model, space.hw, space.job
    c.print(f"[bold]{esc(m.display_name or m.name)}[/bold] on [bold]{esc(h.name)}[/bold] ({esc(h.gpu.name)}, NVLink domain of "
            f"{h.domain_size}) · {j.gpus} GPUs · global batch {j.global_batch} x seq {j.seq_len} · "
            f"precisions {', '.join(j.precisions)} · target {space.target}")
    if j.source:
        c.print(f"job: {esc(j.source)}")
    from planner.search.status import status_line

    sv = out["solver"]
    c.print("solver: " + esc(status_line(sv)).replace(sv["status"], f"[bold]{sv['status']}[/bold]", 1))
    if out["plans"]:
        c.print(margin_text(h, j, out["plans"][0]["memory"].get("margin_bytes", 0.0)))
    t = Table(title="Ranked plans (peak = worst stage's estimated reserved memory; GiB = 2^30 B)")
    for col, just in (("#", "right"), ("plan", "left"), ("peak / capacity", "right"), ("headroom", "right"),
                      ("step", "right"), ("error band", "right"), ("tok/s/GPU", "right"), ("MFU", "right"),
                      ("bottleneck", "left")):
        # Plans wrap rather than truncate: every key matters to whoever launches it.
        t.add_column(col, justify=just, overflow="fold")
    for p in out["plans"]:
        mem, tm = p["memory"], p["time"]
        t.add_row(str(p["rank"]), p["plan_string"], f"{mem['peak_bytes'] / GiB:.1f} / {mem['capacity_bytes'] / GiB:.1f}",
                  headroom_text(mem), fmt_time(tm["step_time_s"]), short_band(tm.get("error_band")),
                  f"{tm['tokens_per_s_per_gpu']:,.0f}", f"{tm['mfu']:.1%}", tm.get("bottleneck", ""))
    c.print(t)
    bands = {p["time"]["error_band"]["class"]: p["time"]["error_band"] for p in out["plans"] if p["time"].get("error_band")}
    for band in bands.values():
        from planner.validate.bands import band_text

        c.print(esc(band_text({k: v for k, v in band.items() if k != "measured_step_time_s_p25_p75"})))
    if out.get("sensitivity"):
        print_sensitivity(out["sensitivity"])
    if saved:
        c.print(f"saved to {esc(saved)} (use: planner explain/export --from {esc(saved)} --rank K)")


def print_sensitivity(sens: dict) -> None:
    c = console()
    c.print(f"[bold]sensitivity[/bold]: {sens['summary']}")
    for row in sens["perturbations"]:
        mark = "winner unchanged" if not row["winner_changes"] else f"winner becomes #{row['new_winner_rank']}: {row['new_winner']}"
        c.print(f"  {row['name']}: {mark}")
