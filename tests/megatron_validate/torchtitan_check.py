"""Run an exported torchtitan 0.3.0 invocation through its own config checks, on the CPU.

Runs inside the validation venv, per launchers.md §3: ConfigManager().parse_args(argv) (tyro and
Trainer.Config.__post_init__), then ParallelDims.from_config(cfg.parallelism, world) and the
Trainer's batch and sequence checks, recomputed from the parsed config. Reads
{"argv": [...], "world_size": N} (or a list of them) on stdin, prints {"ok": ...} (or a list).
"""

import contextlib
import io
import json
import sys
import warnings

warnings.filterwarnings("ignore")


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)
    req = json.load(sys.stdin)
    results = [check(r) for r in req] if isinstance(req, list) else check(req)
    print(json.dumps(results))


def check(req: dict) -> dict:
    argv, world = req["argv"], int(req["world_size"])
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    stage = "ConfigManager.parse_args"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            cfg = ConfigManager().parse_args(argv)
            stage = "ParallelDims"
            dims = ParallelDims.from_config(cfg.parallelism, world)
            stage = "Trainer batch checks"
            t = cfg.training
            batch_degree = dims.dp_replicate * dims.dp_shard
            gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * batch_degree
            # torchtitan/trainer.py: global batch is a multiple of local batch times the DP degree.
            assert gbs % (t.local_batch_size * batch_degree) == 0, (
                f"global batch {gbs} % (local {t.local_batch_size} * dp {batch_degree}) != 0")
            sp = cfg.parallelism.enable_sequence_parallel
            div = (dims.tp if sp else 1) * (2 * dims.cp if dims.cp > 1 else 1)
            assert t.seq_len % div == 0, f"seq_len {t.seq_len} % {div} != 0"
            efsdp = dims.dp_shard * dims.cp * dims.tp
            assert dims.ep == 1 or efsdp % dims.ep == 0, f"dp_shard*cp*tp {efsdp} % ep {dims.ep} != 0"
            stage = "pipeline schedule"
            stages = _pipeline_stages(cfg, dims) if dims.pp > 1 else None
    except SystemExit as exc:  # tyro reports bad options as SystemExit(2)
        return {"ok": False, "stage": stage, "error": f"SystemExit {exc.code}: {log.getvalue()[-800:]}"}
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}"}
    p = cfg.parallelism
    return {
        "ok": True,
        "dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "cp": dims.cp, "tp": dims.tp,
        "pp": dims.pp, "ep": dims.ep,
        "local_batch_size": cfg.training.local_batch_size,
        "global_batch_size": cfg.training.global_batch_size,
        "seq_len": cfg.training.seq_len,
        "pp_microbatch": p.pipeline_parallel_microbatch_size,
        "schedule": p.pipeline_parallel_schedule,
        "module_fqns_per_model_part": p.module_fqns_per_model_part,
        "activation_checkpoint": type(cfg.activation_checkpoint).__qualname__,
        "optimizer_implementation": getattr(cfg.optimizer, "implementation", None),
        "fsdp_reshard_after_forward": p.fsdp_reshard_after_forward,
        "stage_indices": stages,
    }


def _pipeline_stages(cfg, dims) -> list:
    """The schedule's own checks before any module is built: torch's get_schedule_class (the name),
    torchtitan's stages-per-rank rule for single- and multi-stage schedules
    (_get_pipeline_metadata), ZBV's and DualPipeV's two stages per rank and DualPipeV's micro-batch
    count (torch's schedule constructors), and the stages each rank holds
    (_get_pp_rank_to_stage_indices_mapping: "loop", or "v" for ZBVZeroBubble and DualPipeV)."""
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleSingle, ScheduleDualPipeV, ScheduleZBVZeroBubble, get_schedule_class,
    )
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    p, t = cfg.parallelism, cfg.training
    cls = get_schedule_class(p.pipeline_parallel_schedule)
    n_stages = len(p.module_fqns_per_model_part)
    per_rank = n_stages // dims.pp
    if issubclass(cls, PipelineScheduleSingle):
        assert per_rank == 1, f"single stage schedule needs 1 stage per rank, got {per_rank}"
    else:
        assert per_rank >= 2, f"multi-stage schedule needs at least 2 stages per rank, got {per_rank}"
    if cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV):
        assert per_rank == 2, f"ZBV requires exactly 2 stages per rank, got {per_rank}"
    n_micro = t.local_batch_size // p.pipeline_parallel_microbatch_size
    if cls is ScheduleDualPipeV:
        assert n_micro >= n_stages, f"DualPipeV requires at least as many microbatches ({n_micro}) as stages ({n_stages})"
    return [list(_get_pp_rank_to_stage_indices_mapping(r, dims.pp, p.pipeline_parallel_schedule, n_stages))
            for r in range(dims.pp)]


if __name__ == "__main__":
    main()
