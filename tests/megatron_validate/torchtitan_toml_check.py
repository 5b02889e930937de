"""Run an exported torchtitan <= 0.2.2 TOML job file through torchtitan 0.2.2's own config code, on
the CPU: ConfigManager().parse_args(["--job.config_file", FILE]) (tomllib load, merge over
JobConfig, tyro), then ParallelDims(...) with the world size (its _validate: the degrees multiply to
the world, EP/ETP against the FSDP*TP ranks), and the trainer's batch, sequence and pipeline-stage
checks recomputed from the parsed config. torchtitan 0.2.2 is the unzipped wheel at
$TORCHTITAN_022 (scripts/setup_validation_env.sh puts it in the venv), ahead of 0.3.0 on sys.path.
Reads {"toml": path, "world_size": N} (or a list) on stdin; prints {"ok": ...} (or a list).
"""

import contextlib
import io
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.environ["TORCHTITAN_022"])


def check(req: dict) -> dict:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    stage = "ConfigManager.parse_args"
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            cfg = ConfigManager().parse_args(["--job.config_file", req["toml"]])
            stage = "ParallelDims"
            p, t = cfg.parallelism, cfg.training
            world = int(req["world_size"])
            dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                                cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                                ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world)
            stage = "Trainer batch checks"
            dp = dims.dp_replicate * dims.dp_shard
            gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * dp
            assert gbs % (t.local_batch_size * dp) == 0, f"global batch {gbs} % (local {t.local_batch_size} * dp {dp})"
            div = dims.tp * (2 * dims.cp if dims.cp > 1 else 1)
            assert t.seq_len % div == 0, f"seq_len {t.seq_len} % {div} != 0"
            if dims.pp > 1:
                assert t.local_batch_size % p.pipeline_parallel_microbatch_size == 0, "local batch % pp microbatch"
                from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

                single = issubclass(get_schedule_class(p.pipeline_parallel_schedule), PipelineScheduleSingle)
                stages = len(p.module_fqns_per_model_part or [])
                per_rank = stages // dims.pp
                assert stages % dims.pp == 0, f"{stages} stages over pp {dims.pp}"
                assert (per_rank == 1) if single else (per_rank >= 2), f"{per_rank} stages per rank for " \
                    f"{p.pipeline_parallel_schedule}"
    except SystemExit as exc:
        return {"ok": False, "stage": stage, "error": f"SystemExit {exc.code}: {log.getvalue()[-800:]}"}
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}"}
    import torchtitan

    return {
        "ok": True, "torchtitan_file": torchtitan.__file__,
        "dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "cp": dims.cp, "tp": dims.tp, "pp": dims.pp,
        "ep": dims.ep, "model": [cfg.model.name, cfg.model.flavor], "converters": list(cfg.model.converters),
        "local_batch_size": t.local_batch_size, "global_batch_size": t.global_batch_size, "seq_len": t.seq_len,
        "schedule": p.pipeline_parallel_schedule, "pp_microbatch": p.pipeline_parallel_microbatch_size,
        "module_fqns_per_model_part": p.module_fqns_per_model_part, "ac_mode": cfg.activation_checkpoint.mode,
        "ac_option": cfg.activation_checkpoint.selective_ac_option,
        "fsdp_reshard_after_forward": p.fsdp_reshard_after_forward,
    }


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)
    req = json.load(sys.stdin)
    results = [check(r) for r in req] if isinstance(req, list) else check(req)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
