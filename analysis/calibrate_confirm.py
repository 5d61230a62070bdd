"""Print the calibration of `tune-gems confirm` on one price history (docs/analysis.md, "Confirmation power").

Usage: python analysis/calibrate_confirm.py [--n-sim 2000] [--dist normal|t3] [--confirm-seeds 16]
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

try:
    import tune_gems  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_gems.analysis.calibrate.one_history_calibration import OneHistoryShape, format_one_history, one_history_table

if __name__ == "__main__":
    p = argparse.ArgumentParser(description="Calibrate the confirmation's final gate on one price history.")
    p.add_argument("--n-sim", type=int, default=2000, help="simulated searches per row (default 2000)")
    p.add_argument("--dist", choices=("normal", "t3"), default="normal", help="seed-noise distribution")
    p.add_argument("--confirm-seeds", type=int, default=16, help="fresh seeds of the confirmation (default 16)")
    a = p.parse_args()
    if a.n_sim < 100 or a.confirm_seeds < 2:
        print("error: --n-sim must be at least 100 and --confirm-seeds at least 2", file=sys.stderr)
        sys.exit(2)
    table = one_history_table(replace(OneHistoryShape(), confirm_seeds=a.confirm_seeds), n_sim=a.n_sim, dist=a.dist)
    print(format_one_history(table))
