"""Analysis of finished sweeps: reads result files only (docs/results.md), never the trainer, sweep
or model, and runs without torch or Ray. Read it in the order it runs, `analyze.py` being the table
of contents; every step is a function of DataFrames (docs/analysis.md: the statistics and rules)."""
