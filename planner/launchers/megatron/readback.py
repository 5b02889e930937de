"""How check and explain read a Megatron-LM launch back (the registry's ``ReadBack`` record's
hooks): which files are Megatron launches, the Assumptions and report fields a read script gives."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from planner.launchers.allocator_env import expandable_from_env
from planner.launchers.megatron.read import ScriptJob, assumptions_from_flags
from planner.launchers.megatron.rules import args_violations
from planner.launchers.software import MEGATRON_FLAG_FEATURES

if TYPE_CHECKING:
    from planner.errors import Violation

# Flags every Megatron-LM pretrain script sets for a GPT model (megatron/training/arguments.py,
# _add_network_size_args / _add_distributed_args / _add_training_args), or the pretrain entry
# point itself. Bridge overrides spell them model.x_y and torchtitan's --section.x_y, so neither
# matches: the dash-and-word boundaries keep out --seq_length and --parallelism.tensor_... .
_MEGATRON = re.compile(
    r"(?<![\w.-])--(?:tensor-model-parallel-size|pipeline-model-parallel-size|num-layers|hidden-size|"
    r"num-attention-heads|micro-batch-size|global-batch-size|seq-length)(?![\w.-])|\bpretrain_\w+\.py\b")


def sniff(text: str, name: str) -> bool:
    """Whether ``text`` is a Megatron-LM launch script or argument list."""
    return _MEGATRON.search(text) is not None


def assumptions(sj: ScriptJob) -> dict:
    """The script's flags as Assumptions (FP8 recipe, CUDA graphs, TE operation fuser), and the
    allocator's expandable segments where the script sets PYTORCH_CUDA_ALLOC_CONF."""
    update = assumptions_from_flags(sj.args.values)
    expandable = expandable_from_env(sj.args.env)
    return {**update, "expandable_segments": expandable} if expandable is not None else update


def flag_features(sj: ScriptJob) -> list[tuple[str, str]]:
    """The dated flags the script sets (each dates the release it runs on no earlier than its own)."""
    values = sj.args.values or {}
    return [(dest, feature) for dest, feature in MEGATRON_FLAG_FEATURES.items()
            if values.get(dest) not in (None, False, [], "")]


def check(sj: ScriptJob, found: list[Violation], ctx) -> tuple[dict, list[Violation]]:
    """check's fields of a read script, and its flags' own rules (megatron.rules.args_violations)
    after ``found``; sequence parallelism without TP is a note: Megatron turns it off and runs."""
    flag_rules = args_violations(sj.args, sj.hardware)
    fields: dict[str, object] = {
        "source": str(sj.source), "model_source": sj.model_source,
        "unknown_flags": sj.args.unknown_flags, "ignored_flags": sj.args.ignored_flags,
        "unresolved_variables": sj.args.unresolved, "not_run": sj.args.not_run,
        "notes": sj.notes + [v.message for v in flag_rules if v.rule == "sequence-parallel-needs-tp"],
        "model_mismatches": sj.mismatches}
    expandable = expandable_from_env(sj.args.env)
    if expandable is not None:  # read back: the reserved estimate uses it
        fields["expandable_segments"] = expandable
    return fields, found + [v for v in flag_rules if v.rule != "sequence-parallel-needs-tp"]


def explain(sj: ScriptJob) -> dict:
    """explain's fields of a read script: the flags planner does not model."""
    return {"unknown_megatron_flags": list(sj.args.unknown_flags)} if sj.args.unknown_flags else {}
