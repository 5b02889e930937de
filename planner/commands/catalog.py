"""`planner models`, `planner hw`, `planner show-model`, `planner show-hw`: the catalogs, a model's
parameters, and a system's numbers with their sources."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli import app
from planner.options import JsonOpt, print_json
from planner.units import GiB, fmt_count


def _console():
    from planner.report.tables import console

    return console()


def esc(text) -> str:
    from planner.report.tables import esc as _esc

    return _esc(text)


def model_summary(m) -> dict:
    """A model's row: planner's counts (active under the one rule of planner.specs.params, the
    same for catalog and imported models) and the publisher's active figure with its convention."""
    from planner.specs.params import ACTIVE_CONVENTION

    p = m.params
    out = {
        "name": m.name,
        "aliases": m.aliases,
        "kind": "moe" if m.is_moe else "dense",
        "layers": m.num_layers,
        "hidden": m.hidden_size,
        "attention": m.attention.kind,
        "total_params": p.total,
        "active_params": p.active(),
        "active_convention": ACTIVE_CONVENTION,
        "mtp_params": p.mtp,
    }
    if m.published and m.published.active_params:
        out.update(published_active_params=m.published.active_params.value,
                   published_active_convention=m.published.active_convention)
    if m.moe:
        out.update(experts=m.moe.num_experts, top_k=m.moe.top_k)
    return out


@app.command("models")
def models_cmd(json: JsonOpt = False) -> None:
    """List the bundled models with their parameter counts."""
    from planner.specs.catalog import all_models

    rows = [model_summary(m) for m in all_models()]
    if json:
        print_json({"models": rows})
        return
    from rich.table import Table

    t = Table(title="Models (parameters counted by planner; 'active' includes the input embedding for every model)")
    for col in ("name", "aliases", "kind", "layers", "hidden", "attn", "experts", "total", "active", "MTP"):
        t.add_column(col, justify="right" if col in ("layers", "hidden", "total", "active", "MTP") else "left",
                     no_wrap=col == "name")
    for r in rows:
        experts = f"{r['experts']} top-{r['top_k']}" if "experts" in r else "-"
        t.add_row(
            r["name"], ", ".join(r["aliases"]), r["kind"], str(r["layers"]), str(r["hidden"]), r["attention"], experts,
            fmt_count(r["total_params"]), fmt_count(r["active_params"]), fmt_count(r["mtp_params"]) if r["mtp_params"] else "-",
        )
    _console().print(t)


def hw_summary(h) -> dict:
    g = h.gpu
    return {
        "name": h.name,
        "aliases": h.aliases,
        "gpu": g.name,
        "generation": g.generation,
        "peak_flops": {k: v.value for k, v in g.peak_flops.items()},
        "hbm_usable_bytes": g.hbm_usable_bytes.value,
        "hbm_bandwidth": g.hbm_bandwidth.value,
        "nvlink_domain": h.domain_size,
        "nvlink_bandwidth_per_direction": h.nvlink.bandwidth_per_direction.value,
        "nic_bandwidth_per_direction": h.scale_out.bandwidth_per_direction.value,
        "host_link": h.host.kind,
        "host_link_bandwidth_per_direction": h.host.bandwidth_per_direction.value,
        "host_memory_bytes": h.host.host_memory_bytes.value,
    }


@app.command("hw")
def hw_cmd(json: JsonOpt = False) -> None:
    """List the bundled hardware with key numbers (dense peaks; bandwidths per direction)."""
    from planner.specs.catalog import all_hardware

    rows = [hw_summary(h) for h in all_hardware()]
    if json:
        print_json({"hardware": rows})
        return
    from rich.table import Table

    t = Table(title="Hardware (per GPU; dense peaks; HBM as the driver reports it; bandwidth per direction)")
    for col in ("name", "aliases", "GPU", "BF16 TFLOP/s", "FP8 TFLOP/s", "HBM GiB", "HBM TB/s", "NVLink dom.", "NVLink GB/s", "NIC GB/s", "host link"):
        t.add_column(col, no_wrap=col == "name")
    for r in rows:
        pf = r["peak_flops"]
        t.add_row(
            r["name"], ", ".join(r["aliases"]), r["gpu"], f"{pf['bf16'] / 1e12:,.0f}",
            f"{pf['fp8'] / 1e12:,.0f}" if "fp8" in pf else "-", f"{r['hbm_usable_bytes'] / GiB:.1f}",
            f"{r['hbm_bandwidth'] / 1e12:.2f}", str(r["nvlink_domain"]), f"{r['nvlink_bandwidth_per_direction'] / 1e9:.0f}",
            f"{r['nic_bandwidth_per_direction'] / 1e9:.0f}", f"{r['host_link']} {r['host_link_bandwidth_per_direction'] / 1e9:.0f} GB/s",
        )
    _console().print(t)


