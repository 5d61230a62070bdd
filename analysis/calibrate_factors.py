"""Print the calibration of the factor table: gems and factors judged as one family (docs/analysis.md, "Factors").

Usage: python analysis/calibrate_factors.py [--gems 3] [--factors 3] [--seeds 16] [options]  (--help for options)
"""

import sys
from pathlib import Path

try:
    import tune_gems  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_gems.analysis.calibrate.factor_calibration import main

if __name__ == "__main__":
    sys.exit(main())
