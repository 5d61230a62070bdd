"""Build examples/daily_closes.csv: three real daily price histories on one calendar, from the data
sets the `arch` package ships (its test extra installs it; arch's licence, an NCSA-style one,
allows redistribution with its notice: examples/DATA_SOURCES.md):

- sp500: the S&P 500 index's daily close (`arch.data.sp500`, column `Close`, 1999-01-04..2018-12-31);
- nasdaq: the NASDAQ Composite's daily close (`arch.data.nasdaq`, column `Close`, the same dates);
- wti: West Texas Intermediate crude oil, dollars a barrel (`arch.data.wti`, column `DCOILWTICO`,
  from FRED; 1986-01-02..2019-01-03).

The indices trade on the NYSE calendar; FRED's WTI series has its own (it has prices on 186 days
the exchanges were shut in 1999-2018, and none on 19 days they traded). tune-gems trains
several histories only on one calendar (docs/data.md "Several price histories"), so this script
does what a user does with any multi-asset data: keep the dates every series has a price on (an
inner join, then the rows where any price is missing dropped), here 5,012 rows of 5,031. Run it
from the repository root:

    python examples/make_daily_closes.py            # writes examples/daily_closes.csv
    python examples/make_daily_closes.py --check    # exit 1 if the shipped file differs

tests/test_histories_data.py checks that the shipped file is what this script writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parent / "daily_closes.csv"


def daily_closes() -> pd.DataFrame:
    """The three histories on the dates all of them have a price (date, sp500, nasdaq, wti)."""
    from arch.data import nasdaq, sp500, wti

    series = {"sp500": sp500.load()["Close"], "nasdaq": nasdaq.load()["Close"], "wti": wti.load()["DCOILWTICO"]}
    frame = pd.concat(series, axis=1, join="inner").dropna()
    frame.index = pd.DatetimeIndex(frame.index).strftime("%Y-%m-%d")
    return frame.rename_axis("date").reset_index()


def csv_text() -> str:
    return daily_closes().to_csv(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    args = parser.parse_args(argv)
    text = csv_text()
    if args.check:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"{OUT.name}: {'matches' if same else 'differs from'} what arch's data gives")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
