"""The calendar periods the analysis reads from an experiment's fold and history tables
(`analysis.read.calendars`): which (history, fold) validation windows, and which test segments,
are one period (their dates overlap, or chain through windows that do) and which are their own;
and the window dates `read.side_tables` validates before they are read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tune_gems.analysis.read.calendars import held_out_calendar, validation_calendar
from tune_gems.analysis.read.side_tables import read_folds
from tune_gems.contracts.errors import DataError
from tune_gems.data.segments import fold_bounds, fold_table

ROWS = 1000
WALK = SimpleNamespace(scheme="walk_forward", k=3, val_length=100, gap=0, layout="expanding", train_length=None)


def days(start: str) -> pd.DatetimeIndex:
    return pd.bdate_range(start, periods=ROWS, name="date")


def table(*indexes: pd.Index) -> pd.DataFrame:
    """The fold table of a run of 3 walk-forward folds on histories with these indexes (one index:
    one calendar, or a run of one history)."""
    prices = pd.Series(np.arange(ROWS, dtype=float) + 1, index=indexes[0])
    bounds = fold_bounds(prices, [0.7, 0.15, 0.15], WALK, 8)
    return fold_table(list(indexes), bounds, "expanding")


def histories(n: int, **ids) -> pd.DataFrame:
    return pd.DataFrame({**ids, "history": range(n), "name": [f"h{h}" for h in range(n)], "rows": ROWS})


def one_calendar(h: int, k: int) -> np.ndarray:
    """`rules.histories.one_calendar`: fold k of every history is period k."""
    return np.tile(np.arange(k), (h, 1))


def test_one_calendar_of_dates_or_of_row_numbers_is_fold_k_period_k_and_one_test_segment():
    for index in (days("2000-01-03"), pd.RangeIndex(ROWS)):
        folds = table(index)
        assert "history" not in folds.columns
        assert (validation_calendar(folds, histories(3), range(3), range(3)) == one_calendar(3, 3)).all()
        assert held_out_calendar(folds, histories(3), range(3)).tolist() == [0, 0, 0]
    # the columns of one file on its date column: the same dates in every history, one row per fold
    same = table(days("2000-01-03"), days("2000-01-03"))
    assert "history" not in same.columns and len(same) == 3


def test_without_a_fold_table_fold_k_is_period_k():
    assert (validation_calendar(None, None, range(4), range(2)) == one_calendar(4, 2)).all()
    assert held_out_calendar(None, None, range(4)).tolist() == [0, 0, 0, 0]
    assert validation_calendar(None, None, [1, 3], [2, 0]).tolist() == [[1, 0], [1, 0]]  # in time order


def test_histories_on_their_own_dates_are_their_own_periods_and_one_eras_share_theirs():
    """Two eras of a market, three histories each on one of them: fold k of one era's histories is
    one period, the other era's folds others; the test segments likewise."""
    era_a, era_b = days("1990-01-01"), days("2010-01-01")
    folds = table(era_a, era_a, era_a, era_b, era_b, era_b)
    assert folds["history"].tolist() == [h for h in range(6) for _ in range(3)]
    cal = validation_calendar(folds, histories(6), range(6), range(3))
    assert cal.tolist() == [[0, 1, 2]] * 3 + [[3, 4, 5]] * 3
    assert held_out_calendar(folds, histories(6), range(6)).tolist() == [0, 0, 0, 1, 1, 1]
    assert validation_calendar(folds, histories(6), [0, 5], [0, 2]).tolist() == [[0, 1], [2, 3]]  # the windows asked for


