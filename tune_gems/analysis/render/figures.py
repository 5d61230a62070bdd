"""Every plot of an analysis: title, file, caption, source table and what `write_result` writes;
report.md opens with `LEAD_PLOTS`, first the final verdicts with their deciding intervals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from tune_gems.analysis import defaults
from tune_gems.analysis.describe.objective import searched_mode
from tune_gems.analysis.describe.variance import final_members
from tune_gems.analysis.read.labels import history_names, with_history_names
from tune_gems.analysis.render import plots
from tune_gems.analysis.render.plot_tables import (final_verdict_table, improvement_table, learning_curve_table,
                                                   paired_seed_table, performance_profile_table)
from tune_gems.analysis.verdicts.fold_effects import pooled_estimates

FINAL_VERDICTS_CSV = "final_verdicts.csv"
PAIRED_SEEDS_CSV = "paired_seeds.csv"
LEARNING_CURVES_CSV = "learning_curves.csv"
PROFILES_CSV = "performance_profiles.csv"
IMPROVEMENT_CSV = "probability_of_improvement.csv"
CONFIRMATION_TABLE = "confirmation.csv"
"""The side-by-side table a confirmation folder holds (tune_gems.commands.confirm.TABLE_FILE)."""


@dataclass(frozen=True)
class Plot:
    title: str
    file: str
    caption: str


FINAL_VERDICTS = Plot("Final verdicts", plots.FOREST_PNG,
                      "the decisive picture: one row per contrast with its final word, the estimate and interval of "
                      "the test that decided it (pooled over the walk-forward periods where the period rule decided, "
                      "else over seeds, family-wise) and, below it, the held-out test segment's re-estimate, shown and "
                      "never decided on; the ROPE band (`final_verdicts.csv`)")
FOLD_FOREST = Plot("Effect per fold", "fold_forest.png",
                   "per gem, each walk-forward fold's effect with the interval the period rule read, the pooled "
                   "estimate and interval the verdict used as a diamond, the ROPE band (`fold_effects.csv`)")
PAIRED_SEEDS = Plot("Seed pairs", "paired_seeds.png",
                    "each seed pair of a gem's verdict comparison, one line from the measured to the wired member, "
                    "coloured by fold (`paired_seeds.csv`): flat lines are ties, a fan of crossing lines is noise")
LEARNING_CURVES = Plot("Learning curves", "learning_curves.png",
                       "the verdict metric per epoch and arm, median over seeds with the interquartile range "
                       "(`learning_curves.csv`; the best trials by objective)")
PERFORMANCE_PROFILES = Plot("Performance profiles", "performance_profiles.png",
                            "per gem, the share of seeds above each threshold, measured and wired "
                            "(`performance_profiles.csv`)")
IMPROVEMENT = Plot("Probability of improvement", "probability_of_improvement.png",
                   "P(wired > measured) over the seed pairs, ties half, averaged over folds "
                   "(`probability_of_improvement.csv`): a description, the verdict is the test")
SHRINKAGE = Plot("Confirmation shrinkage", "confirmation_shrinkage.png",
                 "per gem, the search's gain of its chosen trial against the same statistic on the confirmation's "
                 "fresh seeds (and fresh paths where the data are synthetic per-seed paths; else the search's price "
                 "history) (`confirmation.csv`)")
LEAD_PLOTS = (FINAL_VERDICTS, FOLD_FOREST, PAIRED_SEEDS, LEARNING_CURVES, PERFORMANCE_PROFILES, IMPROVEMENT, SHRINKAGE)
"""The plots report.md opens with, in this order (those there was something to draw for)."""


def lead_section(images: dict[str, str]) -> list[str]:
    """report.md's opening section: each lead plot that was drawn (`images`: title -> file),
    with its caption; nothing when none was."""
    drawn = [p for p in LEAD_PLOTS if p.title in images]
    if not drawn:
        return []
    lines = ["## Plots first"]
    for p in drawn:
        lines += ["", f"**{p.title}**: {p.caption}.", "", f"![{p.title}]({images[p.title]})"]
    return lines


def plot_tables(result: Any) -> dict[str, pd.DataFrame]:
    """{CSV name: table} of the lead plots for an `AnalysisResult` (its experiment and settings);
    a table with a `history` column names it beside (`history_name`)."""
    exp = result.experiment
    names = history_names(exp.histories)
    pairs = with_history_names(paired_seed_table(result.family), names)
    return {FINAL_VERDICTS_CSV: final_verdict_table(result.verdicts, getattr(result, "placebo", None)),
            PAIRED_SEEDS_CSV: pairs, LEARNING_CURVES_CSV: with_history_names(learning_curve_table(exp.members), names),
            PROFILES_CSV: performance_profile_table(pairs), IMPROVEMENT_CSV: improvement_table(pairs)}


def trial_titles(trials: pd.DataFrame, mode: str = "max") -> dict[tuple[str, str], str]:
    """`trial <id> (objective <v>)` per (experiment, trial_id), best objective first (`mode` of the
    search), trials without one last."""
    if not len(trials):
        return {}
    value = pd.to_numeric(trials.get("objective", pd.Series(float("nan"), index=trials.index)), errors="coerce")
    t = trials.assign(_v=value, _none=value.isna(), _key=(-value if mode == "max" else value).fillna(0.0))
    t = t.sort_values(["_none", "_key", "experiment", "trial_id"], kind="stable")
    return {(str(e), str(i)): f"trial {i}" + (f" (objective {v:.3f})" if pd.notna(v) else "")
            for e, i, v in zip(t["experiment"], t["trial_id"], t["_v"])}


def confirmation_table(paths: list[Path]) -> pd.DataFrame | None:
    """A confirmation folder's confirmation.csv (one folder analysed), or None."""
    if len(paths) != 1 or not (Path(paths[0]) / CONFIRMATION_TABLE).is_file():
        return None
    try:
        return pd.read_csv(Path(paths[0]) / CONFIRMATION_TABLE)
    except (OSError, ValueError, pd.errors.ParserError):
        return None


