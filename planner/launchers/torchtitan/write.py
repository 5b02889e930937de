"""torchtitan 0.3.0 invocation: ``--module M --config F`` plus tyro overrides.

torchtitan 0.3 has no TOML job files: a job is a config_registry function
(``torchtitan/models/<module>/config_registry.py``) plus ``--<section>.<field> VALUE`` overrides
and an ``activation_checkpoint:{none|selective|full}`` subcommand (shared/reference/launchers.md §3).
Plans torchtitan cannot express are refused with every missing feature named
(:func:`planner.launchers.torchtitan.rules.plan_violations`).

Mapping (planner -> torchtitan):
- dp with sharding fsdp -> data_parallel_shard_degree = dp; zero2 -> the same with
  fsdp_reshard_after_forward never (parameters stay gathered between forward and backward, ZeRO-2);
  ddp -> data_parallel_replicate_degree = dp; hsdp:N -> dp_shard = N/cp, dp_replicate = dp/dp_shard
  (torchtitan's FSDP group is dp_shard*cp).
- the pipeline layout -> module_fqns_per_model_part (tok_embeddings, layers.i, norm, lm_head) in
  stage order, with the plan's schedule (rules.torchtitan_schedule: 1F1B, Interleaved1F1B,
  InterleavedZeroBubble, ZBVZeroBubble, DualPipeV; torchtitan places the stages of the last two
  in a V itself);
- mbs and the micro-batch count -> with PP, local_batch_size = global/dp (one optimizer step per
  local batch) split into pipeline micro-batches of pipeline_parallel_microbatch_size = mbs;
  without PP, local_batch_size = mbs and the rest is gradient accumulation;
- recompute none/full/op -> activation_checkpoint:none/full/selective (0.3's per-op SelectiveAC);
  moments=bf16 -> optimizer.implementation fused_opt_states_bf16.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from planner import __version__
from planner.launchers.checks import check_with
from planner.launchers.common import comment_text as _c
from planner.launchers.common import gpus_per_node, node_lines, prediction_lines, script_header
from planner.launchers.torchtitan.rules import (
    own_violations,
    torchtitan_batch,
    torchtitan_config_for,
    torchtitan_dims,
    torchtitan_schedule,
)


@dataclass
class TorchtitanLaunch:
    module: str
    config: str
    overrides: list[str] = field(default_factory=list)
    subcommand: str = "activation_checkpoint:none"
    nproc_per_node: int = 8
    nnodes: int = 1

    def argv(self) -> list[str]:
        """ConfigManager().parse_args argv: --module, --config, overrides, then the subcommand
        (tyro takes subcommand arguments last)."""
        return ["--module", self.module, "--config", self.config, *self.overrides, self.subcommand]


def _fqns(setup) -> list[str]:
    """--parallelism.module_fqns_per_model_part: one comma-joined list of module names per virtual
    stage, in stage order (torchtitan's tyro rule splits list[str] on commas)."""
    parts = []
    for st in setup.layout.stages:
        names = []
        if st.embedding:
            names.append("tok_embeddings")
        names += [f"layers.{i}" for i in st.layers]
        if st.loss:
            names += ["norm", "lm_head"]
        parts.append(",".join(names))
    return parts


def torchtitan_launch(setup, *, torchtitan_config: str | None = None,
                      nproc_per_node: int | None = None) -> TorchtitanLaunch:
    """All overrides for a resolved setup; raises PlanRuleError listing what torchtitan lacks."""
    check_with(own_violations, "torchtitan", setup, torchtitan_config=torchtitan_config)
    model, job, plan, deg = setup.model, setup.job, setup.plan, setup.deg
    cfg = torchtitan_config_for(model, torchtitan_config)
    assert cfg is not None, "torchtitan's rules refuse a model torchtitan has no config for"
    module, config = cfg
    dims = torchtitan_dims(plan, deg)
    local, pp_micro = torchtitan_batch(plan, deg, job, "torchtitan")
    ov = [
        "--parallelism.data_parallel_replicate_degree", str(dims["dp_replicate"]),
        "--parallelism.data_parallel_shard_degree", str(dims["dp_shard"]),
        "--parallelism.tensor_parallel_degree", str(dims["tp"]),
        "--parallelism.context_parallel_degree", str(dims["cp"]),
        "--parallelism.pipeline_parallel_degree", str(dims["pp"]),
        "--parallelism.expert_parallel_degree", str(dims["ep"] if model.is_moe else 1),
    ]
    if plan.sharding.kind == "zero2":
        ov += ["--parallelism.fsdp_reshard_after_forward", "never"]
    if plan.pp > 1:
        ov += ["--parallelism.pipeline_parallel_schedule", torchtitan_schedule(setup.schedule),
               "--parallelism.pipeline_parallel_microbatch_size", str(pp_micro),
               "--parallelism.module_fqns_per_model_part", *_fqns(setup)]
    ov += [
        "--training.local_batch_size", str(local),
        "--training.global_batch_size", str(job.global_batch),
        "--training.seq_len", str(job.seq_len),
    ]
    if plan.pp > 1 or (model.is_moe and deg.ep > 1):
        # Trainer.Config: CUDA graphs do not support PP yet, and with EP only the MinimalAsyncEP or
        # HybridEP (non-blocking) dispatchers, not the all-to-all one planner's EP plans use here.
        ov += ["--training.disable_cuda_graphs"]
    if plan.moments == "bf16":
        ov += ["--optimizer.implementation", "fused_opt_states_bf16"]
    rc = plan.recompute
    sub = {"full": "activation_checkpoint:full", "op": "activation_checkpoint:selective"}.get(rc.kind,
                                                                                           "activation_checkpoint:none")
    nproc = gpus_per_node(setup.hw, job.gpus, nproc_per_node)
    return TorchtitanLaunch(module, config, ov, sub, nproc, job.gpus // nproc)


def export_torchtitan(setup, *, predictions: dict | None = None, torchtitan_config: str | None = None,
                      nproc_per_node: int | None = None) -> str:
    """A bash script running torchtitan's trainer with the plan's overrides."""
    launch = torchtitan_launch(setup, torchtitan_config=torchtitan_config, nproc_per_node=nproc_per_node)
    lines = script_header(setup, f"torchtitan 0.3.0 launch written by planner {_c(__version__)} "
                          "(planner export --format torchtitan).", setup.plan.to_string(), [])
    lines += [
        f"# config_registry function: {_c(launch.module)}.{_c(launch.config)} (its model, optimizer and data settings "
        "apply; the overrides below set the parallel layout and batch).",
    ]
    lines += [f"# predicted: {_c(ln)}" for ln in prediction_lines(predictions or {})]
    lines += node_lines(launch.nnodes, 29500)
    lines += [
        f"torchrun --nproc-per-node {launch.nproc_per_node} --nnodes \"$NNODES\" --node-rank \"$NODE_RANK\" \\",
        "    --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" \\",
        "    -m torchtitan.train \\",
    ]
    args = launch.argv()
    chunks: list[str] = []
    for a in args:
        if a.startswith("--") or a.startswith("activation_checkpoint:") or not chunks:
            chunks.append(shlex.quote(a))
        else:
            chunks[-1] += " " + shlex.quote(a)
    lines += [f"    {c} \\" for c in chunks[:-1]] + [f"    {chunks[-1]}", ""]
    return "\n".join(lines)
