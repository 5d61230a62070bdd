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
    "param_importances": "tune_gems.analysis.describe.importance",
    "context_label": "tune_gems.analysis.read.labels",
    "trial_gem_modes": "tune_gems.analysis.read.labels",
    "Experiment": "tune_gems.analysis.read.load",
    "load_experiment": "tune_gems.analysis.read.load",
    "gem_history": "tune_gems.analysis.describe.magnitudes",
    "gem_magnitudes": "tune_gems.analysis.describe.magnitudes",
    "gem_trajectories": "tune_gems.analysis.describe.magnitudes",
    "format_verdict_table": "tune_gems.analysis.render.report",
    "markdown_table": "tune_gems.analysis.render.report",
    "AnalysisResult": "tune_gems.analysis.analyze",
    "analyze": "tune_gems.analysis.analyze",
    "default_out_dir": "tune_gems.analysis.analyze",
    "run_analysis": "tune_gems.analysis.analyze",
    "write_result": "tune_gems.analysis.analyze",
    "final_members": "tune_gems.analysis.describe.variance",
    "sharpe_variance": "tune_gems.analysis.describe.variance",
    "trial_outcomes": "tune_gems.analysis.describe.variance",
    "iqm": "tune_gems.analysis.describe.descriptive",
    "stratified_bootstrap_ci": "tune_gems.analysis.describe.descriptive",
    "VERDICTS": "tune_gems.analysis.rules.words",
    "Thresholds": "tune_gems.analysis.rules.thresholds",
    "gem_verdicts": "tune_gems.analysis.verdicts.gem_verdicts",
    "placebo_verdicts": "tune_gems.analysis.verdicts.gem_verdicts",
    "build_cells": "tune_gems.analysis.pairs.pairing",
    "paired": "tune_gems.analysis.pairs.pairing",
    "rank_test": "tune_gems.stats.inference",
    "holm": "tune_gems.stats.inference",
    "redundancy_table": "tune_gems.analysis.verdicts.redundancy",
    "Shape": "tune_gems.analysis.calibrate.calibration",
    "calibration_table": "tune_gems.analysis.calibrate.calibration",
    "null_rate": "tune_gems.analysis.calibrate.calibration",
    "power": "tune_gems.analysis.calibrate.calibration",
    "market_noise_interval": "tune_gems.analysis.verdicts.market_noise",
    "MarketNoiseInterval": "tune_gems.analysis.verdicts.market_noise",
    "market_evidence": "tune_gems.analysis.verdicts.verdict_market_noise",
    "read_eval_returns": "tune_gems.analysis.verdicts.verdict_market_noise",
    "EvalReturnsLookup": "tune_gems.analysis.verdicts.verdict_market_noise",
}


def __getattr__(name: str):
    """Import on first use: the CLI builds its parser from this package without paying for
    pandas, scipy, matplotlib and Optuna until an analysis actually runs."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
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
    "Thresholds",
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
