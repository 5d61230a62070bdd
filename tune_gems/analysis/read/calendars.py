"""Which calendar period each history's fold validates on, and which periods the test segments are:
the nested rule tells histories sharing a period (common luck) from those on their own dates
(docs/data.md "Several price histories"). A period is a connected component of overlapping windows,
well defined however they chain (the cautious side); without dates fold k is period k."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

DATE_COLUMNS = ("val_first", "val_last", "test_first", "test_last")
"""The fold table's window dates a period is read from (all or none in a row: none without a time
column)."""


def window_time(text: object) -> pd.Timestamp:
    """A fold table's date cell as a naive timestamp (timezone-aware ones in UTC), so windows of
    naive and aware histories compare; ValueError when it is not a time."""
    ts = pd.Timestamp(str(text))
    if pd.isna(ts):
        raise ValueError(f"{text!r} is not a time")
    return ts.tz_convert("UTC").tz_localize(None) if ts.tz is not None else ts


def validation_calendar(folds: pd.DataFrame | None, histories: pd.DataFrame | None, history_ids: Sequence[int],
                        fold_ids: Sequence[int], min_share: float = 0.0) -> np.ndarray:
    """calendar [H, K]: the period that fold `fold_ids[k]` of history `history_ids[h]` validates on, -1
    without a window. `min_share`: the share of the shorter of two windows they must share to be one
    period (0: any day; 0.5 pairs folds of mostly the same days)."""
    hs, ks = [int(h) for h in history_ids], [int(k) for k in fold_ids]
    if folds is None or not len(folds):
        return np.tile(np.unique(ks, return_inverse=True)[1].astype(np.int64), (len(hs), 1))
    w = _windows(folds, histories, hs, "val")
    w = w[w["fold"].isin(ks)]
    node = w["history"].map({h: i for i, h in enumerate(hs)}) * len(ks) + w["fold"].map({k: i for i, k in enumerate(ks)})
    return _period_ids(w.assign(node=node), len(hs) * len(ks), min_share).reshape(len(hs), len(ks))


def held_out_calendar(folds: pd.DataFrame | None, histories: pd.DataFrame | None, history_ids: Sequence[int],
                      min_share: float = 0.0) -> np.ndarray:
    """calendar [H] int: the period (module docstring) of history `history_ids[h]`'s test segment
    (histories whose test segments overlap share one), -1 where the tables hold none."""
    hs = [int(h) for h in history_ids]
    if folds is None or not len(folds):
        return np.zeros(len(hs), dtype=np.int64)
    w = _windows(folds, histories, hs, "test")
    return _period_ids(w.assign(node=w["history"].map({h: i for i, h in enumerate(hs)})), len(hs), min_share)


def _windows(folds: pd.DataFrame, histories: pd.DataFrame | None, hs: list[int], seg: str) -> pd.DataFrame:
    """Every (history, fold) window of segment `seg` as closed [first, last]: its dates (space 0), else its rows (space
    1), else the fold id (space 2). A row without `history` stands for every history of its trial."""
    own = folds[folds["history"].notna()] if "history" in folds.columns else folds.iloc[:0]
    bare = folds.drop(own.index).drop(columns=["history"], errors="ignore")
    if histories is not None and "history" in histories.columns:
        keys = [c for c in ("experiment", "trial_id") if c in bare.columns and c in histories.columns]
        bare = bare.merge(histories[[*keys, "history"]], on=keys or None, how="inner" if keys else "cross")
    else:
        bare = bare.merge(pd.DataFrame({"history": hs}), how="cross")
    rows = pd.concat([own, bare], ignore_index=True).astype({"history": int, "fold": int})
    rows = rows[rows["history"].isin(hs)]
    alone = rows["fold"] if seg == "val" else 0
    out = rows[["history", "fold"]].assign(space=2, first=alone, last=alone)
    if {f"{seg}_start", f"{seg}_end"} <= set(rows.columns):
        timed = rows[f"{seg}_start"].notna() & rows[f"{seg}_end"].notna()
        out.loc[timed, "space"] = 1
        out.loc[timed, "first"] = rows.loc[timed, f"{seg}_start"]
        out.loc[timed, "last"] = rows.loc[timed, f"{seg}_end"] - 1
    if {f"{seg}_first", f"{seg}_last"} <= set(rows.columns):
        dated = rows[f"{seg}_first"].map(_is_date) & rows[f"{seg}_last"].map(_is_date)
        for end in ("first", "last") if dated.any() else ():
            out.loc[dated, end] = rows.loc[dated, f"{seg}_{end}"].map(lambda t: window_time(t).value).astype(np.int64)
        out.loc[dated, "space"] = 0
    return out.astype({"space": int, "first": np.int64, "last": np.int64})


def _is_date(cell: object) -> bool:
    return isinstance(cell, str) and bool(cell.strip())


def _period_ids(w: pd.DataFrame, n: int, min_share: float) -> np.ndarray:
    """Per node its period id: windows of one space meet when they share `min_share` of the shorter one,
    and chains of meeting windows are one period; ids in order of first window, -1 without one."""
    w = w.drop_duplicates(["node", "space", "first", "last"]).sort_values(["space", "first", "last"], kind="stable")
    node, space, first, last = (w[c].to_numpy() for c in ("node", "space", "first", "last"))
    common = np.minimum.outer(last, last) - np.maximum.outer(first, first)
    meet = (space[:, None] == space[None, :]) & (common >= 0) & (common >= min_share * np.minimum.outer(last - first, last - first))
    i, j = np.nonzero(meet)
    _, component = connected_components(coo_matrix((np.ones(len(i)), (node[i], node[j])), shape=(n, n)), directed=False)
    ids: dict[int, int] = {}
    out = np.full(n, -1, dtype=np.int64)
    for k in node:  # in order of each period's first window
        out[k] = ids.setdefault(int(component[k]), len(ids))
    return out
