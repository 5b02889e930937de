"""planner: parallelism-plan search for training large transformers on GPU clusters.

Folders by concept: ``specs`` (what the user names: model, hardware, job, plan),
``cost`` (the memory and time models), ``search`` (CP-SAT and the exhaustive oracle),
``export`` (launchers), ``report`` (tables and plots), ``cli`` (thin typer commands).
"""

import os as _os

# The cost tables multiply many small matrices: multithreaded BLAS only adds contention on small
# machines (measured ~100x slower on 2 busy cores), so planner runs single-threaded BLAS unless
# the user says otherwise.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

__version__ = "0.1.0"
