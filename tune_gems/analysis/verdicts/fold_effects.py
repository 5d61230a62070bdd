"""The per-period results as a table, one row per gem and fold: the rule's own rows
(`family.DesignFamily.fold_rows`) with the validation dates and the verdict; nothing recomputed."""


from __future__ import annotations

import pandas as pd

from tune_gems.analysis.read.labels import HISTORY_NAME
from tune_gems.analysis.verdicts.walk_forward import FOLD_ROW_COLUMNS

POOLED_COLUMNS = ["pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_ci_level"]
"""The verdict table's pooled estimate, copied onto each of the gem's fold rows."""
FOLD_EFFECT_COLUMNS = (["gem", "verdict", "fold", "start", "end"] + FOLD_ROW_COLUMNS[2:] + POOLED_COLUMNS)
"""fold_effects.csv's columns (docs/results.md)."""
DATE_SEPARATOR = " / "
"""Between two different dates of one fold (experiments whose data differ)."""


def fold_dates(folds: pd.DataFrame | None) -> pd.DataFrame:
    """Per fold its validation window's first and last date (`Experiment.folds.dates`); empty without one."""
    keys = ["history", "fold"] if folds is not None and "history" in folds.columns and folds["history"].nunique() > 1 \
        else ["fold"]
    if folds is None or not len(folds):
        return pd.DataFrame(columns=[*keys, "start", "end"])

    def dates(g: pd.DataFrame, column: str) -> str:
        values = g[column].dropna() if column in g.columns else ()
        return DATE_SEPARATOR.join(dict.fromkeys(str(v) for v in values if str(v)))

    out = [{**dict(zip(keys, map(int, key if isinstance(key, tuple) else (key,)))),
            "start": dates(g, "val_first"), "end": dates(g, "val_last")}
           for key, g in folds.groupby(keys, sort=True)]
    return pd.DataFrame(out, columns=[*keys, "start", "end"])


def fold_effects_table(fold_rows: pd.DataFrame, verdicts: pd.DataFrame, dates: pd.DataFrame) -> pd.DataFrame:
    """One row per gem and fold (FOLD_EFFECT_COLUMNS): the rule's fold rows, dates and verdict."""
    if fold_rows is None or not len(fold_rows):
        return pd.DataFrame(columns=FOLD_EFFECT_COLUMNS)
    pooled = verdicts[["gem", "verdict"] + POOLED_COLUMNS]
    t = fold_rows.merge(pooled, on="gem", how="left", validate="many_to_one")
    keys = [k for k in ("history", "fold") if k in dates.columns and k in t.columns]
    t = t.merge(dates, on=keys, how="left", validate="many_to_one") if len(dates) else t.assign(start="", end="")
    t[["start", "end"]] = t[["start", "end"]].fillna("")
    histories = ["history", HISTORY_NAME] if "history" in t.columns else []
    return t[FOLD_EFFECT_COLUMNS[:2] + histories + FOLD_EFFECT_COLUMNS[2:]].reset_index(drop=True)


def pooled_estimates(table: pd.DataFrame) -> pd.DataFrame:
    """Per gem of a fold_effects table its word and pooled estimate (`gem, verdict, effect, ci_low, ci_high`): the
    verdict's, which every fold row of the gem carries (what the forest plot's diamond draws)."""
    first = table.drop_duplicates("gem")
    return pd.DataFrame({"gem": first["gem"].to_numpy(), "verdict": first["verdict"].to_numpy(),
                         "effect": first["pooled_effect"].to_numpy(float),
                         "ci_low": first["pooled_ci_low"].to_numpy(float),
                         "ci_high": first["pooled_ci_high"].to_numpy(float)})
