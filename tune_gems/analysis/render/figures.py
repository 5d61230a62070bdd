"""Every plot of an analysis and the tables they are drawn from: what `write_result` writes.

`plot_tables` computes the tables (tune_gems.analysis.render.plot_tables; written as CSV even with
--no-plots: they are numbers), `analysis_figures` draws every figure from them and from the
analysis's own tables: the lead plots of report.md (tune_gems.analysis.render.plot_index) and the
figures of its sections. A confirmation folder (`tune-gems confirm`'s output, read by
`tune-gems analyze EXP/confirmation`) adds the shrinkage plot from its confirmation.csv.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from tune_gems.analysis import defaults

from tune_gems.analysis.render import plots
from tune_gems.analysis.describe.objective import searched_mode
from tune_gems.analysis.pairs.pairing import build_cells
from tune_gems.analysis.verdicts.fold_effects import pooled_estimates
from tune_gems.analysis.render.fold_forest import fold_forest
from tune_gems.analysis.render.plot_index import (
    FOLD_FOREST, IMPROVEMENT, LEARNING_CURVES, PAIRED_SEEDS, PERFORMANCE_PROFILES, SHRINKAGE,
)
from tune_gems.analysis.render.plot_tables import (
    improvement_table, learning_curve_table, paired_seed_table, performance_profile_table,
)
from tune_gems.analysis.render.profile_plots import improvement_bars, performance_profiles
from tune_gems.analysis.render.seed_plots import learning_curves, paired_seeds
from tune_gems.analysis.render.shrinkage_plot import confirmation_shrinkage
from tune_gems.analysis.describe.variance import final_members

PAIRED_SEEDS_CSV = "paired_seeds.csv"
LEARNING_CURVES_CSV = "learning_curves.csv"
PROFILES_CSV = "performance_profiles.csv"
IMPROVEMENT_CSV = "probability_of_improvement.csv"
CONFIRMATION_TABLE = "confirmation.csv"
"""The side-by-side table a confirmation folder holds (tune_gems.commands.confirm.TABLE_FILE)."""


def plot_tables(result: Any) -> dict[str, pd.DataFrame]:
    """{CSV name: table} of the lead plots for an `AnalysisResult` (its experiment and settings)."""
    exp, s = result.experiment, result.settings
    last_k = s.get("last_k", defaults.LAST_K)
    cells = build_cells(exp.trials, exp.members, exp.arms)
    pairs = paired_seed_table(cells, list(exp.gems), exp.members, last_k=last_k,
                              placebo_weight=s.get("placebo_weight", defaults.PLACEBO_WEIGHT))
    return {
        PAIRED_SEEDS_CSV: pairs,
        LEARNING_CURVES_CSV: learning_curve_table(exp.members),
        PROFILES_CSV: performance_profile_table(pairs),
        IMPROVEMENT_CSV: improvement_table(pairs),
    }


def trial_order(trials: pd.DataFrame, mode: str = "max") -> list[tuple[str, str]]:
    """(experiment, trial_id) by objective, best first (`mode` of the search); no objective last."""
    if not len(trials):
        return []
    value = pd.to_numeric(trials.get("objective", pd.Series(float("nan"), index=trials.index)), errors="coerce")
    t = trials.assign(_none=value.isna(), _key=(-value if mode == "max" else value).fillna(0.0))
    t = t.sort_values(["_none", "_key", "experiment", "trial_id"], kind="stable")
    return list(zip(t["experiment"].astype(str), t["trial_id"].astype(str)))


def trial_titles(trials: pd.DataFrame) -> dict[tuple[str, str], str]:
    """`trial <id> (objective <v>)` per (experiment, trial_id), the objective where it has one."""
    out = {}
    for e, t, v in zip(trials["experiment"].astype(str), trials["trial_id"].astype(str),
                       pd.to_numeric(trials.get("objective", pd.Series(float("nan"), index=trials.index)), errors="coerce")):
        out[(e, t)] = f"trial {t}" + (f" (objective {v:.3f})" if pd.notna(v) else "")
    return out


def confirmation_table(paths: list[Path]) -> pd.DataFrame | None:
    """A confirmation folder's confirmation.csv (one folder analysed), or None."""
    if len(paths) != 1 or not (Path(paths[0]) / CONFIRMATION_TABLE).is_file():
        return None
    try:
        return pd.read_csv(Path(paths[0]) / CONFIRMATION_TABLE)
    except (OSError, ValueError, pd.errors.ParserError):
        return None


def analysis_figures(result: Any, tables: dict[str, pd.DataFrame]) -> dict[tuple[str, str], Figure | None]:
    """{(title, PNG name): figure} of every plot (None: nothing to draw): the lead plots first."""
    exp, s = result.experiment, result.settings
    last_k = s.get("last_k", defaults.LAST_K)
    pairs = tables[PAIRED_SEEDS_CSV]
    metric = str(pairs["metric"].iloc[0]) if len(pairs) else defaults.METRIC
    mode = searched_mode(exp.paths[0]) if len(exp.paths) == 1 else "max"
    final = final_members(exp.members, exp.trials)
    folds = getattr(result, "fold_effects", None)
    return {
        (FOLD_FOREST.title, FOLD_FOREST.file): fold_forest(folds, pooled_estimates(folds) if folds is not None else None, metric=metric,
                                                           rope=s.get("rope", defaults.ROPE)),
        (PAIRED_SEEDS.title, PAIRED_SEEDS.file): paired_seeds(pairs, last_k),
        (LEARNING_CURVES.title, LEARNING_CURVES.file): learning_curves(tables[LEARNING_CURVES_CSV],
                                                                       trial_order(exp.trials, mode),
                                                                       trial_titles(exp.trials)),
        (PERFORMANCE_PROFILES.title, PERFORMANCE_PROFILES.file): performance_profiles(tables[PROFILES_CSV], metric,
                                                                                      last_k),
        (IMPROVEMENT.title, IMPROVEMENT.file): improvement_bars(tables[IMPROVEMENT_CSV]),
        (SHRINKAGE.title, SHRINKAGE.file): confirmation_shrinkage(confirmation_table(list(exp.paths))),
        ("Gem effects", plots.FOREST_PNG): plots.forest(result.verdicts, result.placebo),
        ("Sharpe distributions", plots.SHARPE_PNG): plots.sharpe_distributions(final[final["included"]]),
        ("Gem magnitudes", plots.MAGNITUDES_PNG): plots.gem_magnitude_curves(
            result.gem_trajectories, s.get("rel_threshold", defaults.REL_THRESHOLD), exp.gems),
        ("Parameter importances", plots.IMPORTANCES_PNG): plots.importance_bars(result.importances),
    }
