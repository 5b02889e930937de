"""Rich tables for the human output of explain, search and compare."""

from __future__ import annotations

import os
import sys
import textwrap

from rich import box
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.table import Table

# The cost, search, validate and launcher imports stay in their functions (start-up): the catalog
# commands (planner models, hw, show-model, ...) print through console() and esc(), and loading the
# cost model and the search with them would add ~0.8 s to each.
from planner.units import GiB, fmt_gib, fmt_time

CLASSES = ("weights", "gradients", "optimizer", "activations", "transient", "comm_buffers", "allocator")
SHORT_CLASSES = {"weights": "weights", "gradients": "grads", "optimizer": "optim", "activations": "activ",
                 "transient": "temp", "comm_buffers": "comm", "allocator": "alloc"}
"""Column heads under 120 columns, where the full names would squeeze the table (named once above it)."""


class SafeConsole(Console):
    """A console whose markup never raises: should a user's text that reached a format string
    unescaped look like a closing tag ('[/]'), the line is printed without markup instead."""

    def render_str(self, text, *args, **kwargs):
        try:
            return super().render_str(text, *args, **kwargs)
        except MarkupError:
            kwargs["markup"] = False
            return super().render_str(text, *args, **kwargs)


def console() -> SafeConsole:
    """Rich console; piped output (no terminal, no COLUMNS) gets 160 columns instead of rich's 80,
    so that tables are not truncated in files and CI logs."""
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return SafeConsole(highlight=False, width=width)


def esc(text) -> str:
    """A user's text (a name, a path, a flag) for rich output: '[' starts no markup tag."""
    return escape(str(text))


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
    from planner.cost.efficiency_access import memory_constants  # noqa: PLC0415

    usable = hw.gpu.hbm_usable_bytes.value
    context = memory_constants(hw).cuda_context_bytes.value
    if job.memory_margin_fraction and not job.memory_margin_bytes:
        why = (f" ({job.memory_margin_fraction:.2%} of usable HBM, the default: planner's largest held-out reserved-peak "
               "error on H200s, rounded up; --memory-margin 0 ranks plans up to the edge)")
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
        "overlapped_step": f"overlapped forward and backward ({where}): the combined 1F1B's forward beside the "
                           "previous micro-batch's backward, layer by layer",
        "optimizer": "optimizer step",
    }.get(w, str(moment))


def print_explain(setup, mem, result: dict, unknown_flags=()) -> None:
    c = console()
    for line in header_lines(setup):
        # The plan line is printed whole (soft wrap: the terminal folds it, no newline is added),
        # so that it can be copied; the other lines wrap at words.
        c.print(line, soft_wrap=line.startswith("plan: "))
    mj = result["memory"]
    narrow = c.width < 120
    if narrow:
        c.print("columns: " + ", ".join(f"{SHORT_CLASSES[k]} = {k.replace('_', ' ')}" for k in CLASSES
                                        if SHORT_CLASSES[k] != k) + ", room = headroom", style="dim")
    t = Table(title="Memory per GPU by pipeline stage, GiB (2^30 B), at each stage's peak moment",
              box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False)
    t.add_column("stage")
    for k in CLASSES:
        t.add_column(SHORT_CLASSES[k] if narrow else k.replace("_", " "), justify="right")
    t.add_column("peak", justify="right")
    t.add_column("room" if narrow else "headroom", justify="right")
    t.add_column("moment", min_width=9, overflow="fold")  # wraps at spaces; 'recompute' is its longest word
    cap = mj["capacity_bytes"]
    for s in mj["stages"]:
        row = [str(s["rank"])] + [f"{s['components'][k] / GiB:.1f}" for k in CLASSES] + [f"{s['peak_bytes'] / GiB:.1f}"]
        room = {"headroom_bytes": cap - s["peak_bytes"], "capacity_bytes": cap}
        row.append(headroom_text(room) if not narrow or room["headroom_bytes"] < 0 else f"{room['headroom_bytes'] / GiB:.1f}")
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
    for line in reserved_lines(mj):
        c.print(esc(line))
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
            from planner.validate.bands import band_text  # noqa: PLC0415

            c.print(f"  {esc(band_text(tj['error_band'], tj['step_time_s']))}")
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
    for lever in result.get("levers", []):
        c.print(lever_line(lever))
    for risk in result.get("risks", []):
        c.print(f"[yellow]runtime risk[/yellow] {esc(risk['name'])}: {esc(risk['text'])} ({esc(risk['source'])})")
    if unknown_flags:
        c.print("[yellow]Megatron flags planner does not model:[/yellow] " + esc(" ".join(unknown_flags)))
    if "plot" in result:
        c.print(f"plot written to {esc(result['plot'])}")


