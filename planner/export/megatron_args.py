"""The documented import path of the Megatron reader; it lives in planner.launchers.megatron.read."""

from planner.launchers.megatron.read import job_from_script, plan_from_megatron_args

__all__ = ["job_from_script", "plan_from_megatron_args"]
