"""Independent searches side by side, one forked process each.

`planner compare` searches one job per system and `validate --search` one search per published
run; the searches share nothing, so on a machine with several cores they run at once. The workers
are forked (POSIX): they read the caller's inputs from its memory, nothing is pickled on the way
in, and each sends back its result (plain data). Results come back in the order of the inputs,
the same as one process computes them (each search is deterministic on its own), so the reports
do not depend on how many processes ran them. Where fork is not available, everything runs in
this process, one after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from planner.errors import PlannerError

T = TypeVar("T")

_TASK: list = []
"""The function the forked workers of the running :func:`fork_map` call (set before they fork)."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    import multiprocessing  # noqa: PLC0415  # only where several workers are asked for

    return "fork" in multiprocessing.get_all_start_methods()


def auto_jobs(tasks: int) -> int:
    """The default number of workers: one per task, at most one per usable CPU."""
    return max(1, min(tasks, usable_cpus()))


def fork_map(fn: Callable[[int], T], n: int, jobs: int,
             done: Callable[[int, T], None] | None = None) -> list[T]:
    """``[fn(0), ..., fn(n - 1)]``, with ``jobs`` worker processes when more than one (``fn`` may be
    a closure: the workers are forked after it is set). ``done(i, result)`` runs in this process as
    each result arrives, in order. An exception in a worker is raised here."""
    jobs = max(1, min(int(jobs), n))
    out: list[T] = []
    if jobs == 1 or not can_fork():
        for i in range(n):
            out.append(fn(i))
            if done is not None:
                done(i, out[-1])
        return out
    import multiprocessing  # noqa: PLC0415
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415
    from concurrent.futures.process import BrokenProcessPool  # noqa: PLC0415

    _TASK[:] = [fn]
    try:
        # concurrent.futures, not multiprocessing.Pool: a worker that dies (the kernel's OOM killer)
        # breaks the executor, which says so, where a Pool would wait for its task forever.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_own_streams) as pool:
            for i, result in enumerate(pool.map(_call, range(n))):
                out.append(result)
                if done is not None:
                    done(i, result)
    except BrokenProcessPool as exc:
        raise PlannerError(
            f"A worker process of the {n} searches run side by side ended without a result (killed: most often "
            "the machine ran out of memory with several large searches at once).",
            hint="Run fewer side by side with --jobs (--jobs 1 runs them one after another in this process).",
        ) from exc
    finally:
        _TASK.clear()
    return out


def _call(i: int):
    return _TASK[0](i)


def _own_streams() -> None:
    """A worker's stdout and stderr as new objects on the same descriptors: a thread of the parent
    (a progress spinner) may have held the old ones' locks at the fork, and a fork copies a held
    lock held, so a warning written through them could wait forever."""
    import sys  # noqa: PLC0415

    sys.stdout = open(os.dup(1), "w", buffering=1, encoding=sys.stdout.encoding, errors="replace")  # noqa: SIM115
    sys.stderr = open(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding, errors="replace")  # noqa: SIM115
