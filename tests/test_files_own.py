"""planner never writes over a file the command read, except its own committed data (the validation
report the tie resolution reads), which `planner results` regenerates after its searches read it."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.files import check_output, read_text, reset_inputs


def test_a_users_input_is_never_written_but_planners_own_report_may_be(tmp_path):
    reset_inputs()
    user, own = tmp_path / "user.json", tmp_path / "own.json"
    user.write_text("{}")
    own.write_text("{}")
    read_text(user, "plans")
    read_text(own, "validation report", own=True)
    with pytest.raises(PlannerError, match="read"):
        check_output(user, "report")
    assert check_output(own, "report") == own
    reset_inputs()
