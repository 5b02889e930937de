"""The parts of :class:`planner.cost.compose.Costs`, one module each (see compose)."""