@app.command("show-model")
def show_model_cmd(
    name: Annotated[str, typer.Argument(help="Catalog name or alias, a model YAML or a HuggingFace config.json.")],
    json: JsonOpt = False,
) -> None:
    """A model's architecture and parameter breakdown (total, per layer, activated per token)."""
    from planner.specs.catalog import load_model, spec_hash

    from planner.specs.params import ACTIVE_CONVENTION

    m = load_model(name)
    p = m.params
    conv = ACTIVE_CONVENTION
    data = {
        "model": m.model_dump(mode="json"),
        "spec_hash": spec_hash(m),
        "params": {
            "total": p.total,
            "mtp": p.mtp,
            "active": p.active(conv),
            "active_convention": conv,
            "active_incl_embedding": p.active_incl_embedding,
            "active_excl_input_embedding": p.active_excl_input_embedding,
            "mtp_active": p.mtp_active,
            "components": p.components,
            "per_layer": p.per_layer,
        },
        "counting_convention": (
            "every weight, bias and norm counted once; main model excludes MTP modules, which share the "
            "embedding and output head; 'active' counts all parameters a token passes through, the "
            "routed experts scaled by top_k/num_experts, the input embedding included for every model "
            "(active_excl_input_embedding leaves it out; 'published' keeps the publisher's figure and convention)"
        ),
    }
    if json:
        print_json(data)
        return
    from rich.table import Table

    c = _console()
    c.print(f"[bold]{esc(m.display_name or m.name)}[/bold]  ({esc(m.name)}; {'MoE' if m.is_moe else 'dense'}, {m.num_layers} layers, "
            f"hidden {m.hidden_size}, {m.attention.kind.upper()} attention, vocab {m.vocab_size})")
    t = Table(title="Parameters by component (whole model, MTP apart)")
    t.add_column("component")
    t.add_column("parameters", justify="right")
    t.add_column("share", justify="right")
    for k, v in sorted(p.components.items(), key=lambda kv: -kv[1]):
        t.add_row(k, f"{v:,}", f"{v / p.total:.1%}")
    t.add_row("[bold]total[/bold]", f"[bold]{p.total:,}[/bold]", "")
    c.print(t)
    for kind, n in sorted(p.per_layer.items()):
        count = sum(k == kind for k in m.layer_kinds)
        c.print(f"  {kind} layer: {n:,} parameters x {count} layers")
    c.print(f"  activated per token: {fmt_count(p.active())} (incl. the input embedding; "
            f"{fmt_count(p.active_excl_input_embedding)} without it)")
    if p.mtp:
        c.print(f"  MTP modules ({m.mtp_layers}): {fmt_count(p.mtp)} unique, {fmt_count(p.mtp_active)} activated")
    if m.published:
        pub = m.published
        short = "excl. emb." if pub.active_convention == "excl_input_embedding" else "incl. emb."
        c.print(f"  published: {fmt_count(pub.total_params.value)} total"
                + (f", {fmt_count(pub.active_params.value)} active ({short})" if pub.active_params else "")
                + f"  ({esc(pub.total_params.source)})")


def _sourced_rows(prefix: str, obj) -> list[tuple[str, object, str]]:
    """(field path, value, source and note) for every sourced number of a spec, in field order."""
    from planner.specs.common import Sourced

    rows = []
    for name in type(obj).model_fields:
        value = getattr(obj, name)
        path = f"{prefix}{name}"
        if isinstance(value, Sourced):
            rows.append((path, value.value, value.source + (f" [{value.note}]" if value.note else "")))
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, Sourced):
                    rows.append((f"{path}.{k}", v.value, v.source + (f" [{v.note}]" if v.note else "")))
        elif hasattr(type(value), "model_fields"):
            rows.extend(_sourced_rows(path + ".", value))
    return rows