def lever_line(lever: dict) -> str:
    """One lever of explain: its value and what it bought against the default (planner.cost.evaluate.lever_effects)."""
    head = f"lever {lever['lever']}={esc(lever['value'])}"
    if "step_saved_s" not in lever:
        return head + " (the default)"
    step, peak = lever["step_saved_s"], lever["peak_saved_bytes"]
    saves = (f"{'saves' if step >= 0 else 'costs'} {fmt_time(abs(step))} of step, "
             f"{'saves' if peak >= 0 else 'costs'} {abs(peak) / GiB:.2f} GiB of peak")
    return f"{head}: {saves} against {lever['default']}"


def reserved_lines(mj: dict) -> list[str]:
    """The worst stage's reserved peak line by line (memory JSON 'reserved_breakdown'), then the
    seed's case B per stage: the predicted reserved-minus-allocated gap, what drives it, what
    would shrink it. Plain text (no markup): names and sources come from data files."""
    rb = mj.get("reserved_breakdown")
    if not rb:
        return []
    g = lambda b: f"{b / GiB:.2f} GiB"  # noqa: E731
    out = [f"reserved peak, worst stage (estimates): {g(rb['reserved_peak_bytes'])} = allocated "
           f"{g(rb['allocated_peak_bytes'])} + allocator holding {g(rb['allocator_holding_bytes'])}"]
    for c in rb["communicators"]:
        out.append(f"  NCCL {c['group']} ({c['purpose']}): {c['count']} x {g(c['bytes_each'])} "
                   f"(~{c['channels_implied']:g} channels x Simple+LL+LL128 buffers; NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS)")
    d = rb["dispatcher"]
    out.append(f"  dispatcher buffers ({d['name']}): {d['count']} x {g(d['bytes_each'])}")
    out.append(f"  PP receive buffers: {rb['pp_receive_buffers']['count']} x {g(rb['pp_receive_buffers']['bytes_each'])}")
    w = rb["gemm_workspaces"]
    out.append(f"  cuBLAS/TE workspaces: {w['streams']} streams x {g(w['bytes_each'])}")
    out.append(f"  CUDA-graph pools: {g(rb['graph_pools']['bytes'])}"
               + (" (estimate: static buffers per captured scope and micro-batch in flight; a full-iteration "
                     "graph's step inputs and, on MoE, the paged stash's CUDA buffer)"
                  if rb["graph_pools"]["bytes"] else " (no CUDA graphs)"))
    if rb["attention_score_buffer_bytes"]:
        out.append(f"  attention-score buffer (local spec): {g(rb['attention_score_buffer_bytes'])}")
    terms = ", ".join(f"{k.replace('_', ' ')} {g(v)}" for k, v in rb["allocator_holding_terms"].items() if v)
    out.append(f"  allocator holding: {terms or '0'}")
    for s in mj["stages"]:
        cb = s.get("case_b")
        if not cb:
            continue
        drivers = ", ".join(f"{d['term'].replace('_', ' ')} {g(d['bytes'])} ({d['cause']})" for d in cb["drivers"][:3])
        best = [x for x in cb["shrink"] if x["gap_bytes"] is not None]
        shrink = "; ".join(f"{x['lever'].replace('_', ' ')} -> {g(x['gap_bytes'])}" for x in best) or \
            ", ".join(x["lever"].replace("_", " ") for x in cb["shrink"])
        flag = " [case B: reserved at the limit, allocated GiBs lower]" if cb["at_risk"] else ""
        out.append(f"stage {s['rank']}: reserved - allocated {g(cb['gap_bytes'])}{flag}; drivers: {drivers or '-'}; "
                   f"would shrink it: {shrink}")
    return out


def short_band(tm: dict) -> str:
    """The band cell of a plan's time JSON: where its measured step likely falls
    (planner.validate.bands.step_band, the one definition); '-' without validation runs."""
    from planner.validate.bands import step_band  # noqa: PLC0415

    sb = step_band(tm.get("step_time_s"), tm.get("error_band"))
    return sb.cell() if sb is not None else "-"


_DIMS = ("tp", "cp", "pp", "ep", "dp")


def plan_family(plan: dict) -> str:
    """The parallelisms a plan uses (degree above 1), e.g. 'TP+PP+DP'; 'single GPU' for none."""
    used = [k.upper() for k in _DIMS if (plan.get(k) or 1) > 1]
    return "+".join(used) or "single GPU"


def plan_degrees(plan: dict) -> str:
    """The degrees above 1, short: 'tp2 pp4/2 ep8 dp16' (pp/vpp), etp where experts are TP-split."""
    parts = []
    for k in _DIMS:
        v = plan.get(k) or 1
        if v > 1:
            parts.append(f"pp{v}/{plan['vpp']}" if k == "pp" and (plan.get("vpp") or 1) > 1 else f"{k}{v}")
        if k == "ep" and (plan.get("etp") or 1) > 1:
            parts.append(f"etp{plan['etp']}")
    return " ".join(parts) or "-"


