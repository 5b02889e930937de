"""The cost model: memory (per stage, over time) and time (compute, communication, pipeline).

Entry points: :func:`planner.cost.setup.resolve_setup` turns specs into a checked
:class:`~planner.cost.setup.Setup`; :func:`planner.cost.memory.memory_report` and
:func:`planner.cost.time.time_report` evaluate it.
"""
