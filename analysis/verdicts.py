"""Print the verdict per gem (keep wired / harmful / equivalent / inconclusive / delete) with its evidence.

Usage: python analysis/verdicts.py EXPERIMENT_DIR [EXPERIMENT_DIR ...] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("verdicts")

if __name__ == "__main__":
    run("verdicts")
