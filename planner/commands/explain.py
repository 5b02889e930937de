"""`planner explain`: one plan in depth (memory per stage and over time; time, once modeled)."""
