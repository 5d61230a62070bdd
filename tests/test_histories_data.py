"""Several price histories, the data side: the config's two shapes (`data.price_columns`,
`data.histories`) and their one-line errors, the loader's checks (as many rows, timestamps in every
history or none, a column that is not a price, a file too short for the fold layout: each naming
the history), histories on several calendars (each at its own dates, a date split refused), the
start-up lines and history table, the memory estimate, the resume record of several files, and the
shipped real series (examples/daily_closes.csv, built from `arch`'s data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tune_gems.config.load import load_config
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.data.series import load_histories
from tune_gems.trainer.run_setup import load_run_prices, prepare_market

REPO = Path(__file__).resolve().parents[1]
DAILY = REPO / "examples" / "daily_closes.csv"
SP500 = REPO / "examples" / "sp500_closes.csv"
SMALL = ["env.window=8", "env.episode_length=32"]
SIDE_BY_SIDE = "the members put row t of every history side by side, so histories need as many rows; cut the longer ones"


def market_error(*overrides: str) -> str:
    """The one-line error of preparing the market of a config (what train and sweep do first)."""
    with pytest.raises((ConfigError, DataError)) as info:
        cfg = load_config(None, list(overrides))
        prepare_market(cfg, torch.device("cpu"), load_run_prices(cfg))
    msg = str(info.value)
    assert "\n" not in msg
    return msg


@pytest.fixture
def daily(tmp_path) -> Path:
    """The first 900 days of the shipped three-history file."""
    path = tmp_path / "daily.csv"
    pd.read_csv(DAILY).head(900).to_csv(path, index=False)
    return path


# --- the config ----------------------------------------------------------------------------------


def test_price_columns_name_one_history_per_column_of_one_file(daily):
    cfg = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, nasdaq, wti]"])
    specs = cfg.data.price_histories
    assert [(s.name, s.path, s.price_column) for s in specs] == [(c, str(daily), c) for c in ("sp500", "nasdaq", "wti")]


def test_histories_entries_default_from_the_data_section(tmp_path):
    cfg = load_config(None, ["data.source=file", "data.path=shared.csv", "data.price_column=Close", "data.time_column=Date",
                             "data.histories=[{path: a/spx.csv.gz}, {name: oil, price_column: wti}, {price_column: ndx, time_column: t}]"])
    specs = [(s.name, s.path, s.price_column, s.time_column) for s in cfg.data.price_histories]
    assert specs == [("spx", "a/spx.csv.gz", "Close", "Date"), ("oil", "shared.csv", "wti", "Date"), ("ndx", "shared.csv", "ndx", "t")]


def test_one_history_is_named_after_its_file_and_the_synthetic_series_is_one_history():
    assert [s.name for s in load_config(None, ["data.source=file", "data.path=d/sp500.csv"]).data.price_histories] == ["sp500"]
    assert [(s.name, s.path) for s in load_config(None, []).data.price_histories] == [("synthetic", None)]


@pytest.mark.parametrize("overrides, message", [
    (["data.price_columns=[a, b]"], "config: data: data.price_columns needs data.source=file (the synthetic series is one "
     "history; data.synthetic.paths gives each seed index its own path)"),
    (["data.source=file", "data.path=x.csv", "data.price_columns=[a]", "data.histories=[{price_column: b}]"],
     "config: data: data.price_columns and data.histories: give one (price_columns: columns of data.path; histories: one "
     "entry per file or column)"),
    (["data.source=file", "data.path=x.csv", "data.price_columns=[]"],
     "config: data: data.price_columns: an empty list; name at least one history (or drop the key)"),
    (["data.source=file", "data.path=x.csv", "data.price_columns=[spx, SPX]"],
     "config: data: data.price_columns.1: a second history named 'SPX' (entry 0 has it): give each history its own column"),
    (["data.source=file", "data.histories=[{path: a/x.csv}, {path: b/x.csv}]"],
     "config: data: data.histories.1: a second history named 'x' (entry 0 has it): give each entry its own `name`"),
    (["data.source=file", "data.path=x.csv", "data.price_columns=[a]", "data.price_column=b"],
     "config: data: data.price_column ('b') and data.price_columns: give one (price_columns lists every history's column)"),
    (["data.source=file", "data.price_columns=[a]"],
     "config: data: data.price_columns: the columns are read from data.path, which is not set"),
    (["data.source=file", "data.histories=[{path: a.csv}, {price_column: b}]"],
     "config: data: data.histories.1.path is required when data.source is file (or set data.path, the file of every entry "
     "without one)"),
    (["data.source=file", "data.path=x.csv", "data.histories=[{name: 'a|b'}]"],
     "config: data: data.histories.0: history name 'a|b' holds '|' (U+007C; a name is printable and unambiguous: no "
     "control, zero-width, right-to-left or unassigned character, no space but ' ', none of |/[])"),
    (["data.source=file", "data.path=x.csv", "data.histories=[{colour: red}]"], "config: data.histories.0.colour: unknown key"),
], ids=["synthetic", "both", "empty", "duplicate-column", "duplicate-stem", "price-column", "no-path", "entry-path", "name",
        "unknown-key"])  # fmt: skip
def test_a_bad_histories_config_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert str(info.value) == message


# --- loading: each history validated, then side by side --------------------------------------------


def test_histories_load_on_one_calendar_each_with_its_name_and_column(daily):
    cfg = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, WTI]"])
    a, b = load_histories(cfg.data)
    assert a.index.equals(b.index) and len(a) == 900
    assert (a.attrs["history"], b.attrs["history"], b.attrs["source_column"]) == ("sp500", "WTI", "wti")
    assert b.iloc[0] == pd.read_csv(daily)["wti"].iloc[0]


def test_wti_beside_the_sp500_closes_runs_on_its_own_dates_once_it_has_as_many_rows(tmp_path):
    """The real case: FRED's WTI series trades on days the exchanges were shut (and not on some
    they were open). Beside the S&P 500 closes it is another calendar: 5,020 days against 5,031 is
    refused with both counts; cut to as many rows, each history keeps its own dates and the same
    rows (a fold is row for row the same in both), the start-up lines say both calendars, and
    the analysis reads every fold of both as one period (docs/data.md "The real series shipped")."""
    arch_data = pytest.importorskip("arch.data.wti")
    from tune_gems.analysis.read.calendars import validation_calendar
    from tune_gems.data.segments import fold_table
    from tune_gems.data.summary import data_lines, history_table

    wti = arch_data.load()["DCOILWTICO"].loc["1999":"2018"].dropna()
    path = tmp_path / "wti.csv"
    pd.DataFrame({"date": wti.index.strftime("%Y-%m-%d"), "close": wti.to_numpy()}).to_csv(path, index=False)
    both = f"data.histories=[{{path: {SP500}}}, {{path: {path}}}]"
    msg = market_error("data.source=file", both)
    assert msg == (f"data.histories: history 'wti' ({path}, column 'close') has 5020 rows, history 'sp500_closes' 5031: "
                   f"{SIDE_BY_SIDE}")
    pd.read_csv(SP500).head(5020).to_csv(tmp_path / "sp500.csv", index=False)
    cfg = load_config(None, ["data.source=file", f"data.histories=[{{path: {tmp_path / 'sp500.csv'}}}, {{path: {path}}}]",
                             "data.splits=[0.8, 0.1, 0.1]"])
    sp, oil = load_run_prices(cfg)
    assert len(sp) == len(oil) == 5020 and str(sp.index[251].date()) == "1999-12-31" and str(oil.index[251].date()) == "2000-01-04"
    lines = data_lines(cfg.data, prepare_market(cfg, torch.device("cpu"), [sp, oil]))
    assert lines[0].startswith("data: 2 histories on 2 calendars, 5020 rows each: sp500 (")
    assert lines[0].endswith(f"wti ({path}, price column 'close', time column 'date')")
    assert lines[1:] == ["split of sp500: train 4016 rows (1999-01-04..2014-12-17) | validation 502 rows "
                         "(2014-12-18..2016-12-14) | test 502 rows (2016-12-15..2018-12-13)",
                         "split of wti: train 4016 rows (1999-01-04..2014-12-30) | validation 502 rows "
                         "(2014-12-31..2016-12-27) | test 502 rows (2016-12-28..2018-12-28)"]
    four = load_config(None, ["data.source=file", f"data.histories=[{{path: {tmp_path / 'sp500.csv'}}}, {{path: {path}}}]",
                              "data.folds.k=4"])
    market = prepare_market(four, torch.device("cpu"), [sp, oil])  # days apart, never a window apart: one period
    folds = fold_table(market.indexes, market.bounds, "expanding", market.fold_ids)
    table = history_table(four.data, market)
    assert (validation_calendar(folds, table, range(2), range(4)) == 0).all()
    assert validation_calendar(folds, table, range(2), range(4), min_share=0.5).tolist() == [[0, 1, 2, 3]] * 2


def test_a_shorter_history_and_one_without_times_are_refused(tmp_path, daily):
    frame = pd.read_csv(daily)
    frame.head(800).to_csv(tmp_path / "short.csv", index=False)
    frame[["sp500"]].to_csv(tmp_path / "rows.csv", index=False)
    both = "data.histories=[{{path: {a}, price_column: sp500}}, {{path: {b}, price_column: {c}}}]"
    msg = market_error("data.source=file", both.format(a=daily, b=tmp_path / "short.csv", c="nasdaq"), *SMALL)
    assert msg == (f"data.histories: history 'short' ({tmp_path / 'short.csv'}, column 'nasdaq') has 800 rows, history "
                   f"'daily' 900: {SIDE_BY_SIDE}")
    msg = market_error("data.source=file", both.format(a=daily, b=tmp_path / "rows.csv", c="sp500"), *SMALL)
    assert msg == (f"data.histories: history 'rows' ({tmp_path / 'rows.csv'}, column 'sp500'): history 'daily' has "
                   "timestamps and 'rows' none; give every history a time column, or none")
    frame.assign(date=pd.to_datetime(frame["date"]).dt.tz_localize("UTC")).to_csv(tmp_path / "utc.csv", index=False)
    msg = market_error("data.source=file", both.format(a=daily, b=tmp_path / "utc.csv", c="wti"), *SMALL)
    assert msg == (f"data.histories: history 'utc' ({tmp_path / 'utc.csv'}, column 'wti'): timestamps in UTC, history "
                   "'daily''s in no timezone; give every history timezone-aware timestamps, or none")


def test_histories_on_two_calendars_keep_their_dates_and_date_splits_are_refused(tmp_path, daily):
    """Another era of a market beside the first: the same rows, each at its own dates, in the
    split lines, the history table and a fold table of a row per history and fold; a date split
    would cut each calendar at other rows, so it is refused naming the key."""
    from tune_gems.data.segments import fold_table
    from tune_gems.data.summary import history_table, split_lines

    later = pd.read_csv(DAILY).iloc[2000:2900]
    later.rename(columns={"date": "day"}).to_csv(tmp_path / "later.csv", index=False)
    two = (f"data.histories=[{{path: {daily}, price_column: sp500}}, {{path: {tmp_path / 'later.csv'}, price_column: sp500, "
           "time_column: day, name: sp500_2007}]")
    cfg = load_config(None, ["data.source=file", two, *SMALL, "data.folds.k=2"])
    market = prepare_market(cfg, torch.device("cpu"))
    assert [str(i[0].date()) for i in market.indexes] == ["1999-01-04", "2007-01-09"]
    assert split_lines(cfg.data, market) == [
        "split of daily: fold 0: train 495 rows (1999-01-04..2000-12-20), validation 135 rows (2000-12-21..2001-07-06) | "
        "fold 1: train 630 rows (1999-01-04..2001-07-06), validation 135 rows (2001-07-09..2002-01-28) | test 135 rows "
        "(2002-01-29..2002-08-12)",
        "split of sp500_2007: fold 0: train 495 rows (2007-01-09..2008-12-23), validation 135 rows (2008-12-24..2009-07-09) "
        "| fold 1: train 630 rows (2007-01-09..2009-07-09), validation 135 rows (2009-07-10..2010-01-21) | test 135 rows "
        "(2010-01-22..2010-08-04)"]
    table = history_table(cfg.data, market)
    assert table[["name", "first", "last", "rows"]].values.tolist() == [["daily", "1999-01-04", "2002-08-12", 900],
                                                                        ["sp500_2007", "2007-01-09", "2010-08-04", 900]]
    folds = fold_table(market.indexes, market.bounds, "expanding", market.fold_ids)
    assert folds[["history", "fold", "val_start", "val_first"]].values.tolist() == [
        [0, 0, 495, "2000-12-21"], [0, 1, 630, "2001-07-09"], [1, 0, 495, "2008-12-24"], [1, 1, 630, "2009-07-10"]]
    msg = market_error("data.source=file", two, *SMALL, "data.splits=[2001-01-01, 2002-01-01]")
    assert msg == ("data.splits: dates ['2001-01-01', '2002-01-01'] cut each calendar at other rows, and the 2 histories are "
                   "on 2 calendars (those of 'daily', 'sp500_2007'): a fold is the same rows of every history, so give three "
                   "fractions")
    one = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, wti]", *SMALL])
    assert fold_table(prepare_market(one, torch.device("cpu")).indexes, market.bounds, "expanding").columns[0] == "fold"


@pytest.mark.parametrize("column, value, problem", [
    ("text", "abc", "non-numeric price 'abc' in row 6 (1999-01-11)"),
    ("neg", -1.0, "non-positive price -1 in row 6 (1999-01-11)"),
    ("flat", None, "constant price 42 in all 900 rows of column 'flat': not a price series"),
    ("nope", None, "no price column 'nope' (columns: date, sp500, nasdaq, wti, text, neg, flat)"),
])  # fmt: skip
def test_a_column_that_is_not_a_price_is_one_line_naming_the_history(tmp_path, daily, column, value, problem):
    frame = pd.read_csv(daily)
    frame["text"], frame["neg"], frame["flat"] = frame["wti"].astype(str), frame["wti"], 42.0
    if value is not None:
        frame.loc[5, column] = value
    path = tmp_path / "cols.csv"
    frame.to_csv(path, index=False)
    msg = market_error("data.source=file", f"data.path={path}", f"data.price_columns=[sp500, {column}]", *SMALL)
    assert msg == f"history {column!r}: {path}: {problem}"


def test_a_file_too_short_for_the_fold_layout_names_the_histories(daily):
    msg = market_error("data.source=file", f"data.path={daily}", "data.price_columns=[sp500, nasdaq]", *SMALL, "data.folds.k=20")
    assert msg == ("histories 'sp500', 'nasdaq' (one calendar of 900 rows): data.folds: 20 validation window(s) of 135 rows "
                   "and a gap of 0 before the test segment (which starts at row 765) leave fold 0 0 training rows; need at "
                   "least min_len=10")
    msg = market_error("data.source=file", f"data.path={daily}", "data.price_columns=[sp500, nasdaq]", "data.folds.k=2",
                       "data.folds.val_length=300")  # window 32, episodes of 256
    assert msg == ("histories 'sp500', 'nasdaq' (one calendar of 900 rows): data: fold 0's train segment has 132 decision "
                   "steps, fewer than env.episode_length=256")


def test_too_few_rows_name_the_history(tmp_path, daily):
    pd.read_csv(daily).head(60).to_csv(tmp_path / "tiny.csv", index=False)
    msg = market_error("data.source=file", f"data.path={tmp_path / 'tiny.csv'}", "data.price_columns=[sp500, wti]", *SMALL)
    assert msg == f"history 'sp500': {tmp_path / 'tiny.csv'}: 60 rows, need at least 70"


def test_one_history_keeps_its_messages_unprefixed(tmp_path):
    path = tmp_path / "flat.csv"
    path.write_text("date,close\n" + "".join(f"2020-01-{d:02d},5\n" for d in range(1, 11)))
    with pytest.raises(DataError) as info:
        load_histories(load_config(None, ["data.source=file", f"data.path={path}"]).data)
    assert str(info.value) == f"{path}: constant price 5 in all 10 rows of column 'close': not a price series"


# --- what a run says and records ---------------------------------------------------------------------


def test_the_source_line_and_history_table_name_every_history(tmp_path, daily):
    from tune_gems.data.summary import history_table, source_line

    cfg = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, Nasdaq]", *SMALL])
    market = prepare_market(cfg, torch.device("cpu"))
    assert source_line(cfg.data, market) == (f"data: {daily}, 2 histories on one calendar, 900 rows each: sp500 (price "
                                             "column 'sp500') | Nasdaq (price column 'nasdaq' (asked 'Nasdaq'))")
    table = history_table(cfg.data, market)
    assert table.to_dict("records") == [
        {"history": 0, "name": "sp500", "source": str(daily), "column": "sp500", "first": "1999-01-04", "last": "2002-08-12", "rows": 900},
        {"history": 1, "name": "Nasdaq", "source": str(daily), "column": "nasdaq", "first": "1999-01-04", "last": "2002-08-12", "rows": 900},
    ]  # fmt: skip
    pd.read_csv(daily)[["date", "wti"]].to_csv(tmp_path / "oil.csv", index=False)
    two = load_config(None, ["data.source=file", f"data.histories=[{{path: {daily}, price_column: sp500}}, {{path: {tmp_path / 'oil.csv'}, price_column: wti}}]", *SMALL])  # noqa: E501
    line = source_line(two.data, prepare_market(two, torch.device("cpu")))
    assert line == (f"data: 2 histories on one calendar, 900 rows each: daily ({daily}, price column 'sp500') | oil "
                    f"({tmp_path / 'oil.csv'}, price column 'wti')")


def test_the_memory_estimate_counts_every_historys_members_and_market_rows(daily):
    from tune_gems.design.resources import default_members, estimate_memory

    one = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_column=sp500", "data.folds.k=2", *SMALL])
    three = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, nasdaq, wti]",
                               "data.folds.k=2", "arms.factors.model.noisy=[true, false]", *SMALL])
    assert default_members(three) == 3 * 2 * 2 * 4 and default_members(one) == 2 * 4
    a, b = estimate_memory(one), estimate_memory(three)
    assert b.members == 48 and b.market == 3 * a.market > 0 and b.series == 3 * a.series
    assert b.activations == 6 * a.activations  # per member: 6 times the members


def test_the_resume_record_covers_every_historys_file(tmp_path, daily):
    from tune_gems.contracts.run_record import data_fingerprint

    oil = tmp_path / "oil.csv"
    pd.read_csv(daily)[["date", "wti"]].to_csv(oil, index=False)
    tree = f"data.histories=[{{path: {daily}, price_column: sp500}}, {{path: {oil}, price_column: wti}}]"
    before = data_fingerprint(load_config(None, ["data.source=file", tree]).data)
    assert before["path"] == f"{daily}, {oil}"
    oil.write_text(oil.read_text().replace("12.42", "12.43"))
    assert data_fingerprint(load_config(None, ["data.source=file", tree]).data)["sha256"] != before["sha256"]
    shared = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, wti]"]).data
    assert data_fingerprint(shared)["path"] == str(daily)  # one file: the record of a one-file run


# --- the shipped real series -----------------------------------------------------------------------


def test_the_shipped_daily_closes_are_what_the_script_builds_from_arch():
    pytest.importorskip("arch")
    res = subprocess.run([sys.executable, str(REPO / "examples" / "make_daily_closes.py"), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    frame = pd.read_csv(DAILY)
    assert list(frame.columns) == ["date", "sp500", "nasdaq", "wti"] and len(frame) == 5012
    assert (frame["date"].iloc[0], frame["date"].iloc[-1]) == ("1999-01-04", "2018-12-28")
    sp = pd.read_csv(SP500).set_index("date")["close"]
    assert (sp.loc[frame["date"]].to_numpy() == frame["sp500"].to_numpy()).all()  # the same closes, on the common days
