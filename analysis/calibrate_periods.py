"""Print the calibration of the verdict rule over walk-forward periods for a stated shape (docs/analysis.md, "Verdicts over periods").

Usage: python analysis/calibrate_periods.py --seeds N [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("calibrate_periods")

if __name__ == "__main__":
    run("calibrate_periods")
