"""planner.parallel: searches side by side in forked workers give what one process gives, in the
same order; compare's output does not depend on --jobs."""

from __future__ import annotations

import os

import pytest

from planner.cli import main
from planner.parallel import auto_jobs, can_fork, fork_map, usable_cpus

needs_fork = pytest.mark.skipif(not can_fork(), reason="fork is not available here")


@needs_fork
def test_workers_return_in_order_what_one_process_returns():
    data = [3, 1, 4, 1, 5, 9, 2, 6]
    seen: list[tuple[int, tuple]] = []
    # A closure over this frame's data: the workers are forked after it is set, nothing is pickled in.
    got = fork_map(lambda i: (data[i] ** 2, os.getpid()), len(data), 3, lambda i, r: seen.append((i, r)))
    assert [r[0] for r in got] == [x * x for x in data]
    assert [i for i, _ in seen] == list(range(len(data)))  # done() runs here, in order
    assert {pid for _, pid in got} - {os.getpid()}  # and the work ran in other processes
    serial = fork_map(lambda i: data[i] ** 2, len(data), 1)
    assert serial == [r[0] for r in got]


@needs_fork
def test_a_worker_error_is_raised_here():
    def fail(i: int) -> int:
        if i == 2:
            raise ValueError("worker 2")
        return i

    with pytest.raises(ValueError, match="worker 2"):
        fork_map(fail, 4, 2)


@needs_fork
def test_a_worker_killed_is_a_clear_error_not_a_hang():
    from planner.errors import PlannerError

    def die(i: int) -> int:
        if i == 1:
            os.kill(os.getpid(), 9)  # as the OOM killer ends a worker
        return i

    with pytest.raises(PlannerError, match="ended without a result.*--jobs"):
        fork_map(die, 3, 2)


def test_default_workers_are_one_per_search_at_most_one_per_cpu():
    assert auto_jobs(1) == 1
    assert auto_jobs(1000) == usable_cpus()
    assert fork_map(lambda i: i, 0, 4) == []


@needs_fork
@pytest.mark.slow  # 2 s; test_workers_return_in_order_what_one_process_returns checks the same rule
def test_compare_is_the_same_for_any_number_of_workers(capsys):
    args = ["compare", "--model", "llama3.1-8b", "--hw", "h100", "--hw", "b200", "--gpus", "8", "--seq-len",
            "4096", "--max", "pp=1,cp=1,tp=2", "--top", "1", "--json"]
    outs = []
    for jobs in ("1", "2"):
        assert main([*args, "--jobs", jobs]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    assert '"status": "ok"' in outs[0]
