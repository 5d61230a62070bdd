"""The hostile matrix, round six: the fold table the overlap correction reads, the side tables a
confirmation trusts, one market counted twice, names that print as another, a sweep's Triton
trials on a CPU, and what a kill leaves of an analysis.

The refusals run like the matrix's cases (tests/test_hostile_matrix.py `run_cases`): the real
`tune_gems.commands.cli.main` in a sandbox of its own, snapshotted before and after; each must
answer exit 2, exactly one printable stderr line naming the file, key or row, no stdout, and
leave the sandbox as it was. The analysis's and the config's cases run in this process (they
stop before torch trains anything), the data and sweep ones in forked children. What must run to
the end (an experiment without a usable fold table, a confirmation's own fold table, an analysis
killed and run again) has tests of its own below.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pandas as pd
import pytest
import yaml

from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli_in_process, store_spec
from test_bad_input import both, write
from test_hostile_matrix import IN_PROCESS, Case, _paired, misbehaved, run_cases
from test_hostile_round3 import MARKER, TINY_TRAIN, stored_train
from tune_gems.contracts.errors import control_characters
from tune_gems.data.segments import TrainingReach, fold_bounds, fold_table

pytestmark = pytest.mark.slow

ROWS = 6000
"""The rows of the price series the fold fixture's layout is cut from."""
FOLD_EFFECTS = [0.5, 0.3, 0.6, 0.4]


def layout(k: int = 4, scheme: str = "walk_forward") -> pd.DataFrame:
    """The fold table a run of `ROWS` rows writes for k expanding folds (`data.segments.fold_table`)."""
    prices = pd.Series(np.arange(ROWS, dtype=float))
    spec = SimpleNamespace(scheme=scheme, k=k, embargo=0, val_length=None, gap=0, layout="expanding", train_length=None)
    reach = TrainingReach(window=32, n_step=3, episode_length=256)
    return fold_table(prices.index, fold_bounds(prices, [0.7, 0.15, 0.15], spec, 64, reach), "expanding")


_TEMPLATE: list[Path] = []


def _folded(dest: Path) -> Path:
    """A copy of a 4-fold experiment as a sweep leaves it (one trial, control / wired g12 on 6
    seeds per fold) with its folds.parquet (the expanding layout) and histories.parquet."""
    if not _TEMPLATE:
        import atexit

        from fake_results import fold_scenario

        home = Path(tempfile.mkdtemp(prefix="tg-round6-"))
        atexit.register(shutil.rmtree, home, True)
        exp = fold_scenario(home / "exp", FOLD_EFFECTS, n=6)
        ids = {"experiment": "exp", "trial_id": "t0"}
        layout().assign(**ids)[["experiment", "trial_id", *layout().columns]].to_parquet(exp / "folds.parquet", index=False)
        pd.DataFrame([{**ids, "history": 0, "name": "synthetic", "source": "synthetic", "column": None, "first": "row 1",
                       "last": f"row {ROWS}", "rows": ROWS}]).to_parquet(exp / "histories.parquet", index=False)
        _TEMPLATE.append(exp)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(_TEMPLATE[0], dest)
    return dest


def folded(*changes: Callable[[Path], None]) -> Callable[[Path], None]:
    def go(d: Path) -> None:
        exp = _folded(d / "exp")
        for change in changes:
            change(exp)

    return go


