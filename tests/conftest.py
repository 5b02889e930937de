import os
import sys
from pathlib import Path

# As the planner program does (planner.cli.entry): single-threaded BLAS for the many small matrix
# products of the cost tables, set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Test helpers (calibration_rows) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
