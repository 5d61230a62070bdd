"""Build the real price files of examples/ from the data sets that Python packages ship for their own
examples (their licences allow redistribution with their notices: examples/DATA_SOURCES.md).

daily_closes.csv: three daily price histories on one calendar, from the `arch` package (its test
extra installs it):

- sp500: the S&P 500 index's daily close (`arch.data.sp500`, column `Close`, 1999-01-04..2018-12-31);
- nasdaq: the NASDAQ Composite's daily close (`arch.data.nasdaq`, column `Close`, the same dates);
- wti: West Texas Intermediate crude oil, dollars a barrel (`arch.data.wti`, column `DCOILWTICO`,
  from FRED; 1986-01-02..2019-01-03).

The indices trade on the NYSE calendar; FRED's WTI series has its own (it has prices on 186 days
the exchanges were shut in 1999-2018, and none on 19 days they traded). This file keeps the dates
every series has a price on (an inner join, then the rows where any price is missing dropped),
here 5,012 rows of 5,031: what a user does to run several histories on one calendar.

eight_histories.csv: eight daily price histories of ERA_ROWS trading days each, in four calendars
that are never aligned (each history keeps its own market's dates):

- sp500_1990, jpm_1990, xom_1990: the S&P 500 index and the adjusted closes of JPMorgan Chase and
  Exxon Mobil on the first ERA_ROWS days of skfolio's data (`skfolio.datasets.load_sp500_index`,
  column `SP500`; `load_sp500_dataset`, columns `JPM`, `XOM`; 1990-01-02..2005-11-08), dates in
  `date_nyse_1990`;
- sp500_2007, jpm_2007, xom_2007: the same three on its last ERA_ROWS days
  (2007-02-09..2022-12-28), dates in `date_nyse_2007`;
- wti_1986, wti_2003: FRED's WTI (`arch.data.wti`) on its first and its last ERA_ROWS days with a
  price (1986-01-02..2001-10-16 and 2003-02-03..2019-01-03), dates in `date_wti_1986` and
  `date_wti_2003`.

So the three histories of one NYSE era share a calendar (the same days), and the four calendars
have disjoint validation and test windows at the split 0.55 / 0.25 / 0.2 (docs/data.md "Eight
histories in four calendars"). skfolio is read from its installed data files, not imported (its
data need no more than `pip install --no-deps skfolio`). Run this script from the repository root:

    python examples/make_daily_closes.py                       # writes both files
    python examples/make_daily_closes.py --check               # exit 1 if a shipped file differs
    python examples/make_daily_closes.py --check daily_closes.csv

A file whose source package is not installed is named and skipped (exit 0 if every file that
could be built matches). tests/test_histories_data.py and tests/test_eight_histories.py check the
shipped files against what this script writes.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent

ERA_ROWS = 4000
"""Trading days per history of eight_histories.csv: at the split 0.55 / 0.25 / 0.2, 2,200 training,
1,000 validation (the validation window of sweeps/histories_factorial.yaml) and 800 test days; two
such eras fit skfolio's 8,313 days (1990-2022) without sharing a day."""


class SourceMissing(Exception):
    """The package a file is built from is not installed (the message says what to install)."""


def daily_closes() -> pd.DataFrame:
    """The three histories on the dates all of them have a price (date, sp500, nasdaq, wti)."""
    try:
        from arch.data import nasdaq, sp500, wti
    except ImportError:
        raise SourceMissing("needs the arch package (pip install arch)") from None

    series = {"sp500": sp500.load()["Close"], "nasdaq": nasdaq.load()["Close"], "wti": wti.load()["DCOILWTICO"]}
    frame = pd.concat(series, axis=1, join="inner").dropna()
    frame.index = pd.DatetimeIndex(frame.index).strftime("%Y-%m-%d")
    return frame.rename_axis("date").reset_index()


def _skfolio_data(name: str) -> pd.DataFrame:
    """One of the price tables skfolio ships (skfolio/datasets/data/<name>), read as its
    `load_gzip_compressed_csv_data` reads it, without importing skfolio (whose import needs
    scikit-learn, cvxpy and more)."""
    spec = importlib.util.find_spec("skfolio")
    if spec is None or not spec.submodule_search_locations:
        raise SourceMissing("needs skfolio's data files (pip install --no-deps skfolio)")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / name
    frame = pd.read_csv(path, sep=",", index_col=0)
    frame.index = pd.to_datetime(frame.index, format="%Y-%m-%d")
    return frame


def _era(prices: pd.DataFrame, calendar: str) -> pd.DataFrame:
    """ERA_ROWS rows of histories on one calendar: its date column `date_<calendar>_<first year>`,
    then each history as `<column>_<first year>`."""
    year = prices.index[0].year
    out = prices.add_suffix(f"_{year}")
    out.insert(0, f"date_{calendar}_{year}", prices.index.strftime("%Y-%m-%d"))
    return out.reset_index(drop=True)


def eight_histories() -> pd.DataFrame:
    """Eight histories of ERA_ROWS days in four calendars, side by side (module docstring)."""
    try:
        from arch.data import wti
    except ImportError:
        raise SourceMissing("needs the arch package (pip install arch)") from None

    index, stocks = _skfolio_data("sp500_index.csv.gz"), _skfolio_data("sp500_dataset.csv.gz")
    if not index.index.equals(stocks.index):
        raise ValueError("skfolio's S&P 500 index and constituents have different dates")
    nyse = pd.DataFrame({"sp500": index["SP500"], "jpm": stocks["JPM"], "xom": stocks["XOM"]})
    oil = wti.load()["DCOILWTICO"].dropna().to_frame("wti")  # FRED marks a day without a price as missing
    if len(nyse) < 2 * ERA_ROWS or len(oil) < 2 * ERA_ROWS:
        raise ValueError(f"two eras of {ERA_ROWS} days need {2 * ERA_ROWS} rows: NYSE {len(nyse)}, WTI {len(oil)}")
    first, last = slice(None, ERA_ROWS), slice(-ERA_ROWS, None)
    blocks = [_era(nyse.iloc[first], "nyse"), _era(nyse.iloc[last], "nyse"), _era(oil.iloc[first], "wti"), _era(oil.iloc[last], "wti")]
    return pd.concat(blocks, axis=1)


FILES: dict[str, Callable[[], pd.DataFrame]] = {"daily_closes.csv": daily_closes, "eight_histories.csv": eight_histories}
"""Each shipped file and the function that builds it from its source package."""


def csv_text(name: str) -> str:
    return FILES[name]().to_csv(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files instead of writing them")
    parser.add_argument("files", nargs="*", metavar="FILE", help=f"some of {', '.join(FILES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [f for f in args.files if f not in FILES]
    if unknown:
        parser.error(f"no such file to build: {unknown[0]} (one of {', '.join(FILES)})")
    differ = 0
    for name in args.files or FILES:
        out = HERE / name
        try:
            text = csv_text(name)
        except SourceMissing as e:
            print(f"{name}: skipped, {e}")
            continue
        if args.check:
            same = out.is_file() and out.read_text() == text
            differ += not same
            print(f"{name}: {'matches' if same else 'differs from'} what its source package's data gives")
        else:
            out.write_text(text)
            print(f"wrote {out} ({text.count(chr(10)) - 1} rows)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