def edit(table: str, how: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    """`<experiment>/<table>.parquet` rewritten through `how`."""
    return lambda exp: how(pd.read_parquet(exp / f"{table}.parquet")).to_parquet(exp / f"{table}.parquet", index=False)


def at(row: int, column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def go(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if isinstance(value, str):  # a text column (parquet holds one type per column): the others as written
            df[column] = df[column].astype(str)
        elif value is None:
            df[column] = df[column].astype(object)
        elif isinstance(value, float):
            df[column] = df[column].astype(float)
        df.loc[row, column] = value
        return df

    return go


def rows(**values) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """Row 0 of the fold table with `values` (the rest of its layout kept)."""
    def go(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        for column, value in values.items():
            df[column] = df[column].astype(str if isinstance(value, str) else object)
            df.loc[0, column] = value
        return df

    return go


def as_csv(table: str, how: Callable[[pd.DataFrame], pd.DataFrame] = lambda df: df, text: str | None = None):
    """`<table>.parquet` replaced by `<table>.csv` (a train run's form), through `how`, or `text`."""
    def go(exp: Path) -> None:
        df = how(pd.read_parquet(exp / f"{table}.parquet"))
        (exp / f"{table}.parquet").unlink()
        if text is None:
            df.to_csv(exp / f"{table}.csv", index=False)
        else:
            (exp / f"{table}.csv").write_text(text)

    return go


def members_history(h: int) -> Callable[[Path], None]:
    return edit("members", lambda m: m.assign(history=h))


L0 = layout().iloc[0]
"""Fold 0 of the fixture's layout: its windows, for forging rows that agree with themselves."""
V0, V1, T0 = int(L0["val_start"]), int(L0["val_end"]), int(L0["test_start"])
NAN = float("nan")


def fold_table_cases() -> list[Case]:
    """The fold table the overlap correction reads: every crash and silent case of the issue."""
    folds = ["analyze", "exp"]
    bad = {  # id: (edit of folds.parquet, what the line names besides the file)
        "train-rows-zero": (at(1, "train_rows", 0), ["train_rows", ">= 1"]),
        "group-rows-zero": (at(1, "group_rows", 0), ["group_rows", ">= 1"]),
        "train-rows-negative": (at(2, "train_rows", -5), ["train_rows", ">= 1"]),
        "group-rows-negative": (at(2, "group_rows", -5), ["group_rows", ">= 1"]),
        "train-rows-text": (at(0, "train_rows", "ten"), ["train_rows", "'ten'", "expected numbers"]),
        "group-rows-text": (at(0, "group_rows", "ten"), ["group_rows", "expected numbers"]),
        "train-rows-nan": (at(0, "train_rows", NAN), ["train_rows", "missing"]),
        "group-rows-nan": (at(3, "group_rows", NAN), ["group_rows", "missing"]),
        "train-rows-inf": (at(0, "train_rows", float("inf")), ["train_rows", "whole numbers"]),
        "train-rows-fraction": (at(0, "train_rows", 1.5), ["train_rows", "whole numbers"]),
        "train-rows-1e18": (at(0, "train_rows", 1e18), ["train_rows", "disagrees with train_runs"]),
        "group-rows-1e18": (at(0, "group_rows", 1e18), ["group_rows", "disagrees with the validation window"]),
        "train-rows-contradicts-runs": (lambda df: df.assign(train_rows=df["train_rows"] * 2), ["train_rows", "disagrees"]),
        "group-rows-contradicts-window": (at(2, "group_rows", 7), ["group_rows", "row 2", "disagrees"]),
        "train-runs-nan": (at(0, "train_runs", None), ["train_runs", "not runs of rows"]),
        "train-runs-empty": (at(0, "train_runs", ""), ["train_runs", "not runs of rows"]),
        "train-runs-reversed": (at(0, "train_runs", "500:100"), ["train_runs", "'500:100'"]),
        "train-runs-empty-run": (at(0, "train_runs", "100:100"), ["train_runs", "not runs of rows"]),
        "train-runs-not-runs": (at(0, "train_runs", "0-10"), ["train_runs", "not runs of rows"]),
        "train-runs-negative": (at(0, "train_runs", "-5:10"), ["train_runs", "not runs of rows"]),
        "train-runs-overlapping": (at(0, "train_runs", "0:100 50:200"), ["train_runs", "not runs of rows"]),
        "train-runs-unsorted": (at(0, "train_runs", "200:300 0:100"), ["train_runs", "not runs of rows"]),
        "train-runs-number": (lambda df: df.assign(train_runs=df["train_rows"]), ["train_runs", "not runs of rows"]),
        "train-runs-into-validation": (rows(train_runs=f"0:{V1}", train_rows=V1, train_end=V1), ["train_runs", "meets the validation window"]),
        "train-runs-into-test": (rows(train_runs=f"0:{V0} {T0}:{T0 + 10}", train_rows=V0 + 10, train_end=T0 + 10),
                                 ["test_start", "does not follow"]),
        "runs-past-the-data": (rows(test_end=10 ** 18), ["test_end", "past the history's 6000 rows"]),
        "test-end-past-the-history": (rows(test_end=ROWS + 1), ["test_end", "past the history"]),
        "span-contradicts-runs": (at(1, "train_start", 5), ["train_start", "span of train_runs"]),
        "val-reversed": (rows(val_start=V1, val_end=V0), ["group_rows", "disagrees"]),
        "fold-negative": (at(0, "fold", -1), ["column fold", ">= 0"]),
        "fold-fraction": (at(0, "fold", 1.5), ["column fold", "whole numbers"]),
        "fold-text": (at(0, "fold", "zero"), ["column fold", "expected numbers"]),
        "fold-nan": (at(0, "fold", NAN), ["column fold", "missing"]),
        "embargo-negative": (at(0, "embargo", -1), ["embargo", ">= 0"]),
        "scheme-unknown": (at(0, "scheme", "magic"), ["scheme", "'magic'"]),
        "two-rows-one-fold": (lambda df: pd.concat([df, df.iloc[[1]]], ignore_index=True), ["repeat one fold", "fold 1"]),
        "two-differing-rows-one-fold": (lambda df: pd.concat([df, df.iloc[[0]].assign(train_rows=1)], ignore_index=True),
                                        ["repeat one fold"]),
        "a-fold-missing": (lambda df: df[df["fold"] != 3], ["no row for fold 3", "trial 't0'"]),
        "every-fold-missing": (lambda df: df.iloc[0:0], ["no row for fold 0"]),
        "another-trials-table": (lambda df: df.assign(trial_id="t9"), ["no row for fold 0", "trial 't0'"]),
        "trial-id-missing": (at(0, "trial_id", None), ["no row for fold 0"]),
        **{f"dropped-{c}": ((lambda c: lambda df: df.drop(columns=[c]))(c), ["missing column", c])
           for c in ("train_runs", "train_rows", "group_rows", "fold")},
        "two-layout-columns-dropped": (lambda df: df.drop(columns=["train_runs", "group_rows"]), ["missing column train_runs"]),
    }
    c = [Case(f"folds-{cid}", folds, ["folds.parquet", *frags], folded(edit("folds", how))) for cid, (how, frags) in bad.items()]
    header = ",".join(layout().columns)
    c += [
        Case("folds-csv-header-only", folds, ["folds.csv", "no row for fold 0"], folded(as_csv("folds", text=header + "\n"))),
        Case("folds-csv-text-row-count", folds, ["folds.csv", "train_rows", "expected numbers"],
             folded(as_csv("folds", at(0, "train_rows", "ten")))),
        Case("folds-csv-zero-row-count", folds, ["folds.csv", "group_rows", ">= 1"], folded(as_csv("folds", at(0, "group_rows", 0)))),
        Case("folds-csv-negative-row-count", folds, ["folds.csv", "train_rows", ">= 1"], folded(as_csv("folds", at(0, "train_rows", -1)))),
        Case("folds-csv-reversed-runs", folds, ["folds.csv", "train_runs"], folded(as_csv("folds", at(0, "train_runs", "9:3")))),
        Case("folds-unreadable", folds, ["folds.parquet", "not a readable table"],
             folded(lambda exp: (exp / "folds.parquet").write_bytes(b"PAR1 not parquet"))),
        Case("folds-empty-file", folds, ["folds.parquet", "not a readable table"],
             folded(lambda exp: (exp / "folds.parquet").write_bytes(b""))),
    ]
    return c


def history_table_cases() -> list[Case]:
    """The history table: members whose history ids it lacks, and names that print as another."""
    h = ["analyze", "exp"]
    names = {"zero-width-space": "AA\u200bPL", "zero-width-joiner": "AA\u200dPL", "right-to-left-override": "\u202eLPAA",
             "left-to-right-mark": "AAPL\u200e", "byte-order-mark": "\ufeffAAPL", "no-break-space": "S&P\u00a0500",
             "escape": "AA\x1b[31mPL", "newline": "AA\nPL", "formula-equals": "=HYPERLINK(\"x\")", "formula-plus": "+1",
             "formula-minus": "-1+2", "formula-at": "@SUM(A1)", "empty": " ", "reserved-bar": "a|b"}
    c = [Case(f"histories-name-{cid}", h, ["histories.parquet", "column name", "row 0"], folded(edit("histories", at(0, "name", n))))
         for cid, n in names.items()]
    c += [
        Case("histories-name-missing", h, ["histories.parquet", "column name", "is missing"], folded(edit("histories", at(0, "name", None)))),
        Case("histories-member-history-absent", h, ["histories.parquet", "no row for history 1"], folded(members_history(1))),
        Case("histories-another-trials-table", h, ["histories.parquet", "no row for history 0", "trial 't0'"],
             folded(members_history(0), edit("histories", lambda df: df.assign(trial_id="t9")))),
        Case("histories-two-rows-one-history", h, ["histories.parquet", "repeat one history"],
             folded(edit("histories", lambda df: pd.concat([df, df], ignore_index=True)))),
        Case("histories-history-negative", h, ["histories.parquet", "column history", ">= 0"], folded(edit("histories", at(0, "history", -1)))),
        Case("histories-history-text", h, ["histories.parquet", "column history"], folded(edit("histories", at(0, "history", "zero")))),
        Case("histories-rows-zero", h, ["histories.parquet", "column rows", ">= 1"], folded(edit("histories", at(0, "rows", 0)))),
        Case("histories-rows-text", h, ["histories.parquet", "column rows"], folded(edit("histories", at(0, "rows", "many")))),
        Case("histories-dropped-history", h, ["histories.parquet", "missing column history"],
             folded(edit("histories", lambda df: df.drop(columns=["history"])))),
        Case("histories-unreadable", h, ["histories.parquet", "not a readable table"],
             folded(lambda exp: (exp / "histories.parquet").write_text("garbage"))),
        Case("histories-fewer-rows-than-the-folds", h, ["folds.parquet", "test_end", "past the history's 100 rows"],
             folded(edit("histories", at(0, "rows", 100)))),
    ]
    return c


# -- a confirmation trusts the search's tables: checksummed when the search wrote them ---------------


def search(*changes: Callable[[Path], None]) -> Callable[[Path], None]:
    """A finished search as `confirm` reads it (tests/test_hostile_round4.py `confirmable`) with a
    fold and a history table, its marker recording the spec's and every table's checksum; then
    `changes` (edits after the sweep wrote the tables)."""
    def go(d: Path) -> None:
        from tune_gems.sweep.spec_load import load_spec

        exp = _paired(d / "exp")
        trials = pd.read_parquet(exp / "trials.parquet")
        trials["verdict_gain_g12"] = [0.1 if w else NAN for w in trials["gems.g12.mode"] == "wire"]
        trials.to_parquet(exp / "trials.parquet", index=False)
        ids = pd.DataFrame({"experiment": "exp", "trial_id": trials["trial_id"]})
        ids.merge(layout(1), how="cross").to_parquet(exp / "folds.parquet", index=False)
        ids.assign(history=0, name="synthetic", rows=ROWS).to_parquet(exp / "histories.parquet", index=False)
        store_spec(exp, yaml.safe_dump(load_spec(SMOKE, TINY_SWEEP).model_dump(mode="json"), sort_keys=False).encode())
        for change in changes:
            change(exp)

    return go


def in_marker(how: Callable[[dict], dict]) -> Callable[[Path], None]:
    def go(exp: Path) -> None:
        (exp / MARKER).write_text(json.dumps(how(json.loads((exp / MARKER).read_text()))))

    return go


def confirm_cases() -> list[Case]:
    confirm = ["confirm", "exp"]
    edited = ["edited since tune-gems wrote it"]
    c = [
        Case("confirm-members-cut", confirm, ["members.parquet", *edited], search(edit("members", lambda m: m.iloc[: len(m) // 2]))),
        Case("confirm-members-cut-to-one-trial", confirm, ["members.parquet", *edited],
             search(edit("members", lambda m: m[m["trial_id"] == m["trial_id"].iloc[0]]))),
        Case("confirm-members-value-edited", confirm, ["members.parquet", *edited], search(edit("members", at(0, "val_sharpe", 9.0)))),
        Case("confirm-folds-deleted", confirm, ["folds.parquet", "deleted since tune-gems wrote it"],
             search(lambda exp: (exp / "folds.parquet").unlink())),
        Case("confirm-folds-edited", confirm, ["folds.parquet", *edited], search(edit("folds", at(0, "group_rows", 10 ** 6)))),
        Case("confirm-folds-cut", confirm, ["folds.parquet", *edited], search(edit("folds", lambda df: df.iloc[:1]))),
        Case("confirm-folds-replaced-by-csv", confirm, ["folds.csv", "not written by the run"], search(as_csv("folds"))),
        Case("confirm-folds-csv-added", confirm, ["folds.csv", "not written by the run"],
             search(lambda exp: layout().to_csv(exp / "folds.csv", index=False))),
        Case("confirm-histories-deleted", confirm, ["histories.parquet", "deleted"], search(lambda exp: (exp / "histories.parquet").unlink())),
        Case("confirm-histories-edited", confirm, ["histories.parquet", *edited], search(edit("histories", at(0, "name", "other")))),
        Case("confirm-histories-csv-added", confirm, ["histories.csv", "not written by the run"],
             search(lambda exp: pd.DataFrame({"history": [0]}).to_csv(exp / "histories.csv", index=False))),
        Case("confirm-trials-edited", confirm, ["trials.parquet", *edited], search(edit("trials", at(0, "verdict_gain_g12", 5.0)))),
        Case("confirm-history-edited", confirm, ["history.parquet", *edited], search(edit("history", lambda h: h.iloc[1:]))),
        Case("confirm-arms-added", confirm, ["arms.parquet", "not written by the run"],
             search(lambda exp: pd.DataFrame({"arm": ["a"]}).to_parquet(exp / "arms.parquet"))),
        Case("confirm-gems-json-added", confirm, ["gems.json", "not written by the run"],
             search(lambda exp: (exp / "gems.json").write_text("[]"))),
        Case("confirm-members-deleted", confirm, ["members.parquet", "deleted"], search(lambda exp: (exp / "members.parquet").unlink())),
        Case("confirm-marker-without-table-checksums", confirm, [MARKER, "no checksum of the result tables"],
             search(in_marker(lambda b: {k: v for k, v in b.items() if k != "tables"}))),
        Case("confirm-marker-tables-not-a-mapping", confirm, [MARKER, "no checksum of the result tables"],
             search(in_marker(lambda b: {**b, "tables": "all fine"}))),
        Case("confirm-marker-table-checksum-not-text", confirm, [MARKER, "no checksum of the result tables"],
             search(in_marker(lambda b: {**b, "tables": {**b["tables"], "members.parquet": 7}}))),
        Case("confirm-folds-is-a-fifo", confirm, ["folds.parquet", "FIFO"],
             search(lambda exp: ((exp / "folds.parquet").unlink(), os.mkfifo(exp / "folds.parquet")))),
    ]
    return c


# -- price data, names and keys --------------------------------------------------------------------


def market(seed: int, n: int = 1200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100 * np.cumprod(1 + 0.01 * rng.standard_normal(n))


def prices_csv(columns: dict[str, np.ndarray], header: str | None = None, n: int = 1200) -> str:
    dates = pd.bdate_range("2001-01-01", periods=n).strftime("%Y-%m-%d")
    text = pd.DataFrame({"date": dates, **columns}).to_csv(index=False)
    return text if header is None else header + "\n" + text.split("\n", 1)[1]


def spiked(value: float, row: int = 7, seed: int = 1) -> np.ndarray:
    p = market(seed)
    p[row] = value
    return p


FILE = ["data.source=file", "data.path=p.csv"]


def data_cases() -> list[Case]:
    """Price files: one market counted twice, a header that names a column twice, absurd steps."""
    a, b = market(1), market(2)
    two = ["data.price_columns=[AAPL, XOM]"]
    c = [
        Case("data-two-identical-price-columns", [*TINY_TRAIN, *FILE, "data.price_columns=[AAPL, AAPL2, XOM]", "--out", "out"],
             ["data.price_columns.1", "'AAPL2'", "'AAPL'", "same price in every row"],
             write("p.csv", prices_csv({"AAPL": a, "AAPL2": a, "XOM": b}))),
        Case("data-two-identical-histories-entries", [*TINY_TRAIN, *FILE, "data.histories=[{price_column: AAPL}, {price_column: B}]",
             "--out", "out"], ["data.histories.1", "same price in every row"], write("p.csv", prices_csv({"AAPL": a, "B": a}))),
        Case("data-two-identical-files", [*TINY_TRAIN, "data.source=file", "data.histories=[{path: a.csv}, {path: b.csv}]", "--out", "out"],
             ["data.histories.1", "b.csv", "a.csv", "same price"],
             both(write("a.csv", prices_csv({"close": a})), write("b.csv", prices_csv({"close": a})))),
        Case("data-duplicate-header-names", [*TINY_TRAIN, *FILE, *two, "--out", "out"], ["p.csv", "'AAPL' appears 2 times", "columns 2, 3"],
             write("p.csv", prices_csv({"AAPL": a, "AAPL2": b, "XOM": b}, header="date,AAPL,AAPL,XOM"))),
        Case("data-duplicate-header-one-history", [*TINY_TRAIN, *FILE, "data.price_column=XOM", "--out", "out"],
             ["p.csv", "'AAPL' appears 2 times"], write("p.csv", prices_csv({"AAPL": a, "A2": b, "XOM": b}, header="date,AAPL,AAPL,XOM"))),
        Case("data-duplicate-header-three-times", [*TINY_TRAIN, *FILE, "data.price_column=close", "--out", "out"],
             ["p.csv", "'close' appears 3 times"], write("p.csv", prices_csv({"a": a, "b": b, "c": a + 1}, header="date,close,close,close"))),
    ]
    steps = {"1e308": 1e308, "1e-300": 1e-300, "up-10000x": None, "down-10000x": None, "max-float": sys.float_info.max,
             "min-subnormal": 5e-324}
    for cid, value in steps.items():
        p = market(1)
        if value is None:
            p[7:] = p[7:] * (1e4 if cid.startswith("up") else 1e-4)
        else:
            p[7] = value
        c.append(Case(f"data-price-step-{cid}", [*TINY_TRAIN, *FILE, "--out", "out"], ["p.csv", "row 8", "column 'close'", "1000x"],
                      write("p.csv", prices_csv({"close": p}))))
        c.append(Case(f"data-price-step-{cid}-second-history", [*TINY_TRAIN, *FILE, *two, "--out", "out"],
                      ["history 'XOM'", "p.csv", "row 8", "column 'XOM'"], write("p.csv", prices_csv({"AAPL": a, "XOM": p}))))
    for case in c:
        case.family = "round6_data"
    return c


def name_cases() -> list[Case]:
    """History names (config): printable, unambiguous, never read as a formula."""
    names = {"zero-width-space": "AA\u200bPL", "zero-width-joiner": "AA\u200dPL", "right-to-left-override": "\u202eLPAA",
             "left-to-right-mark": "AAPL\u200e", "byte-order-mark": "\ufeffAAPL", "no-break-space": "S&P\u00a0500",
             "line-separator": "AA\u2028PL", "private-use": "AA\ue000PL", "unassigned": "AA\u0378PL",
             "formula-equals": "=1+1", "formula-plus": "+1", "formula-minus": "-SUM(A1)", "formula-at": "@A1"}
    two = "data.histories=[{price_column: AAPL}, {price_column: XOM}]"
    c = [Case(f"name-{cid}", [*TINY_TRAIN, *FILE, f"data.histories=[{{price_column: AAPL, name: {json.dumps(n)}}}, "
                              "{price_column: XOM}]", "--out", "out"], ["data.histories.0", "history name"])
         for cid, n in names.items()]
    c += [
        Case("name-fullwidth-twin", [*TINY_TRAIN, *FILE, "data.histories=[{price_column: AAPL, name: \uff21\uff21\uff30\uff2c}, "
             "{price_column: XOM, name: aapl}]", "--out", "out"], ["data.histories.1", "a second history named 'aapl'"]),
        Case("name-zero-width-column", [*TINY_TRAIN, *FILE, "data.price_columns=[\"AA\u200bPL\", XOM]", "--out", "out"],
             ["data.price_columns.0", "history name"]),
        Case("name-formula-column", [*TINY_TRAIN, *FILE, "data.price_columns=[\"=cmd\", XOM]", "--out", "out"],
             ["data.price_columns.0", "formula"]),
        Case("did-you-mean-a-history-entry-key", ["train", "c.yaml", *TINY_TRAIN[1:], "--out", "out"],
             ["data.histories.0.prices", "did you mean data.histories.0.price_column?"],
             write("c.yaml", "data:\n  source: file\n  path: p.csv\n  histories:\n    - {prices: AAPL}\n    - {price_column: XOM}\n")),
        Case("did-you-mean-a-history-entry-typo", ["train", "c.yaml", *TINY_TRAIN[1:], "--out", "out"],
             ["data.histories.1.nmae", "did you mean data.histories.1.name?"],
             write("c.yaml", "data:\n  source: file\n  path: p.csv\n  histories:\n    - {price_column: AAPL}\n    - {nmae: XOM}\n")),
        Case("did-you-mean-a-history-entry-override", [*TINY_TRAIN, *FILE, two, "data.histories.0.prices=a", "--out", "out"],
             ["data.histories.0.prices", "did you mean data.histories.0.price_column?"]),
        Case("did-you-mean-a-history-entry-override-of-a-sweep", ["sweep", "spec.yaml", "config.data.histories.1.nmae=x",
             "--storage", "store", "--name", "x"], ["spec.yaml", "did you mean config.data.histories.1.name?"],
             write("spec.yaml", "storage: store\nconfig:\n  data:\n    source: file\n    path: p.csv\n    histories:\n"
                   "      - {price_column: AAPL}\n      - {price_column: XOM}\n")),
        Case("history-entry-override-past-the-list", [*TINY_TRAIN, *FILE, two, "data.histories.2.name=c", "--out", "out"],
             ["data.histories.2.name", "data.histories is a list of 2 entries"]),
        Case("history-entry-override-without-a-list", [*TINY_TRAIN, *FILE, "data.histories.0.prices=a", "--out", "out"],
             ["data.histories", "an entry is set by its index only in a list given first"]),
    ]
    for case in c:
        case.family = "round6_config"
    return c


def sweep_cases() -> list[Case]:
    """A sweep whose trials would run the Triton layers on a CPU without the interpreter: refused
    by the layers' own check before Ray starts."""
    sweep = ["sweep", "spec.yaml", *TINY_SWEEP, "--storage", "store", "--name", "x"]
    spec = write("spec.yaml", SMOKE.read_text())
    kernel = ["model.layer_kernel", "Triton's interpreter", "spec.yaml"]
    c = [
        Case("sweep-triton-on-the-cpu", [*sweep, "config.model.layer_kernel=triton"], ["config.model.layer_kernel", *kernel], spec),
        Case("sweep-triton-searched-on-the-cpu", [*sweep, "search.params={model.layer_kernel: {type: categorical, choices: [torch, triton]}}"],
             ["search.params.model.layer_kernel", *kernel], spec),
        Case("sweep-triton-with-resources-gpu-0", [*sweep, "config.model.layer_kernel=triton", "resources.gpu=0"], kernel, spec),
        Case("sweep-triton-on-device-cpu", [*sweep, "config.model.layer_kernel=triton", "config.device=cpu"], kernel, spec),
    ]
    for case in c:
        case.family = "round6_sweep"
        case.env = {"RAY_ADDRESS": ""}  # no cluster named: the trials run where Ray starts, on this CPU
    return c


def resume_cases() -> list[Case]:
    """A history file edited between a run and its resume is named under its own key."""
    a, b = market(1), market(2)
    files = ["data.source=file", "data.histories=[{path: a.csv}, {path: b.csv}]", "data.splits=[0.6,0.2,0.2]"]

    def setup(d: Path) -> None:
        write("a.csv", prices_csv({"close": a}))(d)
        write("b.csv", prices_csv({"close": b}))(d)
        stored_train(*files)(d)
        write("b.csv", prices_csv({"close": b * 1.01}))(d)

    def first(d: Path) -> None:
        write("a.csv", prices_csv({"close": a}))(d)
        write("b.csv", prices_csv({"close": b}))(d)
        stored_train(*files)(d)
        write("a.csv", prices_csv({"close": a * 1.01}))(d)

    resume = ["train", *files, "--out", "out", "--resume"]
    c = [Case("resume-second-history-file-edited", resume, ["data.histories.1.path", "b.csv", "changed since the run"], setup),
         Case("resume-first-history-file-edited", resume, ["data.histories.0.path", "a.csv", "changed since the run"], first)]
    for case in c:
        case.family = "round6_data"
    return c


def cases() -> list[Case]:
    c = fold_table_cases() + history_table_cases() + confirm_cases()
    for case in c:
        case.family = "round6_tables"
    return c + data_cases() + name_cases() + sweep_cases() + resume_cases()


CASES = cases()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("round6"), env_of=lambda c: c.env,
                     in_process=(*IN_PROCESS, "round6_tables", "round6_config"))


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


def test_every_round_six_case_is_one_printable_line_exit_2_and_changes_nothing(outcomes):
    def printable(out) -> None:
        assert not control_characters(out.stderr.rstrip("\n")), "a raw control character in the line"

    misbehaved(CASES, outcomes, printable)


# -- handled and stated: several folds without a usable fold table ----------------------------------


def _g12(folder: Path, **settings):
    from tune_gems.analysis.analyze import analyze

    res = analyze(folder, n_boot=50, **settings)
    return res, res.verdicts.set_index("gem").loc["g12"]


def test_the_fold_fixture_is_read_and_its_overlap_corrected(tmp_path):
    """The control of the fold-table cases: the untouched fixture analyses, its layout widening the
    pooled variance (folds that train from row 0 share rows)."""
    _res, row = _g12(_folded(tmp_path / "exp"))
    assert row["fold_overlap"] > 1.0 and "for folds that share training rows" in row["reason"]
    assert "not corrected" not in row["reason"]


@pytest.mark.parametrize("change, why", [
    (lambda exp: (exp / "folds.parquet").unlink(), "has no fold table (folds.parquet / folds.csv)"),
    (edit("folds", lambda df: df.drop(columns=["train_runs", "train_rows", "group_rows"])),
     "folds.parquet records no fold layout (train_runs, train_rows, group_rows"),
], ids=["deleted", "written-before-the-layout"])
def test_several_folds_without_a_usable_fold_table_say_the_overlap_is_not_corrected(tmp_path, change, why):
    """Deleted, or without the layout (results written before the fold table recorded it): the
    verdict over periods says "fold overlap not corrected" and why, in its reason and in
    factors.csv, and its fold_overlap is NaN (not known), not the 1.0 of folds that share nothing."""
    from tune_gems.analysis.verdicts.factors import GEM
    from tune_gems.analysis.verdicts.walk_forward import NOT_CORRECTED

    _res, corrected = _g12(_folded(tmp_path / "a"))
    exp = _folded(tmp_path / "b")
    change(exp)
    res, row = _g12(exp)
    assert f"{NOT_CORRECTED} (" in row["reason"] and why in row["reason"] and NOT_CORRECTED in row["why"], row["reason"]
    assert np.isnan(row["fold_overlap"]) and row["mde"] < corrected["mde"]
    factor = res.factors[res.factors["kind"] == GEM].set_index("factor").loc["gems.g12.mode"]
    assert NOT_CORRECTED in factor["reason"] if "reason" in factor else np.isnan(factor["fold_overlap"])


def test_one_fold_without_a_fold_table_says_nothing(tmp_path):
    """One validation period: there is no overlap to correct, so nothing is said."""
    from tune_gems.analysis.analyze import analyze

    v = analyze(_paired(tmp_path / "exp"), n_boot=50).verdicts
    assert not v["reason"].str.contains("not corrected").any()


def test_the_loader_hands_the_verdicts_the_validated_tables(tmp_path):
    """What the overlap and the fold dates are read from: the loader's validated tables
    (`Experiment.folds`, `Experiment.histories`), the layout's rows only where it has one."""
    from tune_gems.analysis.read.load import load_experiment
    from tune_gems.analysis.verdicts.walk_forward import experiment_overlap

    exp = load_experiment(_folded(tmp_path / "exp"))
    assert len(exp.folds.table) == 4 and exp.folds.uncorrected == [] and list(exp.histories["name"]) == ["synthetic"]
    assert experiment_overlap(exp.folds.table).factor > 1.0
    assert exp.folds.dates["fold"].tolist() == [0, 1, 2, 3]


# -- a confirmation's own fold table -------------------------------------------------------------------


def test_a_confirmation_writes_its_own_fold_table_and_carries_its_overlap(tmp_path):
    """`confirm` writes folds.parquet (a row per confirmation trial and fold, the layout the
    chosen configuration trains on: what a run of it writes) and the tables' checksums, so its
    verdicts carry the same fold-overlap factor as the discovery's instead of none."""
    from tune_gems.analysis.read.load import load_experiment
    from tune_gems.contracts.outputs import read_marker
    from tune_gems.contracts.run_record import TABLES_KEY
    from tune_gems.data.segments import FOLD_TABLE_COLUMNS
    from tune_gems.sweep.spec_load import load_spec
    from tune_gems.trainer.run_setup import prepare_market
    from tune_gems.analysis.verdicts.walk_forward import NOT_CORRECTED, experiment_overlap

    extra = ["config.data.folds.k=2"]
    spec = load_spec(SMOKE, [*TINY_SWEEP, *extra])
    search()(tmp_path)
    store_spec(tmp_path / "exp", yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False).encode())
    res = cli_in_process("confirm", str(tmp_path / "exp"), "--n-boot", "50", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "exp" / "confirmation"
    folds = pd.read_parquet(out / "folds.parquet")
    assert list(folds.columns) == ["experiment", "trial_id", *FOLD_TABLE_COLUMNS]
    assert sorted(zip(folds["trial_id"], folds["fold"])) == [("confirm-g12", 0), ("confirm-g12", 1)]
    import torch

    market = prepare_market(spec.base_config(), torch.device("cpu"))
    want = fold_table(market.index, market.bounds, spec.base_config().data.folds.layout, market.fold_ids)
    pd.testing.assert_frame_equal(folds[list(FOLD_TABLE_COLUMNS)], want, check_dtype=False)
    exp = load_experiment(out)
    assert exp.folds.uncorrected == [] and experiment_overlap(exp.folds.table).factor > 1.0
    assert set(read_marker(out)[TABLES_KEY]) >= {"folds.parquet", "members.parquet", "histories.parquet"}
    assert not pd.read_csv(out / "verdicts.csv")["reason"].astype(str).str.contains(NOT_CORRECTED).any()


# -- borderline: an absurd file size, the analysis's leftovers ------------------------------------------


def test_a_huge_sparse_price_file_is_refused_naming_its_own_key(tmp_path):
    """An 8 GiB sparse file (a few bytes on disk): the memory estimate bounds its rows by its size
    and refuses the run naming the key that reads it, never `data.synthetic.n`; nothing is
    written."""
    for name in ("big.csv", "small.csv"):
        with open(tmp_path / name, "w") as f:
            f.write("t,close\n")
    os.truncate(tmp_path / "big.csv", 8 << 30)
    cases = {"data.path": ["data.path=big.csv"],
             "data.histories.1.path": ["data.path=small.csv", "data.histories=[{price_column: close}, {path: big.csv}]"]}
    for key, args in cases.items():
        res = cli_in_process(*TINY_TRAIN, "data.source=file", *args, "--out", "out", cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith(f"tune-gems: error: {key}: the run needs about") and "data.synthetic.n" not in res.stderr
        assert "give a shorter price file" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.csv", "small.csv"]


def _analysis_tmp(exp: Path) -> list[Path]:
    return sorted(exp.glob(".analysis.tmp-*"))


def test_the_next_analysis_clears_what_a_killed_one_left_and_only_that(tmp_path):
    """A temporary folder whose writer died (no flock held) and that carries the analysis's marker,
    or nothing but the marker's temporary file, is removed by the next analysis; a user's folder of
    that name, another command's, and one a live analysis holds are left alone."""
    from tune_gems.contracts.outputs import temporary_folder, write_marker
    from tune_gems.contracts.safe_files import tmp_name

    exp = _paired(tmp_path / "exp")
    dead = exp / ".analysis.tmp-dead1"
    dead.mkdir()
    write_marker(dead, "analyze")
    (dead / "verdicts.csv").write_text("half written")
    empty = exp / ".analysis.tmp-dead2"
    empty.mkdir()
    tmp_name(empty / MARKER).write_text("{")  # killed while writing its marker
    mine = exp / ".analysis.tmp-mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    other = exp / ".analysis.tmp-confirm"
    other.mkdir()
    write_marker(other, "confirm")
    live, fd = temporary_folder(exp / "analysis")  # a live analysis building its folder
    write_marker(live, "analyze")
    try:
        res = cli_in_process("analyze", str(exp), "--no-plots", "--n-boot", "50", cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        assert _analysis_tmp(exp) == sorted([live, mine, other])
        assert (mine / "notes.txt").read_text() == "the user's"
    finally:
        os.close(fd)


def _run(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tune_gems", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


KILLED_ANALYSIS_ARGS = ["--n-boot", "50", "--no-plots"]


@pytest.fixture(scope="module")
def uninterrupted_analysis(tmp_path_factory) -> Path:
    """The folded experiment analysed once, uninterrupted (the command in this process)."""
    clean = _folded(tmp_path_factory.mktemp("clean") / "exp")
    done = cli_in_process("analyze", str(clean), *KILLED_ANALYSIS_ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    return clean / "analysis"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_an_analysis_killed_mid_write_is_cleared_and_redone_to_an_uninterrupted_runs_tables(tmp_path, sig, uninterrupted_analysis):
    """Killed (SIGKILL, or SIGTERM, which an analysis does not catch) while it writes its
    temporary folder: the folder stays, nothing is published; the next analysis (the command in
    this process) removes it and writes tables equal to an uninterrupted run's."""
    args = KILLED_ANALYSIS_ARGS
    exp = _folded(tmp_path / "killed" / "exp")
    proc = _run(["analyze", str(exp), *args], tmp_path)
    deadline = time.monotonic() + 300
    while not _analysis_tmp(exp):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=60)
    assert _analysis_tmp(exp) and not (exp / "analysis").exists()
    again = cli_in_process("analyze", str(exp), *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not _analysis_tmp(exp)
    for name in ("verdicts.csv", "fold_effects.csv", "factors.csv"):
        assert (exp / "analysis" / name).read_bytes() == (uninterrupted_analysis / name).read_bytes(), name
