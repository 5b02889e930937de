import sys
from pathlib import Path

# Test helpers (calibration_rows) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
