"""Plan search: the plan space and its integer cost tables (space.py, tables.py), the CP-SAT
model (cpsat.py), the exhaustive oracle over the same tables (exhaustive.py), and the driver that
ranks plans and explains infeasibility (driver.py)."""
