"""Which calendar period each history's fold validates on, and which periods the histories' test
segments are: what the nested rule needs to tell histories that share a period (its luck is common
to them) from histories on their own dates (pooled as independent).

A period is a run of dates: two (history, fold) validation windows whose dates overlap are one
period, and so is everything overlapping them in turn (connected components of the overlap, so
a period is well defined however the windows chain); windows on disjoint dates are different
periods. The columns of one file on its date column therefore give fold k of every history one
period k (`rules.calendar.one_calendar`), histories of other eras or markets (each its own time
column, docs/data.md "Several price histories") periods of their own. The windows are read from
the experiment's validated fold tables (`side_tables.read_folds`: `val_first`..`val_last`, one row
per fold, or per history and fold on several calendars, and per trial of a sweep); a row without
a `history` is every history of its trial (one calendar). Without timestamps (a file of row
numbers) the rows stand for the dates: fold k of every history is period k. Without a fold table
at all (results written before it), fold k is period k and every test segment one period.

Period ids count from 0 in time order of each period's first window (row-number windows after
dated ones); -1 is a history's fold with no window in the tables.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

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
                        fold_ids: Sequence[int]) -> np.ndarray:
    """calendar [H, K] int (H = len(history_ids), K = len(fold_ids)): calendar[h, k] the period
    (module docstring) that fold `fold_ids[k]` of history `history_ids[h]` validates on, -1 where
    the tables hold no such window. `folds`: the experiment's fold tables (`Experiment.folds.dates`),
    `histories` its history tables (`Experiment.histories`, which histories a row without a
    `history` stands for), either None when absent."""
    hs, ks = [int(h) for h in history_ids], [int(k) for k in fold_ids]
    if folds is None or not len(folds):
        return np.tile(np.asarray(ks, dtype=np.int64), (len(hs), 1))
    cell = {(h, k): i for i, (h, k) in enumerate((h, k) for h in hs for k in ks)}
    windows = [(cell[h, int(r["fold"])], *_window(r, "val"))
               for r, h in _rows_by_history(folds, histories, hs) if (h, int(r["fold"])) in cell]
    return _period_ids(windows, len(cell)).reshape(len(hs), len(ks))


def held_out_calendar(folds: pd.DataFrame | None, histories: pd.DataFrame | None, history_ids: Sequence[int]) -> np.ndarray:
    """calendar [H] int: the period (module docstring) of history `history_ids[h]`'s test segment
    (histories whose test segments overlap share one), -1 where the tables hold none."""
    hs = [int(h) for h in history_ids]
    if folds is None or not len(folds):
        return np.zeros(len(hs), dtype=np.int64)
    at = {h: i for i, h in enumerate(hs)}
    windows = [(at[h], *_window(r, "test")) for r, h in _rows_by_history(folds, histories, hs)]
    return _period_ids(windows, len(hs))


def _rows_by_history(folds: pd.DataFrame, histories: pd.DataFrame | None, hs: list[int]):
    """(fold row, history) for every history a fold row stands for: its `history`, or without one
    every history of its experiment and trial in the history tables (all of `hs` without them)."""
    keys = [c for c in ("experiment", "trial_id") if c in folds.columns and histories is not None and c in histories.columns]
    listed: dict[tuple, list[int]] = {}
    if histories is not None and "history" in histories.columns:
        for key, g in histories.groupby(keys, sort=False) if keys else [((), histories)]:
            listed[key if isinstance(key, tuple) else (key,)] = sorted(int(h) for h in g["history"])
    wanted = set(hs)
    for _, r in folds.iterrows():
        if "history" in folds.columns and pd.notna(r["history"]):
            owners = [int(r["history"])]
        else:
            owners = listed.get(tuple(r[c] for c in keys), hs) if listed else hs
        for h in owners:
            if h in wanted:
                yield r, h


def _window(r: pd.Series, seg: str) -> tuple[int, int, int]:
    """(space, first, last) of a row's `seg` window, closed: its dates (space 0, ns), else its
    rows (space 1; half-open `<seg>_start`..`<seg>_end` made closed), else the fold id alone
    (space 2: a table of neither, fold k is period k)."""
    first, last = r.get(f"{seg}_first"), r.get(f"{seg}_last")
    if isinstance(first, str) and isinstance(last, str) and first.strip() and last.strip():
        return 0, window_time(first).value, window_time(last).value
    start, end = r.get(f"{seg}_start"), r.get(f"{seg}_end")
    if start is not None and end is not None and pd.notna(start) and pd.notna(end):
        return 1, int(start), int(end) - 1
    return (2, int(r["fold"]), int(r["fold"])) if seg == "val" else (2, 0, 0)


def _period_ids(windows: list[tuple[int, int, int, int]], n: int) -> np.ndarray:
    """Per node (0..n-1) the id of its period: `windows` (node, space, first, last) closed
    intervals; nodes joined by a chain of overlapping windows of one space share the id; ids in
    order of each period's first window (space, then time); -1 for a node without a window."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    ordered = sorted(windows, key=lambda w: (w[1], w[2], w[3]))
    reach = None  # (space, last date reached, node) of the run of overlapping windows being swept
    for node, space, first, last in ordered:
        if reach is not None and reach[0] == space and first <= reach[1]:
            parent[root(node)] = root(reach[2])
            reach = (space, max(reach[1], last), reach[2])
        else:
            reach = (space, last, node)
    ids, out = {}, np.full(n, -1, dtype=np.int64)
    for node, *_ in ordered:
        out[node] = ids.setdefault(root(node), len(ids))
    return out
