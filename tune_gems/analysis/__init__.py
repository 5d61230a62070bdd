"""Analysis of finished sweeps: Sharpe variance, gem magnitudes, verdicts, importances.

Reads result files only (docs/results.md); never imports the trainer, sweep or model. Every
function takes DataFrames and returns DataFrames, so a notebook can use any step alone:

    from tune_gems.analysis import load_experiment, sharpe_variance, gem_verdicts
    exp = load_experiment(["runs/sweep_a", "runs/sweep_b"])
    sharpe_variance(exp.members, exp.trials)
    res = analyze(exp)                       # every table: res.verdicts, res.placebo, res.redundancy
    calibration_table([Shape("g12", n=16)])  # the verdict rule's false-positive rate and power

`run_analysis(paths, out_dir)` runs everything and writes the CSVs, PNGs and report.md.
See docs/analysis.md for the statistics and the verdict rules.
"""

import importlib

_EXPORTS = {
    "param_importances": "importance",
    "context_label": "labels",
    "trial_gem_modes": "labels",
    "Experiment": "load",
    "load_experiment": "load",
    "gem_history": "magnitudes",
    "gem_magnitudes": "magnitudes",
    "gem_trajectories": "magnitudes",
    "format_verdict_table": "report",
    "markdown_table": "report",
    "AnalysisResult": "run",
    "analyze": "run",
    "default_out_dir": "run",
    "run_analysis": "run",
    "write_result": "run",
    "final_members": "variance",
    "sharpe_variance": "variance",
    "trial_outcomes": "variance",
    "iqm": "stats",
    "stratified_bootstrap_ci": "stats",
    "VERDICTS": "verdicts",
    "gem_verdicts": "verdicts",
    "placebo_verdicts": "verdicts",
    "build_cells": "designs",
    "paired": "designs",
    "rank_test": "inference",
    "holm": "inference",
    "redundancy_table": "redundancy",
    "Shape": "calibration",
    "calibration_table": "calibration",
    "null_rate": "calibration",
    "power": "calibration",
    "market_noise_interval": "market_noise",
    "MarketNoiseInterval": "market_noise",
    "market_evidence": "market_evidence",
    "read_eval_returns": "market_evidence",
    "EvalReturnsLookup": "market_evidence",
}


def __getattr__(name: str):
    """Import on first use: the CLI builds its parser from this package without paying for
    pandas, scipy, matplotlib and Optuna until an analysis actually runs."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"tune_gems.analysis.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'tune_gems.analysis' has no attribute {name!r}")


__all__ = [
    "Shape",
    "build_cells",
    "calibration_table",
    "holm",
    "null_rate",
    "paired",
    "placebo_verdicts",
    "power",
    "rank_test",
    "redundancy_table",
    "AnalysisResult",
    "Experiment",
    "VERDICTS",
    "analyze",
    "context_label",
    "default_out_dir",
    "final_members",
    "format_verdict_table",
    "gem_history",
    "gem_magnitudes",
    "gem_trajectories",
    "gem_verdicts",
    "iqm",
    "load_experiment",
    "markdown_table",
    "param_importances",
    "run_analysis",
    "sharpe_variance",
    "stratified_bootstrap_ci",
    "trial_gem_modes",
    "trial_outcomes",
    "write_result",
    "market_noise_interval",
    "MarketNoiseInterval",
    "market_evidence",
    "read_eval_returns",
    "EvalReturnsLookup",
]