_SHARDING = {"dist_opt": "distopt"}


def plan_levers(plan: dict) -> str:
    """The levers that differ between plans, short (the full plan line below the row spells them
    out): micro-batch, sharding, precision, then recompute, offload, overlap, bf16 moments, schedule."""
    parts = [f"mbs{plan.get('mbs', 1)}", _SHARDING.get(str(plan.get("sharding")), str(plan.get("sharding", ""))),
             str(plan.get("precision", ""))]
    rc = str(plan.get("recompute") or "none")
    if rc != "none":
        parts.append("rc:full" if rc == "full" else "rc:sel")
    if str(plan.get("offload") or "none") != "none":
        parts.append("offload")
    if plan.get("ep_overlap") == "on":
        parts.append("overlap")
    if plan.get("moments") == "bf16":
        parts.append("m:bf16")
    if plan.get("grad_reduce") == "bf16":
        parts.append("gr:bf16")
    if plan.get("param_gather") == "fp8":
        parts.append("pg:fp8")
    graphs = str(plan.get("cuda_graphs") or "none")
    if graphs != "none":
        parts.append("cg:full" if graphs == "full_iteration" else "cg:layer" if graphs == "scoped:layer" else "cg:scoped")
    if plan.get("schedule"):
        parts.append(str(plan["schedule"]))
    return " ".join(x for x in parts if x)


SEARCH_COLUMNS = (("#", "right"), ("family", "left"), ("degrees", "left"), ("levers", "left"),
                  ("peak/room", "right"), ("step", "right"), ("tok/s/GPU", "right"), ("band", "right"))
_WRAPPABLE = ("levers", "degrees", "family")
"""Columns whose cells may wrap at spaces, widest first, when the table is wider than the screen."""


def search_rows(plans: list[dict]) -> list[tuple[list[str], str]]:
    """(cells, full plan string) per ranked plan, in SEARCH_COLUMNS order. The family cell is the
    plan's family (planner.search.families: degrees, sharding, precision, and its variants' spread)
    where the search gave one, else the parallelisms it uses."""
    from planner.search.families import family_cell  # noqa: PLC0415

    rows = []
    for p in plans:
        mem, tm = p["memory"], p["time"]
        room = mem["headroom_bytes"] / GiB
        family = family_cell(p["family"]) if p.get("family") else plan_family(p["plan"])
        rows.append(([str(p["rank"]), family, plan_degrees(p["plan"]), plan_levers(p["plan"]),
                      f"{mem['peak_bytes'] / GiB:.1f}/{room:.1f}", fmt_time(tm["step_time_s"]),
                      f"{tm['tokens_per_s_per_gpu']:,.0f}", short_band(tm)], p["plan_string"]))
    return rows


def _column_widths(rows: list[list[str]], heads: list[str], width: int, gap: int) -> list[int]:
    """Each column's width: its widest cell, the wrappable ones narrowed (never below their
    longest word, so no word is cut) until the table fits ``width`` or can narrow no further."""
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    floor = list(natural)
    for name in _WRAPPABLE:
        i = heads.index(name)
        floor[i] = max([len(w) for w in heads[i].split()] + [len(w) for r in rows for w in r[i].split()])
    widths = list(natural)
    excess = sum(widths) + gap * (len(widths) - 1) - width
    wrappable = [heads.index(name) for name in _WRAPPABLE]
    while excess > 0:
        # Narrow the widest column that can still narrow: rows grow a line or two each, evenly.
        room = [i for i in wrappable if widths[i] > floor[i]]
        if not room:
            break
        i = max(room, key=lambda k: widths[k])
        widths[i] -= 1
        excess -= 1
    return widths


def ranked_table_lines(rows: list[tuple[list[str], str]], width: int, gap: int = 2) -> list[tuple[str, str]]:
    """The ranked plans as (kind, text) lines for a screen of ``width`` columns: 'head' and 'row'
    lines fit the width (cells wrap at spaces only); a 'plan' line under each row holds the
    full plan string, unwrapped, so that it can be copied whole into --plan or --fix."""
    heads = [c for c, _ in SEARCH_COLUMNS]
    right = [j == "right" for _, j in SEARCH_COLUMNS]
    widths = _column_widths([r for r, _ in rows], heads, width, gap)

    def render(cells: list[str]) -> list[str]:
        wrapped = [textwrap.wrap(c, w, break_long_words=False, break_on_hyphens=False) or [""]
                   for c, w in zip(cells, widths)]
        out = []
        for k in range(max(len(x) for x in wrapped)):
            parts = [(x[k] if k < len(x) else "") for x in wrapped]
            line = (" " * gap).join(t.rjust(w) if r else t.ljust(w) for t, w, r in zip(parts, widths, right))
            out.append(line.rstrip())
        return out

    lines = [("head", t) for t in render(heads)]
    for cells, plan in rows:
        lines += [("row", t) for t in render(cells)]
        lines.append(("plan", " " * (widths[0] + gap) + plan))
    return lines


