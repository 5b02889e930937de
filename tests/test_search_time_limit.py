"""A solver that runs out of time is not 'nothing fits': the error says the time limit ran out."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.search import cpsat, driver
from planner.search.driver import Options, run_search
from planner.search.space import Limits
from planner.specs.catalog import load_hardware, load_model
from planner.specs.job import Job


def test_a_timed_out_solver_says_so(monkeypatch):
    def timed_out(tables, cap, want, time_limit_s):
        return cpsat.CpSatResult(plans=[], status="UNKNOWN", bound=None, wall_s=time_limit_s, solves=1)

    monkeypatch.setattr(driver, "enumerate_cpsat", timed_out)  # where the driver calls it
    monkeypatch.setattr(driver, "TABLE_READ_PLANS", 0)  # a space this small is otherwise read from the tables
    opts = Options(top=3, limits=Limits.parse(None, "pp=2"), per_stage=False, ties=False, families=False)
    with pytest.raises(PlannerError, match="time limit") as exc:
        run_search(load_model("llama3.1-8b"), load_hardware("h100"), Job(gpus=8, global_batch=64, seq_len=4096), opts)
    assert "--time-limit" in str(exc.value.hint) and "rule" not in str(exc.value)
