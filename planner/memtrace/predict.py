"""Planner's prediction beside the measurement, class by class.

The comparison works on plain dicts: the measured peak (this package's report) and a ``memory``
object as DESIGN.md section 6 defines it (``peak_bytes``, ``components`` {weights, gradients,
optimizer, activations, transient, comm_buffers, allocator}, ``worst_stage``, ``stages``). That
keeps it testable without the memory model, which :func:`predicted_memory` imports only when asked
and reports as unavailable while it is not there.
"""

from __future__ import annotations

from planner.cost.setup import resolve_setup
from planner.errors import PlannerError

PREDICTED = ("weights", "gradients", "optimizer", "activations", "transient", "comm_buffers", "allocator")

UNAVAILABLE = "prediction not available yet: planner.cost.memory.memory_report is not in this build"


def predicted_memory(model, hw, job, plan) -> tuple[dict | None, str | None]:
    """(DESIGN section 6 ``memory`` object, None), or (None, why not).

    The setup is resolved first, so a plan the model cannot hold is reported even while the memory
    model is missing."""
    setup = resolve_setup(model, hw, job, plan)
    try:
        from planner.cost.memory import memory_report  # noqa: PLC0415  # guarded import, see except
    except ImportError:  # the memory model has not landed (or lacks memory_report)
        return None, UNAVAILABLE
    return memory_report(setup).to_json(), None


def _stage_view(predicted: dict, stage: int | None) -> tuple[dict, int | None, str]:
    if stage is None:
        comps = predicted.get("components")
        if not isinstance(comps, dict):
            raise PlannerError("The memory prediction has no 'components' object; cannot compare it with the snapshot.")
        worst = predicted.get("worst_stage")
        return {"components": comps, "peak_bytes": predicted.get("peak_bytes")}, worst, "worst stage"
    stages = predicted.get("stages")
    if not isinstance(stages, list) or not 0 <= stage < len(stages):
        count = len(stages) if isinstance(stages, list) else 0
        raise PlannerError(
            f"--stage {stage} is not a stage of this plan's prediction ({count} stages, numbered from 0).",
            hint="Give the pipeline stage of the rank the snapshot was taken on.",
        )
    entry = stages[stage]
    if not isinstance(entry, dict) or not isinstance(entry.get("components"), dict):
        raise PlannerError(f"The memory prediction's stage {stage} has no 'components' object.")
    return entry, stage, f"stage {stage}"


def compare(measured: dict, predicted: dict, stage: int | None = None) -> dict:
    """Rows of predicted vs measured bytes.

    ``measured`` holds ``components`` (this package's classes), ``allocated_bytes`` and
    ``reserved_bytes`` at the peak. The measured ``allocator`` row is reserved − allocated there;
    ``unknown`` has no predicted counterpart and is shown so the other rows read as lower bounds.
    """
    view, stage_no, label = _stage_view(predicted, stage)
    pc = view["components"]
    mc = dict(measured["components"])
    mc["allocator"] = measured["reserved_bytes"] - measured["allocated_bytes"]
    rows = []
    for cls in PREDICTED:
        p = pc.get(cls)
        p = None if p is None else float(p)
        m = int(mc.get(cls, 0))
        rows.append(_row(cls, p, m))
    rows.append(_row("unknown", None, int(mc.get("unknown", 0))))
    peak = view.get("peak_bytes")
    peak = None if peak is None else float(peak)
    notes = [
        "A snapshot sees only PyTorch's caching allocator: NCCL's own buffers and the CUDA context are "
        "outside it, so measured comm_buffers and allocator read low against a prediction that includes them."
    ]
    if mc.get("unknown"):
        notes.append("Measured 'unknown' bytes belong to some predicted class: the other measured rows are lower bounds.")
    return {
        "available": True,
        "stage": stage_no,
        "stage_label": label,
        "rows": rows,
        "total": _row("peak (reserved)", peak, int(measured["reserved_bytes"])),
        "notes": notes,
    }


def _row(cls: str, predicted: float | None, measured: int) -> dict:
    return {
        "class": cls,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "delta_bytes": None if predicted is None else measured - predicted,
        "ratio": None if not predicted else round(measured / predicted, 4),
    }
