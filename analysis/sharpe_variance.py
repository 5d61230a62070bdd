"""Print Sharpe variance per configuration across trials and seeds.

Usage: python analysis/sharpe_variance.py EXPERIMENT_DIR [EXPERIMENT_DIR ...] [options]  (--help for options)
"""

from _door import run  # this script's door, tune_gems.analysis.cli.main("sharpe_variance")

if __name__ == "__main__":
    run("sharpe_variance")