@app.command("show-hw")
def show_hw_cmd(
    name: Annotated[str, typer.Argument(help="Hardware catalog name or alias (see 'planner hw'), or a hardware YAML.")],
    json: JsonOpt = False,
) -> None:
    """A system's numbers, each with its source (per GPU; dense peaks; bandwidth per direction)."""
    from planner.specs.catalog import load_hardware, spec_hash

    h = load_hardware(name)
    if json:
        print_json({"hardware": h.model_dump(mode="json"), "spec_hash": spec_hash(h), "summary": hw_summary(h)})
        return
    from rich.table import Table

    c = _console()
    c.print(f"[bold]{esc(h.name)}[/bold]  ({esc(h.gpu.name)}, {h.gpu.generation}; {esc(h.description)})")
    t = Table(title="Numbers and their sources")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("source")
    for path, value, source in _sourced_rows("", h):
        shown = f"{value:,.4g}" if isinstance(value, float) and not isinstance(value, bool) else str(value)
        t.add_row(path, shown, esc(source))
    c.print(t)
    c.print(f"  FP8 recipe: {h.fp8_recipe or 'none (no FP8 tensor cores)'}; default MoE dispatcher: {h.default_dispatcher}")


def software_summary(p) -> dict:
    """A software profile's row: the release, its launcher and the plan levers it can run."""
    return {"name": p.name, "aliases": p.aliases, "framework": p.framework, "version": p.version,
            "launcher": p.launcher, "released": p.released, "features": sorted(p.features),
            "default_levers": p.default_lever_values()}


@app.command("software")
def software_cmd(json: JsonOpt = False) -> None:
    """List the framework releases planner knows (--software): launcher and features."""
    from planner.launchers.registry import default_software, searchable
    from planner.specs.catalog import all_software

    rows = [software_summary(p) for p in all_software()]
    defaults = {x.name: (d.name if (d := default_software(x.name)) is not None else None) for x in searchable()}
    if json:
        print_json({"software": rows, "defaults": defaults})
        return
    from rich.table import Table

    t = Table(title="Software profiles (--software; the default is the newest release of the --target launcher: "
              + ", ".join(f"{k} {v}" for k, v in defaults.items()) + ")")
    for col in ("name", "framework", "version", "launcher", "released", "features"):
        t.add_column(col, no_wrap=col == "name")
    for r in rows:
        t.add_row(r["name"], r["framework"], r["version"], r["launcher"], r["released"] or "-", str(len(r["features"])))
    _console().print(t)


@app.command("show-software")
def show_software_cmd(
    name: Annotated[str, typer.Argument(help="Software profile name or alias (see 'planner software'), or a profile YAML.")],
    json: JsonOpt = False,
) -> None:
    """A release's features, recipe defaults and launcher rules, each with its source."""
    from planner.specs.catalog import load_software, spec_hash
    from planner.specs.software import FEATURES

    p = load_software(name)
    if json:
        print_json({"software": p.model_dump(mode="json"), "spec_hash": spec_hash(p), "summary": software_summary(p)})
        return
    from rich.table import Table

    c = _console()
    c.print(f"[bold]{esc(p.name)}[/bold]  ({esc(p.title)}, launcher {p.launcher}; {esc(p.source)})")
    t = Table(title="Features and their sources")
    for col in ("feature", "what", "source"):
        t.add_column(col)
    for f, e in p.features.items():
        t.add_row(f, esc(FEATURES.get(f, "")), esc(e.source))
    c.print(t)
    if p.default_levers:
        t = Table(title="Levers its recipes turn on")
        for col in ("lever", "value", "recipes", "source"):
            t.add_column(col)
        for k, d in p.default_levers.items():
            t.add_row(k, esc(d.value), esc(d.scope or "all"), esc(d.source))
        c.print(t)
    if p.rules:
        t = Table(title="Launcher rules")
        for col in ("rule", "text", "source"):
            t.add_column(col)
        for r in p.rules:
            t.add_row(r.name, esc(r.text), esc(r.source))
        c.print(t)
