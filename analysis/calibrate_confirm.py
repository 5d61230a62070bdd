"""Print the calibration of `tune-gems confirm` on one price history (docs/analysis.md, "Confirmation power").

Usage: python analysis/calibrate_confirm.py [--n-sim 2000] [--dist normal|t3] [--confirm-seeds 16] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("calibrate_confirm")

if __name__ == "__main__":
    run("calibrate_confirm")
