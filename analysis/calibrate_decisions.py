"""Print the calibration of the decision components: the fold overlap, the held-out confirmation,
several price histories and the isolation of a heterogeneous contrast (docs/analysis.md).

Usage: python analysis/calibrate_decisions.py [--n-sim 2000] [--seed 0] [--table overlap ...]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("calibrate_decisions")

if __name__ == "__main__":
    run("calibrate_decisions")