def confirmation_data(trials: pd.DataFrame) -> str:
    """What a confirmation's trials re-ran on: fresh seeds and paths on synthetic per-seed paths, else
    fresh seeds on the search's price history."""
    source = trials.get("data.source", pd.Series("synthetic", index=trials.index)).astype(str)
    paths = trials.get("data.synthetic.paths", pd.Series("shared", index=trials.index)).astype(str)
    per_seed = len(trials) and bool(((source == "synthetic") & (paths == "per_seed")).all())
    return plots.FRESH_SEEDS_AND_PATHS if per_seed else plots.FRESH_SEEDS


def analysis_figures(result: Any, tables: dict[str, pd.DataFrame]) -> dict[tuple[str, str], Figure | None]:
    """{(title, PNG name): figure} of every plot (None: nothing to draw): the lead plots first."""
    exp, s = result.experiment, result.settings
    # the axis says "mean of the last k epochs" only where that is the verdict's window
    last_k = s.get("last_k", defaults.LAST_K) if s.get("window", defaults.WINDOW) == "last-k" else None
    pairs = tables[PAIRED_SEEDS_CSV]
    metric = str(pairs["metric"].iloc[0]) if len(pairs) else defaults.METRIC
    mode = searched_mode(exp.paths[0]) if len(exp.paths) == 1 else "max"
    final = final_members(exp.members, exp.trials)
    folds = getattr(result, "fold_effects", None)
    return {
        (FINAL_VERDICTS.title, FINAL_VERDICTS.file): plots.final_verdicts(tables[FINAL_VERDICTS_CSV]),
        (FOLD_FOREST.title, FOLD_FOREST.file): plots.fold_forest(
            folds, pooled_estimates(folds) if folds is not None else None, metric=metric,
            rope=s.get("rope", defaults.ROPE)),
        (PAIRED_SEEDS.title, PAIRED_SEEDS.file): plots.paired_seeds(pairs, last_k),
        (LEARNING_CURVES.title, LEARNING_CURVES.file): plots.learning_curves(
            tables[LEARNING_CURVES_CSV], trial_titles(exp.trials, mode)),
        (PERFORMANCE_PROFILES.title, PERFORMANCE_PROFILES.file): plots.performance_profiles(
            tables[PROFILES_CSV], metric, last_k),
        (IMPROVEMENT.title, IMPROVEMENT.file): plots.improvement_bars(tables[IMPROVEMENT_CSV]),
        (SHRINKAGE.title, SHRINKAGE.file): plots.confirmation_shrinkage(confirmation_table(list(exp.paths)),
                                                                        confirmation_data(exp.trials)),
        ("Sharpe distributions", plots.SHARPE_PNG): plots.sharpe_distributions(
            with_history_names(final[final["included"]], history_names(exp.histories))),
        ("Gem magnitudes", plots.MAGNITUDES_PNG): plots.gem_magnitude_curves(
            result.gem_trajectories, s.get("rel_threshold", defaults.REL_THRESHOLD), exp.gems),
        ("Parameter importances", plots.IMPORTANCES_PNG): plots.importance_bars(result.importances),
    }
