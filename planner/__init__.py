"""planner: parallelism-plan search for training large transformers on GPU clusters.

Folders by concept: ``specs`` (what the user names: model, hardware, job, plan),
``cost`` (the memory and time models), ``search`` (CP-SAT and the exhaustive oracle),
``export`` (launchers), ``report`` (tables and plots), ``cli`` (thin typer commands).
"""

__version__ = "0.1.0"
