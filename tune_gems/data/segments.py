"""Where a price series is cut: segments (`split_bounds`), folds (`fold_bounds`: walk-forward or purged), the fold table
(`fold_table`) and the sealed rows no search reads (`sealed_rows`, `seal_digest`); docs/data.md explains each."""

from __future__ import annotations

import datetime as _dt
import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.data.series import calendar_groups, format_when

MAX_FOLDS = 64
"""Most walk-forward folds a run may have (`data.folds.k`): more is a typo, not a design."""

FOLD_TABLE_COLUMNS = ("fold", "layout", "train_start", "train_end", "val_start", "val_end", "test_start", "test_end",
                      "train_first", "train_last", "val_first", "val_last", "test_first", "test_last", "scheme",
                      "train_rows", "train_runs", "group_rows", "purge_before", "purge_after", "embargo")
"""The fold table (`fold_table`, folds.csv / folds.parquet; docs/results.md): per fold its
half-open row ranges, each window's first and last time, then its layout."""


@dataclass(frozen=True)
class SegmentBounds:
    """Half-open [start, end) ranges of train, validation and test. A purged fold trains on up to two
    `train_runs` (`train` their span); `sealed` the rows after the test kept from the search."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]
    train_runs: tuple[tuple[int, int], ...] = ()
    purge: tuple[int, int] = (0, 0)
    embargo: int = 0
    sealed: int = 0

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        """The runs of rows the fold trains on, in time order."""
        return self.train_runs or (self.train,)

    @property
    def purged(self) -> bool:
        """Whether the bounds are a fold of purged cross-validation."""
        return bool(self.train_runs)


@dataclass(frozen=True)
class TrainingReach:
    """How far around a training decision t the learner reads prices, which purging keeps away from a
    validation group; a training run must fit one episode."""

    window: int
    n_step: int
    episode_length: int

    @property
    def purge(self) -> tuple[int, int]:
        """(rows dropped before, after) a validation group: a run's last n-step target reads up to
        price e - 2 + n_step, its first observation from b - window."""
        return self.n_step - 1, self.window

    def decisions(self, run: tuple[int, int]) -> int:
        """Decision times of a run of rows [s, e) (the market's DecisionRange: from max(s,
        window) to e - 2; both t and t + 1 inside the run)."""
        s, e = run
        return max(e - 1 - max(s, self.window), 0)


_SEGMENT_NAMES = {"train": "train", "val": "validation", "test": "test"}


def _date_cut(index: pd.DatetimeIndex, when: Any) -> int:
    """Position of the first time >= `when`, comparing in the index's timezone."""
    ts = pd.Timestamp(when)
    if index.tz is not None and ts.tz is None:
        ts = ts.tz_localize(index.tz)
    elif index.tz is None and ts.tz is not None:
        ts = ts.tz_convert(None)
    return int(index.searchsorted(ts, side="left"))


def is_date_split(splits: Sequence) -> bool:
    """Whether `splits` are two dates [val_start, test_start] (else three fractions)."""
    return len(splits) == 2 and all(isinstance(x, (str, _dt.date)) for x in splits)


def split_bounds(prices: pd.Series, splits: list, min_len: int, source: str = "data.splits") -> SegmentBounds:
    """Contiguous train/val/test bounds covering `prices`: `splits` three fractions (cumulative rounding,
    so they add up to n) or two dates; every segment needs `min_len` prices."""
    n = len(prices)
    if len(splits) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in splits):
        f0, f1, f2 = (float(x) for x in splits)
        if min(f0, f1, f2) <= 0 or abs(f0 + f1 + f2 - 1.0) > 1e-6:
            raise ConfigError(f"{source}: fractions must be > 0 and sum to 1, got {list(splits)}")
        a, b = round(n * f0), round(n * (f0 + f1))
    elif is_date_split(splits):
        if not isinstance(prices.index, pd.DatetimeIndex):
            raise ConfigError(f"{source}: date splits need a time column in the data (or give three fractions)")
        try:
            a, b = (_date_cut(prices.index, x) for x in splits)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{source}: cannot read {list(splits)} as dates ({e})") from None
        if a > b:
            raise ConfigError(f"{source}: validation start must come before test start, got {list(splits)}")
    else:
        raise ConfigError(f"{source}: give three fractions [train, val, test] or two dates [val_start, test_start]")
    bounds = SegmentBounds(train=(0, a), val=(a, b), test=(b, n))
    for key, label in _SEGMENT_NAMES.items():
        lo, hi = getattr(bounds, key)
        if hi - lo < min_len:
            raise DataError(f"{source}: {label} segment has {hi - lo} prices, need at least min_len={min_len}"
                            f"{_data_span(prices.index, splits)}")
    return bounds


