"""Full analysis of finished sweep(s): CSVs, PNGs, report.md; prints the verdicts.

Usage: python analysis/report.py EXPERIMENT_DIR [EXPERIMENT_DIR ...] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("report")

if __name__ == "__main__":
    run("report")
