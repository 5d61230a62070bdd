"""Print the calibration of the verdict rule (null false-positive rate, power).

Usage: python analysis/calibrate.py EXPERIMENT_DIR [EXPERIMENT_DIR ...] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("calibrate")

if __name__ == "__main__":
    run("calibrate")