def _data_span(index: pd.Index, splits: list) -> str:
    """What a too-short segment's message adds for date splits: where the data ends (and starts),
    naming a split date past its end, so that a split beyond the data says why it is empty."""
    if not isinstance(index, pd.DatetimeIndex) or not len(index) or len(splits) != 2:
        return ""
    first, last = (t.date().isoformat() for t in (index[0], index[-1]))
    late = [str(x) for x, cut in zip(splits, (_date_cut(index, x) for x in splits)) if cut >= len(index)]
    past = f": {' and '.join(late)} {'is' if len(late) == 1 else 'are'} past its last date" if late else ""
    return f" (the data runs {first}..{last}{past})"


def fold_bounds(prices: pd.Series, splits: list, folds: Any, min_len: int,
                reach: TrainingReach | None = None) -> list[SegmentBounds]:
    """One SegmentBounds per fold of `data.folds`, the test common. Walk-forward: K windows end to end
    before the test, each training window `folds.gap` rows before it (K = 1 is `split_bounds` exactly).
    Purged needs `reach`. A layout that does not fit is a ConfigError naming the key."""
    base = split_bounds(prices, splits, min_len)
    if folds.scheme == "purged":
        if reach is None:
            raise ValueError("fold_bounds: scheme purged needs the training reach (window, n_step, episode_length)")
        return _purged_bounds(base, folds, min_len, reach)
    k, gap = int(folds.k), int(folds.gap)
    length = base.val[1] - base.val[0] if folds.val_length is None else int(folds.val_length)
    if length < min_len:
        raise ConfigError(f"data.folds.val_length: {length} rows per validation window, need at least min_len={min_len}")
    test_lo = base.test[0]
    first_val = test_lo - k * length
    first_train_end = first_val - gap
    if first_train_end < min_len:
        raise ConfigError(f"data.folds: {k} validation window(s) of {length} rows and a gap of {gap} before the test segment "
                          f"(which starts at row {test_lo}) leave fold 0 {max(first_train_end, 0)} training rows; need at least "
                          f"min_len={min_len}")
    train_length = None
    if folds.layout == "rolling":
        train_length = first_train_end if folds.train_length is None else int(folds.train_length)
        if train_length > first_train_end:
            raise ConfigError(f"data.folds.train_length: {train_length} rows do not fit before fold 0's validation window "
                              f"(row {first_val}, gap {gap}): at most {first_train_end}")
        if train_length < min_len:
            raise ConfigError(f"data.folds.train_length: {train_length} rows, need at least min_len={min_len}")
    out = []
    for f in range(k):
        val_lo = first_val + f * length
        train_end = val_lo - gap
        train_lo = 0 if train_length is None else train_end - train_length
        out.append(SegmentBounds(train=(train_lo, train_end), val=(val_lo, val_lo + length), test=base.test))
    return out


def _purged_bounds(base: SegmentBounds, folds: Any, min_len: int, reach: TrainingReach) -> list[SegmentBounds]:
    """Purged cross-validation: fold k validates on group [v, v + L) and trains on the rows before and
    after it past purge and embargo, each run kept only if it holds an episode, so no observation,
    reward or n-step target reads a price of the group or the test."""
    k, embargo = int(folds.k), int(folds.embargo)
    test_lo, lead = base.test[0], reach.window
    if folds.val_length is None:
        length = (test_lo - lead) // k
        if length < min_len:
            raise ConfigError(f"data.folds.k: {k} groups of the {test_lo - lead} rows before the test segment (less "
                              f"env.window={lead}) have {length} rows each; need at least min_len={min_len}")
    else:
        length = int(folds.val_length)
        if length < min_len:
            raise ConfigError(f"data.folds.val_length: {length} rows per validation group, need at least min_len={min_len}")
        if test_lo - k * length < lead:
            raise ConfigError(f"data.folds.val_length: {k} groups of {length} rows do not fit before the test segment "
                              f"(which starts at row {test_lo}) and after the {lead} rows the first group's observations read "
                              f"(env.window): at most {(test_lo - lead) // k}")
    first = test_lo - k * length
    before, after = reach.purge
    out = []
    for g in range(k):
        v0, v1 = first + g * length, first + (g + 1) * length
        candidates = ((0, v0 - before), (v1 + embargo + after, test_lo - before))
        runs = tuple(r for r in candidates if reach.decisions(r) >= reach.episode_length)
        if not runs:
            raise ConfigError(f"data.folds: purged fold {g} (validation rows {v0}..{v1 - 1}) keeps no run of training rows "
                              f"that holds an episode of env.episode_length={reach.episode_length} decisions after a purge of "
                              f"{before} row(s) before and {after} after and an embargo of {embargo}; use fewer groups "
                              "(data.folds.k) or a shorter data.folds.embargo")
        out.append(SegmentBounds(train=(runs[0][0], runs[-1][1]), val=(v0, v1), test=base.test, train_runs=runs,
                                 purge=(before, after), embargo=embargo))
    return out


