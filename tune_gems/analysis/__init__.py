"""Analysis of finished sweeps: reads result files only (docs/results.md), never the trainer, the
sweep or the model, and runs where neither torch nor Ray is installed.

Read it in the order it runs (`analyze.py` is the table of contents): `read/` the experiment
folders as tables, `pairs/` the designed comparisons, `rules/` the verdict rule, `verdicts/` the
rule applied to every gem, factor and period, `describe/` the descriptive tables, `render/`
report.md and the plots; beside them `calibrate/` (the rule's error rates and power, by
simulation), `plan.py` (the next design from a pilot), `cli.py` (the command line) and, on the
bottom floor, `defaults.py` and `text.py`. Every step is a function of DataFrames, imported from
the module that defines it; docs/analysis.md explains the statistics and the verdict rules.
"""
