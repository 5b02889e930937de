"""What a user names once: the model, the hardware, the job and the plan (pydantic specs).

Every spec forbids unknown keys and documents each field; numbers from datasheets, configs and
papers travel with their ``source``.
"""

from planner.specs.common import Sourced, Spec
from planner.specs.hardware import HardwareSpec
from planner.specs.job import Job
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

__all__ = ["Sourced", "Spec", "HardwareSpec", "Job", "ModelSpec", "Plan"]