def test_overlapping_windows_chain_into_one_period_and_disjoint_ones_stay_apart():
    """Calendars 20 business days apart: fold k of each meets folds k and k + 1 of the one before,
    so every fold of the three chains into one period (the cautious side: shared, never
    independent); a history 10 years on has periods of its own; timezone-aware dates compare in UTC
    with naive ones."""
    a, b, c = days("2000-01-03"), days("2000-01-31"), days("2000-02-28")
    late = days("2010-01-04").tz_localize("America/New_York")
    folds = table(a, b, c, late)
    assert validation_calendar(folds, histories(4), range(4), range(3)).tolist() == [[0, 0, 0]] * 3 + [[1, 2, 3]]
    assert held_out_calendar(folds, histories(4), range(4)).tolist() == [0, 0, 0, 1]
    # a chain: 0 meets 1 and 1 meets 2 but 0 does not meet 2, one period all the same
    chain = pd.DataFrame({"history": [0, 1, 2], "fold": 0, "val_first": ["2000-01-01", "2000-01-05", "2000-01-09"],
                          "val_last": ["2000-01-06", "2000-01-10", "2000-01-12"]})
    assert validation_calendar(chain, None, range(3), [0]).ravel().tolist() == [0, 0, 0]
    apart = chain.assign(val_first=["2000-01-01", "2000-01-07", "2000-01-13"], val_last=["2000-01-06", "2000-01-12", "2000-01-20"])
    assert validation_calendar(apart, None, range(3), [0]).ravel().tolist() == [0, 1, 2]


def test_a_missing_window_is_minus_one_and_trials_rows_without_a_history_are_their_trials_histories():
    """A history without fold k gets -1; a sweep's rows (per trial) without `history` stand for
    the histories its history table lists for that trial, the same windows in every trial one
    period."""
    folds = table(days("1990-01-01"), days("2010-01-01"))
    assert validation_calendar(folds[folds["fold"] != 2], histories(2), range(2), range(3)).tolist() == [[0, 1, -1], [2, 3, -1]]
    one = table(days("2000-01-03"))
    sweep = pd.concat([one.assign(experiment="e", trial_id=t) for t in ("t0", "t1")], ignore_index=True)
    hist = pd.concat([histories(2, experiment="e", trial_id="t0"), histories(1, experiment="e", trial_id="t1")])
    assert validation_calendar(sweep, hist, range(3), range(3)).tolist() == [[0, 1, 2], [0, 1, 2], [-1, -1, -1]]


# -- the window dates as read (side_tables) ---------------------------------------------------------


def _read(tmp_path: Path, folds: pd.DataFrame):
    folds.to_parquet(tmp_path / "folds.parquet", index=False)
    return read_folds(tmp_path, "exp", pd.DataFrame({"fold": [0, 1, 2]}), None)


@pytest.mark.parametrize("column, value, why", [
    ("val_last", None, "column val_last, row 0: no date beside val_first '2002-02-11' (a row has every window date or none)"),
    ("test_first", "soon", "column test_first, row 0: 'soon' is not a time"),
    ("val_first", "2003-01-01", "column val_first, row 0: the windows' dates are not in time order (val_first 2003-01-01, "),
])  # fmt: skip
def test_a_fold_tables_dates_are_all_or_none_times_in_order(tmp_path, column, value, why):
    folds = table(days("2000-01-03"))
    folds[column] = folds[column].astype(object)
    folds.loc[0, column] = value
    with pytest.raises(DataError) as info:
        _read(tmp_path, folds)
    assert str(info.value).startswith(f"{tmp_path / 'folds.parquet'}: {why}")


def test_fold_tables_of_row_numbers_of_several_calendars_and_without_dates_are_read(tmp_path):
    for folds in (table(pd.RangeIndex(ROWS)), table(days("1990-01-01"), days("2010-01-01")),
                  table(days("2000-01-03")).drop(columns=["val_first", "val_last", "test_first", "test_last"])):
        df, why = _read(tmp_path, folds)
        assert why is None and len(df) == len(folds)


def test_a_minimum_share_pairs_each_fold_with_the_other_calendars_fold_of_mostly_the_same_days():
    """The same calendars 20 business days apart: at `min_share` 0.5 fold k of each is one period
    (80 % of a window in common), the 20 % a window shares with the next fold no longer chains."""
    a, b, c = days("2000-01-03"), days("2000-01-31"), days("2000-02-28")
    folds = table(a, b, c, days("2010-01-04"))
    cal = validation_calendar(folds, histories(4), range(4), range(3), min_share=0.5)
    assert cal.tolist() == [[0, 1, 2]] * 3 + [[3, 4, 5]]
    assert held_out_calendar(folds, histories(4), range(4), min_share=0.5).tolist() == [0, 0, 0, 1]
