"""Several price histories (issue 37 item 3), the data side: the config's two shapes
(`data.price_columns`, `data.histories`) and their one-line errors, the loader's checks (one
calendar, a column that is not a price, a file too short for the fold layout: each naming the
history), the start-up line and history table, the memory estimate, the resume record of several
files, and the shipped real series (examples/daily_closes.csv, built from `arch`'s data)."""

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
ALIGN = 'histories must share one calendar: align them first (docs/data.md "Several price histories")'


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


# --- loading: each history validated, then one calendar --------------------------------------------


def test_histories_load_on_one_calendar_each_with_its_name_and_column(daily):
    cfg = load_config(None, ["data.source=file", f"data.path={daily}", "data.price_columns=[sp500, WTI]"])
    a, b = load_histories(cfg.data)
    assert a.index.equals(b.index) and len(a) == 900
    assert (a.attrs["history"], b.attrs["history"], b.attrs["source_column"]) == ("sp500", "WTI", "wti")
    assert b.iloc[0] == pd.read_csv(daily)["wti"].iloc[0]


def test_wti_beside_the_sp500_closes_is_refused_at_the_first_date_that_differs(tmp_path):
    """The real case: FRED's WTI series trades on days the exchanges were shut (and not on some
    they were open); its first departure from the S&P 500's calendar is named."""
    arch_data = pytest.importorskip("arch.data.wti")
    wti = arch_data.load()["DCOILWTICO"].loc["1999":"2018"].dropna()
    path = tmp_path / "wti.csv"
    pd.DataFrame({"date": wti.index.strftime("%Y-%m-%d"), "close": wti.to_numpy()}).to_csv(path, index=False)
    msg = market_error("data.source=file", f"data.histories=[{{path: {SP500}}}, {{path: {path}}}]")
    assert msg == (f"data.histories: history 'wti' ({path}, column 'close') has 2000-01-04 in row 252 where history "
                   f"'sp500_closes' has 1999-12-31; {ALIGN}")


def test_a_shorter_history_and_one_without_times_are_refused(tmp_path, daily):
    frame = pd.read_csv(daily)
    frame.head(800).to_csv(tmp_path / "short.csv", index=False)
    frame[["sp500"]].to_csv(tmp_path / "rows.csv", index=False)
    both = "data.histories=[{{path: {a}, price_column: sp500}}, {{path: {b}, price_column: {c}}}]"
    msg = market_error("data.source=file", both.format(a=daily, b=tmp_path / "short.csv", c="nasdaq"), *SMALL)
    assert msg == (f"data.histories: history 'short' ({tmp_path / 'short.csv'}, column 'nasdaq'): 800 rows, history "
                   f"'daily' 900: 'daily' goes on at 2002-03-20 after 'short' ends; {ALIGN}")
    msg = market_error("data.source=file", both.format(a=daily, b=tmp_path / "rows.csv", c="sp500"), *SMALL)
    assert msg == (f"data.histories: history 'rows' ({tmp_path / 'rows.csv'}, column 'sp500'): history 'daily' has "
                   f"timestamps and 'rows' none; {ALIGN}")


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
