"""Export a plan in-process and read it back with the reader `planner check` uses: the shared
steps of tests/test_roundtrip.py."""

from __future__ import annotations

from planner.cost.setup import resolve_setup
from planner.launchers.common import export_canonical
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job
from planner.specs.plan import Plan

FORMATS = ("megatron", "bridge", "torchtitan", "torchtitan-toml")
GPUS, GLOBAL_BATCH, SEQ = 8, 64, 2048  # 2048: within every catalog model's learned positions


def setup_for(model_name: str, plan_text: str, hw: str = "h100", precision: str = "bf16"):
    m, h = load_model(model_name), load_hardware(hw)
    j = Job(gpus=GPUS, global_batch=GLOBAL_BATCH, seq_len=SEQ, precisions=[precision])
    canon = export_canonical(Plan.parse(plan_text), m, h, j)
    return resolve_setup(m, h, j, canon)


def export_text(setup, fmt: str) -> str:
    if fmt == "megatron":
        from planner.launchers.megatron.write import export_megatron

        return export_megatron(setup)
    if fmt == "bridge":
        from planner.launchers.bridge.write import export_bridge

        return export_bridge(setup)
    if fmt == "torchtitan":
        from planner.launchers.torchtitan.write import export_torchtitan

        return export_torchtitan(setup)
    from planner.launchers.torchtitan.toml import export_torchtitan_toml

    return export_torchtitan_toml(setup)


def read_back(text: str, fmt: str, hw: str = "h100", **options):
    """What `planner check` reads from the exported text (a TOML carries no torchrun line: the
    GPU count is given, as check --gpus would)."""
    if fmt == "megatron":
        from planner.launchers.megatron.read import job_from_script

        return job_from_script(text, hw=hw, **options)
    if fmt == "bridge":
        from planner.launchers.bridge.read import job_from_bridge

        return job_from_bridge(text, hw=hw, **options)
    from planner.launchers.torchtitan.read import job_from_torchtitan

    if fmt == "torchtitan-toml":
        options.setdefault("gpus", GPUS)
    return job_from_torchtitan(text, hw=hw, **options)


def architecture(model) -> dict:
    """The model's fields that shape what trains (names, sources and published counts aside)."""
    return model.model_dump(exclude={"name", "aliases", "display_name", "source", "published", "reference_job",
                                     "training_tokens", "notes"})


def megatron_architecture(model) -> tuple[dict, list[str]]:
    """The architecture a Megatron-LM command line can state for ``model`` (what the flags the
    exporter writes build), and each feature it cannot state, with why."""
    from planner.specs.model import RoPE

    arch, why = architecture(model), []
    if model.position_embedding == "rope" and model.rope is None:
        arch["rope"] = RoPE(theta=10000).model_dump()
        why.append("rope: the model states no RoPE; Megatron rotates with its --rotary-base default 10000")
    r = model.rope
    if model.attention.kind == "mla" and r is not None and r.scaling == "yarn":
        # MLATransformerConfig's YaRN fields without a flag (its defaults stand; the export notes it)
        for key, fixed in (("original_max_position_embeddings", 4096), ("beta_fast", 32.0), ("beta_slow", 1.0)):
            if getattr(r, key) != fixed:
                arch["rope"][key] = fixed
                why.append(f"rope.{key} {getattr(r, key)}: MLA's YaRN takes it from no flag ({fixed} stands)")
    if r is not None and r.scaling == "llama3":
        # Megatron's --use-rope-scaling applies Llama 3.1's bands (rope_utils apply_rope_scaling's
        # defaults; the export notes any other): Llama 4 Scout's 1 / 1 read back as 1 / 4.
        for key, fixed in (("low_freq_factor", 1.0), ("high_freq_factor", 4.0), ("original_max_position_embeddings", 8192)):
            if getattr(r, key) != fixed:
                arch["rope"][key] = fixed
                why.append(f"rope.{key} {getattr(r, key)}: --use-rope-scaling takes Llama 3.1's ({fixed} stands)")
    a = model.attention
    if a.kind == "gqa" and a.attention_chunk is not None:
        arch["attention"]["attention_chunk"] = None
        why.append(f"attention_chunk {a.attention_chunk}: Megatron-LM has no chunked-attention flag (the export notes it)")
    return arch, why


def flag_model(back):
    """The model the read-back Megatron flags describe, built from them alone (not the catalog
    model they match)."""
    from planner.launchers.megatron.model import model_from_hints

    return model_from_hints(back.args.model_hints)


def default_plan(model) -> str:
    """A plan every launcher can run for the model: FSDP (torchtitan shards with it only), the
    all-to-all dispatcher (torchtitan's command line selects no other), PP where the layers split."""
    pp = 2 if model.num_layers % 2 == 0 else 1
    return f"pp={pp},mbs=1,sharding=fsdp" + (",ep=4,dispatcher=alltoall" if model.is_moe else "")


def roundtrip(model_name: str, fmt: str, plan_text: str | None = None) -> list[str]:
    """Differences between what was exported and what reads back (plan, job, model); raises
    PlannerError where the launcher refuses the export."""
    plan_text = plan_text or default_plan(load_model(model_name))
    setup = setup_for(model_name, plan_text)
    back = read_back(export_text(setup, fmt), fmt)
    out = []
    if back.plan != setup.plan:
        out.append(f"plan: {setup.plan.to_string()} -> {back.plan.to_string()}")
    keys = ("gpus", "global_batch", "seq_len", "precisions")
    if [getattr(back.job, k) for k in keys] != [getattr(setup.job, k) for k in keys]:
        out.append(f"job: {setup.job} -> {back.job}")
    if architecture(back.model) != architecture(setup.model):
        out.append(f"model: {setup.model.name} -> {back.model.name}")
    if fmt == "megatron":
        # The flags themselves describe the model: built from them alone, it is the exported one
        # up to what Megatron's command line cannot state.
        want, _ = megatron_architecture(setup.model)
        got = architecture(flag_model(back))
        if got != want:
            out.append(f"flags: {setup.model.name}: " + ", ".join(
                f"{k}: {want.get(k)} -> {got.get(k)}" for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)))
    return out
