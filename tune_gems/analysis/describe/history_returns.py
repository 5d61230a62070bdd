"""How much a run's price histories move together: each pair's daily return correlation per window
(`history_correlations.csv`), beside the calendar part `rules.histories` estimates; a `note` says
when a price file is not found (also looked for beside the experiment)."""


from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import DataError
from tune_gems.data.series import load_prices

CORRELATION_COLUMNS = ["experiment", "segment", "fold", "first", "last", "rows", "history_a", "history_b", "name_a",
                       "name_b", "correlation", "note"]
"""history_correlations.csv: one row per experiment, window (the validation window of `fold`, or the
test segment) and pair of histories: the window's first and last timestamp (rows without a time
column) and row count, the Pearson correlation of the two histories' daily log returns in it."""


def _find(source: str, folder: Path) -> Path | None:
    """The price file as the run named it, else beside the experiment or up to three folders above."""
    p = Path(source)
    if p.is_file():
        return p
    if not p.is_absolute():
        for base in [folder, *list(folder.resolve().parents)[:3]]:
            if (base / p).is_file():
                return base / p
    return None


def _log_returns(path: Path | None, column: str) -> tuple[np.ndarray, pd.Index] | str:
    if path is None:
        return "price file not found"
    try:
        s = load_prices(path, column)
    except DataError as e:
        return str(e)
    return np.diff(np.log(s.to_numpy(float))), s.index


def _windows(folds: pd.DataFrame) -> list[tuple[str, int | None, int, int, str, str]]:
    """(segment, fold, start, end, first, last) of each validation window and of the test segment."""
    out, first = [], folds.sort_values("fold").iloc[0]
    for _, r in folds.sort_values("fold").iterrows():
        out.append(("validation", int(r["fold"]), int(r["val_start"]), int(r["val_end"]), r.get("val_first"),
                    r.get("val_last")))
    out.append(("test", None, int(first["test_start"]), int(first["test_end"]), first.get("test_first"),
                first.get("test_last")))
    return out


def history_correlations(histories: pd.DataFrame | None, folds: pd.DataFrame | None, paths: Sequence,
                         labels: Sequence[str]) -> pd.DataFrame:
    """CORRELATION_COLUMNS for every experiment with two or more histories whose windows the fold table
    gives (empty otherwise)."""
    rows = []
    for path, label in zip(paths, labels):
        hist = None if histories is None else histories[histories["experiment"] == label]
        fold = None if folds is None else folds[folds["experiment"] == label]
        if hist is None or fold is None or not len(fold) or hist["history"].nunique() < 2 or \
                not {"source", "column", "val_start", "val_end", "test_start", "test_end"} <= {*hist, *fold}:
            continue
        if "trial_id" in hist.columns:  # a sweep's: one trial's tables (the trials of a sweep share its data)
            trial = hist["trial_id"].iloc[0]
            hist = hist[hist["trial_id"] == trial]
            fold = fold[fold["trial_id"].astype(str) == str(trial)] if "trial_id" in fold.columns else fold
        hist = hist.drop_duplicates("history").sort_values("history")
        returns = {int(r["history"]): _log_returns(_find(str(r["source"]), Path(path)), str(r["column"]))
                   for _, r in hist.iterrows()}
        names = dict(zip(hist["history"].astype(int), (hist["name"] if "name" in hist else hist["history"]).astype(str)))
        per_history = {h: fold[fold["history"] == h] if "history" in fold.columns else fold for h in returns}
        for a, b in combinations(sorted(returns), 2):
            if not (len(per_history[a]) and len(per_history[b])):
                continue
            for (seg, k, lo, hi, first, last), other in zip(_windows(per_history[a]), _windows(per_history[b])):
                row = dict(experiment=label, segment=seg, fold=k, first=first, last=last, rows=hi - lo, history_a=a,
                           history_b=b, name_a=names[a], name_b=names[b], correlation=np.nan, note="")
                ra, rb = returns[a], returns[b]
                if isinstance(ra, str) or isinstance(rb, str):
                    row["note"] = ra if isinstance(ra, str) else rb
                elif other[2:4] != (lo, hi) or (first, last) != other[4:]:
                    row["note"] = "the two histories' windows are not the same dates"
                else:  # returns over the window's rows: row t's return is log(p_t / p_{t-1})
                    x, y = ra[0][max(lo - 1, 0):hi - 1], rb[0][max(lo - 1, 0):hi - 1]
                    row["correlation"] = float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and len(x) == len(y) else np.nan
                rows.append(row)
    return pd.DataFrame(rows, columns=CORRELATION_COLUMNS)


def median_correlations(table: pd.DataFrame) -> dict[str, float]:
    """The median over pairs and windows of the validation windows' correlations and of the test
    segment's: what the verdict rows carry beside the calendar part (`return_corr_val`, `return_corr_test`)."""
    out = {}
    for seg, key in (("validation", "return_corr_val"), ("test", "return_corr_test")):
        vals = table.loc[table["segment"] == seg, "correlation"].dropna()
        out[key] = float(vals.median()) if len(vals) else np.nan
    return out