def fold_table(index: pd.Index | Sequence[pd.Index], folds: Sequence[SegmentBounds], layout: str,
               fold_ids: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per fold (and per history on several calendars, with its own dates); purged folds write no layout."""
    indexes = [index] if isinstance(index, pd.Index) else list(index)
    if len(calendar_groups(indexes)) > 1:
        per = [fold_table(idx, folds, layout, fold_ids) for idx in indexes]
        return pd.concat([t.assign(history=h) for h, t in enumerate(per)], ignore_index=True)[["history", *FOLD_TABLE_COLUMNS]]
    index = indexes[0]
    timed = isinstance(index, pd.DatetimeIndex)
    ids = list(range(len(folds))) if fold_ids is None else list(fold_ids)
    rows = []
    for fold, b in zip(ids, folds):
        row: dict[str, Any] = {"fold": int(fold), "layout": None if b.purged else layout}
        for seg in ("train", "val", "test"):
            lo, hi = getattr(b, seg)
            row[f"{seg}_start"], row[f"{seg}_end"] = int(lo), int(hi)
        for seg in ("train", "val", "test"):
            lo, hi = getattr(b, seg)
            row[f"{seg}_first"] = format_when(index[lo]) if timed else None
            row[f"{seg}_last"] = format_when(index[hi - 1]) if timed else None
        row["scheme"] = "purged" if b.purged else "walk_forward"
        row["train_rows"] = int(sum(hi - lo for lo, hi in b.runs))
        row["train_runs"] = " ".join(f"{int(lo)}:{int(hi)}" for lo, hi in b.runs)  # half-open runs
        row["group_rows"] = int(b.val[1] - b.val[0])
        before, after = b.purge if b.purged else (b.val[0] - b.train[1], 0)
        row["purge_before"], row["purge_after"], row["embargo"] = int(before), int(after), int(b.embargo)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(FOLD_TABLE_COLUMNS))


def sealed_rows(n: int, sealed: float | int, min_len: int) -> int:
    """The rows `data.sealed` keeps apart at the end of a history of `n` rows: a fraction of them
    (rounded) or a count; 0 for none. Opened, they are a test segment: `min_len` rows at least."""
    rows = round(n * sealed) if isinstance(sealed, float) else int(sealed)
    if rows and rows < min_len:
        raise DataError(f"data.sealed: {sealed} seals {rows} of the {n} rows, need at least min_len={min_len} (opened, "
                        "they are evaluated as a test segment)")
    return rows


def seal_digest(paths: Sequence[pd.Series], names: Sequence[str], rows: int) -> dict[str, Any]:
    """The record of a seal: its rows, start, each history's span and the SHA-256 of every history's
    sealed rows (name, int64 ns timestamps or row numbers, float64 prices); no opening yet."""
    digest, spans = hashlib.sha256(), {}
    n = len(paths[0])
    for name, path in zip(names, paths):
        tail = path.iloc[n - rows:]
        index = tail.index
        stamps = index.asi8 if isinstance(index, pd.DatetimeIndex) else np.arange(n - rows, n, dtype=np.int64)
        digest.update(f"{name}\0".encode())
        digest.update(np.ascontiguousarray(stamps, dtype="<i8").tobytes())
        digest.update(np.ascontiguousarray(tail.to_numpy(), dtype="<f8").tobytes())
        timed = isinstance(index, pd.DatetimeIndex)
        spans[name] = f"{format_when(index[0])}..{format_when(index[-1])}" if timed else f"rows {n - rows}..{n - 1}"
    return {"rows": int(rows), "first_row": int(n - rows), "sha256": digest.hexdigest(), "spans": spans, "openings": []}
