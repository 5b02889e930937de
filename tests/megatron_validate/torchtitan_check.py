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
    }


if __name__ == "__main__":
    main()