def print_search(result, out: dict, saved=None, verbose: bool = False) -> None:
    c = console()
    space = result.space
    m, h, j = space.model, space.hw, space.job
    c.print(f"[bold]{esc(m.display_name or m.name)}[/bold] on [bold]{esc(h.name)}[/bold] ({esc(h.gpu.name)}, NVLink domain of "
            f"{h.domain_size}) · {j.gpus} GPUs · global batch {j.global_batch} x seq {j.seq_len} · "
            f"precisions {', '.join(j.precisions)} · target {space.target}")
    if j.source:
        c.print(f"job: {esc(j.source)}")
    sw = out.get("software")
    if sw:  # the release the plans are ranked for: its levers, defaults and rules (--software)
        c.print(f"software: {esc(sw['name'])}; {esc(sw.get('origin') or 'given')}")
    from planner.search.status import status_brief, status_line  # noqa: PLC0415

    sv = out["solver"]
    text = status_line(sv) if verbose else status_brief(sv)
    c.print("solver: " + esc(text).replace(sv["status"], f"[bold]{sv['status']}[/bold]", 1))
    if sv.get("ties"):
        c.print("ties: " + esc(ties_text(sv["ties"])))
    if out["plans"]:
        c.print(margin_text(h, j, out["plans"][0]["memory"].get("margin_bytes", 0.0)))
        c.print("[bold]Ranked plans[/bold]: peak/room = the worst stage's estimated reserved memory and its headroom, "
                "GiB (2^30 B); band = where the measured step likely falls; the full plan under each row")
        for kind, line in ranked_table_lines(search_rows(out["plans"]), c.width):
            c.print(line, markup=False, soft_wrap=True, style="bold" if kind == "head" else None)
    if any("launchers" in p for p in out["plans"]):
        c.print(launchers_line(out["plans"]))
    bands: dict = {}
    for p in out["plans"]:
        if p["time"].get("error_band"):
            bands.setdefault(p["time"]["error_band"]["class"], p)
    for p in bands.values():
        from planner.validate.bands import band_text  # noqa: PLC0415

        # The top plan of each class names the prediction, the expectation and the band at once.
        c.print(esc(f"#{p['rank']}: " + band_text(p["time"]["error_band"], p["time"]["step_time_s"])))
    if out.get("sensitivity"):
        print_sensitivity(out["sensitivity"])
    if saved:
        c.print(f"saved to {esc(saved)} (use: planner explain/export --from {esc(saved)} --rank K)")


def ties_text(ties: dict) -> str:
    """The tie rule and what the list shows, one line (the JSON: solver.ties)."""
    text = (f"steps within {100 * ties['resolution']:.1f}% tie (the model's resolution for "
            f"{ties.get('class') or 'every class pooled'}: median error of the step ratio of two plans of one job, "
            f"{ties['series']} published series); robust plans first within a tie")
    if ties.get("families"):
        text += (f"; the best plan of each of {ties['families_found']} families in {ties['plans_ranked']} ranked plans "
                 f"(--all-variants: every plan)")
    for rs in ties.get("robust_search") or []:
        text += (f"; the main search's plans tied with the fastest held none of the class {rs['fix']}, so a "
                 f"search of it added {rs['plans']}" + (f" ({rs['none_because']})" if rs.get("none_because") else ""))
    if not ties.get("first_group_complete", True):
        text += (f"; all {ties.get('plans_searched', ties['plans_ranked'])} plans of the main search tie with the "
                 f"fastest, more may (--top higher ranks more)")
    return text


def launchers_line(plans: list[dict]) -> str:
    """Under --target any: which export takes each plan (its 'launchers' rules, empty = takes it)."""
    from planner.launchers.registry import label  # noqa: PLC0415

    parts = []
    for p in plans:
        ok = [label(t) for t, rules in p["launchers"].items() if not rules]
        parts.append(f"#{p['rank']} {' and '.join(ok) if ok else 'neither'}")
    return ("--target any (the shared rules only): the exports take " + "; ".join(parts)
            + " (--json: the rules each export would refuse a plan by)")


def print_sensitivity(sens: dict) -> None:
    c = console()
    c.print(f"[bold]sensitivity[/bold]: {sens['summary']}")
    for row in sens["perturbations"]:
        mark = "winner unchanged" if not row["winner_changes"] else f"winner becomes #{row['new_winner_rank']}: {row['new_winner']}"
        c.print(f"  {row['name']}: {mark}")
