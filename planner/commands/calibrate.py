"""`planner calibrate`: measure this machine's GPU (GEMM throughput over the time model's shapes,
HBM copy bandwidth, attention kernels) and write a calibration file for ``--calibration FILE``.

Needs PyTorch with a CUDA GPU (``pip install 'planner[gpu]'``); the rest of planner does not.
"""

from __future__ import annotations

import json as _json
from pathlib import Path
from typing import Annotated

import typer

from planner.cli import app
from planner.errors import PlannerError


def _require_cuda(device: str):
    """Import torch and check the device, or explain in one paragraph why calibration cannot run."""
    try:
        import torch
    except ModuleNotFoundError:
        raise PlannerError(
            "planner calibrate measures a GPU with PyTorch, which is not installed here.",
            hint="Install PyTorch with CUDA support on the GPU machine (pip install 'planner[gpu]', or the "
                 "torch wheel matching its CUDA driver) and run 'planner calibrate --out FILE' there; then pass "
                 "FILE to other commands with --calibration.",
        ) from None
    if device == "cuda" and not torch.cuda.is_available():
        raise PlannerError(
            f"planner calibrate needs a CUDA GPU, but PyTorch {torch.__version__} sees none "
            f"(torch.cuda.is_available() is False; CUDA build: {torch.version.cuda}).",
            hint="Run it on the GPU machine whose numbers you want, with a CUDA build of PyTorch and a working "
                 "driver (nvidia-smi should list the GPU).",
        )
    return torch


@app.command("calibrate")
def calibrate_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Calibration file to write (.yaml or .json); the full tables go beside it as <stem>-raw.json.")],
    hw: Annotated[str, typer.Option("--hw", help="Hardware catalog name these measurements belong to (recorded in the file).")] = "h200",
    quick: Annotated[bool, typer.Option("--quick", help="Fewer shapes (M in 1024..8192, four N,K pairs, head dim 128 only).")] = False,
    no_fp8: Annotated[bool, typer.Option("--no-fp8", help="Skip the FP8 GEMMs (torch._scaled_mm).")] = False,
    device: Annotated[str, typer.Option("--device", hidden=True, help="cuda, or cpu for a smoke test with tiny shapes.")] = "cuda",
    json: Annotated[bool, typer.Option("--json", help="Print the calibration as JSON too.")] = False,
    raw_in: Annotated[Path | None, typer.Option("--from-raw", help="Rebuild the calibration from an existing -raw.json instead of measuring.")] = None,
) -> None:
    """Measure GEMM, HBM-copy and attention throughput on this GPU and write a calibration file."""
    from planner import __version__
    from planner.calibrate import bench
    from planner.calibrate.schema import Calibration, CalibrationRaw

    from planner.files import MAX_RAW_BYTES, check_output, write_text
    from planner.specs.catalog import read_json, validation_paragraph

    if out.suffix not in (".yaml", ".yml", ".json"):
        raise PlannerError(f"Calibration file '{out}' must end in .yaml, .yml or .json.")
    raw_path = out.with_name(out.stem + "-raw.json")
    if raw_in is not None:
        raw = read_json(Path(raw_in), "raw calibration", MAX_RAW_BYTES)
    # Both outputs are checked before measuring (minutes of GPU time), and never over the input.
    check_output(out, "calibration")
    if raw_in is None or Path(raw_in).resolve() != raw_path.resolve():
        check_output(raw_path, "raw calibration")
    if raw_in is None:
        _require_cuda(device)
        if device == "cpu":
            opts = bench.tiny_options()
        else:
            opts = bench.Options(device=device, fp8=not no_fp8)
            if quick:
                opts.m_values = (1024, 2048, 4096, 8192)
                opts.nk_pairs = bench.NK_PAIRS[:4]
                opts.attn_head_dims = (128,)
                opts.attn_seqs = (4096, 8192)
        opts.log = lambda msg: typer.echo(msg, err=True)
        raw = bench.run(opts)
    from pydantic import ValidationError

    origin = str(raw_in) if raw_in is not None else "the measurements"
    try:
        raw_model = CalibrationRaw.model_validate(raw)
    except ValidationError as exc:
        raise PlannerError(validation_paragraph("raw calibration", origin, exc, raw)) from None
    try:
        summary = bench.summarize(raw, hw, __version__)
        cal = Calibration.model_validate(summary)
    except ValidationError as exc:
        raise PlannerError(validation_paragraph("calibration", origin, exc)) from None
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise PlannerError(f"Cannot build a calibration from {origin}: {type(exc).__name__} {str(exc)[:200]}.") from None
    data = cal.model_dump(mode="json", exclude_none=True)
    if out.suffix == ".json":
        write_text(out, _json.dumps(data, indent=1) + "\n", "calibration")
    else:
        import yaml

        write_text(out, yaml.safe_dump(data, sort_keys=False, width=120), "calibration")
    if raw_in is None or Path(raw_in).resolve() != raw_path.resolve():
        write_text(raw_path, raw_model.model_dump_json(indent=1) + "\n", "raw calibration")
    if json:
        typer.echo(_json.dumps(data, indent=1))
    else:
        best = max((g.tflops for g in cal.gemm if g.recipe == "bf16"), default=0.0)
        typer.echo(f"{raw_model.device.name}: best bf16 GEMM {best:.0f} TFLOP/s, "
                   f"HBM copy {(cal.hbm_bandwidth or 0) / 1e12:.2f} TB/s; wrote {out} and {raw_path}"
                   + (f"; {len(raw_model.errors)} section error(s) recorded" if raw_model.errors else ""))
