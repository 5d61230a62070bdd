"""Print the calibration of the factor table: gems and factors judged as one family (docs/analysis.md, "Factors").

Usage: python analysis/calibrate_factors.py [--gems 3] [--factors 3] [--seeds 16] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("calibrate_factors")

if __name__ == "__main__":
    run("calibrate_factors")
