"""Print the calibration of the verdict rule over walk-forward periods for a stated shape (docs/analysis.md, "Verdicts over periods").

Usage: python analysis/calibrate_periods.py --seeds N [options]  (--help for options)
"""

import sys
from pathlib import Path

try:
    import tune_gems  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_gems.analysis.scripts import period_calibration_main

if __name__ == "__main__":
    sys.exit(period_calibration_main())
