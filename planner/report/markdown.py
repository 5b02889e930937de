"""Markdown for a pull request or a design doc: `search --markdown` and `explain --markdown` (compare
and validate have theirs in planner.report.compare and planner.validate.report). Cells are escaped
(a pipeline layout holds '|'); numbers carry their units; user text stays text."""

from __future__ import annotations

from planner.report.compare import markdown_table
from planner.report.tables import lever_line, reserved_lines, short_band, ties_text
from planner.search.families import family_cell
from planner.units import GiB, fmt_time
from planner.validate.bands import band_text


def _code(text: str) -> str:
    """Inline code that a backtick in the text cannot end early."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if fence == "`" else f"{fence} {text} {fence}"


def _headroom(mem: dict) -> str:
    h, cap = mem["headroom_bytes"], mem["capacity_bytes"]
    if h < 0:
        return f"short {-h / GiB:.1f}"
    return f"{h / GiB:.1f} ({h / cap:.0%})" if cap > 0 else f"{h / GiB:.1f}"


def _margin_line(job: dict, mem: dict) -> str:
    margin = mem.get("margin_bytes", 0)
    if job.get("memory_margin_fraction") and not job.get("memory_margin_bytes"):
        why = (f"{job['memory_margin_fraction']:.2%} of usable HBM by default, planner's largest held-out reserved-peak "
               "error on H200s, rounded up; `--memory-margin 0` ranks plans up to the edge")
    elif margin:
        why = "`--memory-margin`"
    else:
        why = "`--memory-margin 0`: plans may reach the capacity"
    return (f"Capacity is usable HBM less the CUDA context and a {margin / GiB:.1f} GiB memory margin ({why}); "
            "headroom is capacity less the peak.")


def search_markdown(out: dict) -> str:
    m, h, j = out["model"]["name"], out["hardware"]["name"], out["job"]
    lines = [f"# {m} on {h}: ranked plans", "",
             f"{j['gpus']:,} GPUs · global batch {j['global_batch']:,} × seq {j['seq_len']:,} · precisions "
             f"{', '.join(j['precisions'])} · target {out['target']} · planner {out['planner_version']}.", ""]
    if j.get("source"):
        lines += [f"Job: {j['source']}.", ""]
    if out.get("software"):
        sw = out["software"]
        lines += [f"Software: {sw['name']}; {sw.get('origin') or 'given'}.", ""]
    sv = out["solver"]
    lines += [f"Solver: {sv['name']} {sv['status']}, {sv['structural_keys']:,} layouts × {sv['lever_combinations']} "
              "lever combinations.", ""]
    if sv.get("ties"):
        text = ties_text(sv["ties"])
        lines += [f"Ties: {text}.", ""]
    if out["plans"]:
        lines += [_margin_line(j, out["plans"][0]["memory"]), ""]
    rows = []
    for p in out["plans"]:
        mem, tm = p["memory"], p["time"]
        rows.append([str(p["rank"]), family_cell(p["family"]) if p.get("family") else "-", _code(p["plan_string"]),
                     f"{mem['peak_bytes'] / GiB:.1f} / {mem['capacity_bytes'] / GiB:.1f}", _headroom(mem),
                     fmt_time(tm["step_time_s"]), short_band(tm), f"{tm['tokens_per_s_per_gpu']:,.0f}",
                     f"{tm['mfu']:.1%}", tm.get("bottleneck", "")])
    header = ["#", "family", "plan", "peak / capacity (GiB)", "headroom (GiB)", "step", "measured step likely",
              "tokens/s/GPU", "MFU", "bottleneck"]
    lines += [markdown_table(header, rows), ""]
    first: dict = {}
    for p in out["plans"]:
        if p["time"].get("error_band"):
            first.setdefault(p["time"]["error_band"]["class"], p)
    lines += [f"#{p['rank']}: {band_text(p['time']['error_band'], p['time']['step_time_s'])}." for p in first.values()]
    lines += [""] if first else []
    lines += ["Peak: the worst pipeline stage's estimated reserved memory (allocated peak plus the allocator "
              "margin); GiB = 2^30 bytes.", ""]
    sens = out.get("sensitivity")
    if sens:
        lines += ["## Sensitivity", "", sens["summary"], ""]
        lines += [f"- {r['name']}: " + ("winner unchanged" if not r["winner_changes"] else
                                        f"winner becomes #{r['new_winner_rank']}: {_code(r['new_winner'])}")
                  for r in sens["perturbations"]] + [""]
    return "\n".join(lines)


def explain_markdown(context: dict, result: dict) -> str:
    m, h, j = context["model"]["name"], context["hardware"]["name"], context["job"]
    mj, tj = result["memory"], result.get("time", {})
    plan = result["plan"]
    lines = [f"# {m} on {h}: {_code(result['plan_string'])}", "",
             f"{j['gpus']:,} GPUs · global batch {j['global_batch']:,} × seq {j['seq_len']:,} · "
             f"{result['micro_batches']} micro-batches of {plan.get('mbs', 1)} per step · planner "
             f"{context['planner_version']}.", ""]
    verdict = ("fits" if mj["fits"] else "**does not fit**")
    lines += [f"Memory: {verdict}; worst stage {mj['worst_stage']} peaks at {mj['peak_bytes'] / GiB:.1f} GiB "
              f"(allocated {mj['allocated_peak_bytes'] / GiB:.1f} GiB plus the allocator margin) of "
              f"{mj['capacity_bytes'] / GiB:.1f} GiB; headroom {_headroom(mj).replace(' (', ' GiB (', 1)}. " + _margin_line(j, mj), ""]
    classes = ("weights", "gradients", "optimizer", "activations", "transient", "comm_buffers", "allocator")
    rows = []
    for s in mj["stages"]:
        name = f"**{s['rank']}**" if s["rank"] == mj["worst_stage"] else str(s["rank"])
        rows.append([name] + [f"{s['components'][k] / GiB:.1f}" for k in classes] + [
            f"{s['peak_bytes'] / GiB:.1f}", _headroom({"headroom_bytes": mj["capacity_bytes"] - s["peak_bytes"],
                                                      "capacity_bytes": mj["capacity_bytes"]}),
            str(s["peak_moment"]["window"]).replace("_", " ")])
    header = ["stage", *(k.replace("_", " ") for k in classes), "peak", "headroom", "peak moment"]
    lines += ["Memory per GPU by pipeline stage, GiB (2^30 bytes), at each stage's peak moment:", "",
              markdown_table(header, rows), ""]
    reserved = reserved_lines(mj)
    if reserved:  # explain's reserved breakdown and case B (planner.cost.memory.MemoryReport.add_reserved_json)
        lines += [f"- {line.strip()}" for line in reserved] + [""]
    if tj.get("modeled", True) and "step_time_s" in tj:
        lines += [f"Time: step {fmt_time(tj['step_time_s'])}, {tj['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
                  f"{tj['model_tflops_per_gpu']:.0f} model TFLOP/s/GPU, MFU {tj['mfu']:.1%}"
                  + (f"; bottleneck: {tj['bottleneck']}." if tj.get("bottleneck") else "."), ""]
        if tj.get("error_band"):
            text = band_text(tj["error_band"], tj["step_time_s"])
            lines += [f"{text[:1].upper()}{text[1:]}.", ""]
        bd = {k: v for k, v in (tj.get("breakdown") or {}).items() if v}
        if bd:
            rows = [[k.replace("_", " "), fmt_time(v), f"{v / tj['step_time_s']:.1%}"]
                    for k, v in sorted(bd.items(), key=lambda kv: -kv[1])]
            lines += [markdown_table(["step time by cause", "time", "share"], rows), ""]
    vs = result.get("versus_top_plan")
    if vs:
        word = "slower" if vs["slower_by"] > 0 else "faster"
        lines += [f"Against the search's top plan {_code(vs['top_plan'])}: {abs(vs['slower_by']):.1%} {word}.", ""]
    if result.get("levers"):
        lines += ["Levers against their defaults:", ""] + [f"- {lever_line(lv)}" for lv in result["levers"]] + [""]
    for risk in result.get("risks", []):
        lines += [f"Runtime risk {_code(risk['name'])}: {risk['text']} ({risk['source']}).", ""]
    if result.get("unknown_megatron_flags"):
        lines += ["Flags planner does not model: " + ", ".join(_code(f) for f in result["unknown_megatron_flags"]) + ".",
                  ""]
    if "plot" in result:
        lines += [f"![memory over one step]({result['plot']})", ""]
    return "\n".join(lines)
