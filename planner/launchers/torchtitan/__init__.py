"""torchtitan 0.3.0: the ``--module/--config`` invocation planner writes, and the checks torchtitan
runs at start-up."""
