"""The side tables a verdict trusts beside the members: the fold table (the overlap of folds) and the
price-history table. A broken or edited fold table would change verdicts silently, so every row is
checked where read (docs/robustness.md), one `DataError` line naming file, column and row; a table
with only some of the `LAYOUT_COLUMNS` was cut, and is refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tune_gems.analysis.read.calendars import DATE_COLUMNS, window_time
from tune_gems.analysis.read.table_schema import refuse_duplicates, whole_numbers
from tune_gems.contracts.errors import DataError
from tune_gems.contracts.result_files import FOLDS_FILES, HISTORIES_FILES
from tune_gems.data.histories import name_problem

FOLD_INT_COLUMNS = {"fold": 0, "train_start": 0, "train_end": 1, "val_start": 0, "val_end": 1, "test_start": 0,
                    "test_end": 1, "train_rows": 1, "group_rows": 1, "purge_before": 0, "purge_after": 0, "embargo": 0}
"""The fold table's whole-number columns and their smallest value (docs/results.md "folds.csv")."""
LAYOUT_COLUMNS = ("train_runs", "train_rows", "group_rows")
"""The layout the overlap of folds is read from (`rules.periods.FOLD_TABLE_NEEDS` beside `fold`)."""
SCHEMES = ("walk_forward", "purged")
HISTORY_INT_COLUMNS = {"history": 0, "rows": 1}
"""The history table's whole-number columns and their smallest value."""


@dataclass
class FoldLayouts:
    """The validated fold tables: `table` those with the layout, `dates` all (for the windows' dates),
    `uncorrected` why a multi-fold folder's overlap could not be read."""

    table: pd.DataFrame | None = None
    dates: pd.DataFrame | None = None
    uncorrected: list[str] = field(default_factory=list)


def read_table(folder: Path, names: tuple[str, ...]) -> tuple[Path, pd.DataFrame] | None:
    """The first of `names` present in `folder`, read as parquet or CSV, or None."""
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        try:
            return path, (pd.read_parquet(path) if name.endswith(".parquet") else pd.read_csv(path))
        except Exception as err:  # noqa: BLE001 - pyarrow / pandas raise many types
            text = " ".join(str(err).split())
            raise DataError(f"{path}: not a readable table ({type(err).__name__}{': ' + text if text else ''})") from None
    return None


def _ids(df: pd.DataFrame) -> list[str]:
    """The columns that say whose row it is: trial (a sweep's table) and history (where present)."""
    return [c for c in ("trial_id", "history") if c in df.columns]


def read_histories(folder: Path, label: str, members: pd.DataFrame) -> pd.DataFrame | None:
    """The folder's validated history table, or None without one; every history id of the members must be listed."""
    found = read_table(folder, HISTORIES_FILES)
    if found is None:
        return None
    path, df = found
    df = df.drop(columns=["experiment"], errors="ignore").reset_index(drop=True)
    if "history" not in df.columns:
        raise DataError(f"{path}: missing column history")
    for col, low in HISTORY_INT_COLUMNS.items():
        if col in df.columns:
            whole_numbers(path, df, col, low)
    if "trial_id" in df.columns:
        df["trial_id"] = df["trial_id"].astype(str)
    for row, name in df["name"].items() if "name" in df.columns else ():
        problem = "is missing" if not isinstance(name, str) else name_problem(name)
        if problem:
            raise DataError(f"{path}: column name, row {row}: history name {name!r} {problem}")
    refuse_duplicates(path, df, _ids(df), "history")
    if "history" in members.columns:
        _refuse_unlisted(path, df, members, "history")
    df.insert(0, "experiment", label)
    return df


def _refuse_unlisted(path: Path, table: pd.DataFrame, members: pd.DataFrame, col: str) -> None:
    """DataError naming `path` when a `col` value the members use has no row in `table` (a column only
    the members carry is read as every value sharing the row)."""
    keys = [c for c in ("trial_id", "history") if c in table.columns and c in members.columns and c != col] + [col]
    listed = set(map(tuple, table[keys].astype({col: int}).itertuples(index=False, name=None)))
    for key in members[keys].drop_duplicates().astype({col: int}).itertuples(index=False, name=None):
        if key not in listed:
            whose = "".join(f" of {k.replace('_id', '')} {v!r}" for k, v in zip(keys[:-1], key[:-1]))
            raise DataError(f"{path}: no row for {col} {key[-1]}{whose}, which its members train on: every {col} "
                            "of the members needs its row (the table was cut, or is another run's)")


def _runs(path: Path, row, text) -> list[tuple[int, int]]:
    """The runs of a `train_runs` cell: `start:end` half-open, ascending, disjoint, non-empty."""
    runs, last = [], 0
    for part in str(text).split() if isinstance(text, str) else ():
        lo, sep, hi = part.partition(":")
        if not (sep and lo.isdigit() and hi.isdigit()) or int(lo) >= int(hi) or int(lo) < last:
            runs = []
            break
        runs.append((int(lo), int(hi)))
        last = int(hi)
    if not runs:
        raise DataError(f"{path}: column train_runs, row {row}: {text!r} is not runs of rows (start:end, half-open, "
                        "ascending, disjoint, space-separated)")
    return runs


def _check_row(path: Path, row, r: pd.Series, rows_of_history: int | None) -> None:
    """One fold row's layout against itself and its history's rows (module docstring)."""
    def bad(col: str, why: str) -> DataError:
        return DataError(f"{path}: column {col}, row {row}: {why}; a fold table is written by the run, never edited")

    has = r.index
    runs = _runs(path, row, r["train_runs"])
    n_train = sum(hi - lo for lo, hi in runs)
    if int(r["train_rows"]) != n_train:
        raise bad("train_rows", f"{int(r['train_rows'])} disagrees with train_runs {r['train_runs']!r} ({n_train} rows)")
    if "train_start" in has and "train_end" in has and (int(r["train_start"]), int(r["train_end"])) != (runs[0][0], runs[-1][1]):
        raise bad("train_start", f"{int(r['train_start'])}..{int(r['train_end'])} is not the span of train_runs {r['train_runs']!r}")
    if "val_start" in has and "val_end" in has:
        v0, v1 = int(r["val_start"]), int(r["val_end"])
        if v1 - v0 != int(r["group_rows"]):
            raise bad("group_rows", f"{int(r['group_rows'])} disagrees with the validation window {v0}:{v1} ({v1 - v0} rows)")
        if any(lo < v1 and v0 < hi for lo, hi in runs):
            raise bad("train_runs", f"{r['train_runs']!r} meets the validation window {v0}:{v1}")
    end = int(r["test_end"]) if "test_end" in has else max(hi for _, hi in runs)
    if "test_start" in has:
        t0 = int(r["test_start"])
        if runs[-1][1] > t0 or ("val_end" in has and int(r["val_end"]) > t0) or t0 >= end:
            raise bad("test_start", f"the test segment {t0}:{end} does not follow the training and validation rows")
    if rows_of_history is not None and end > rows_of_history:
        raise bad("test_end" if "test_end" in has else "train_runs",
                  f"row {end} is past the history's {rows_of_history} rows (histories table)")


def _check_dates(path: Path, row, r: pd.Series) -> None:
    """One fold row's window dates (those of DATE_COLUMNS the table has): all or none, times, in time order."""
    present = [c for c in DATE_COLUMNS if c in r.index]
    given = [c for c in present if isinstance(r[c], str) and r[c].strip()]
    if not given:
        return
    def bad(col: str, why: str) -> DataError:
        return DataError(f"{path}: column {col}, row {row}: {why}; a fold table is written by the run, never edited")

    if len(given) < len(present):
        missing = next(c for c in present if c not in given)
        raise bad(missing, f"no date beside {given[0]} {r[given[0]]!r} (a row has every window date or none)")
    times = []
    for c in present:
        try:
            times.append(window_time(r[c]))
        except ValueError:
            raise bad(c, f"{r[c]!r} is not a time") from None
    if times != sorted(times):
        shown = ", ".join(f"{c} {r[c]}" for c in present)
        raise bad(present[0], f"the windows' dates are not in time order ({shown})")


def read_folds(folder: Path, label: str, members: pd.DataFrame, histories: pd.DataFrame | None) -> tuple[pd.DataFrame | None, str | None]:
    """(the validated fold table or None; why its layout cannot be read where members span several
    folds, or None). The histories' `rows` bound every window."""
    found = read_table(folder, FOLDS_FILES)
    several = "fold" in members.columns and members["fold"].nunique() > 1
    if found is None:
        return None, f"{folder} has no fold table ({' / '.join(FOLDS_FILES)})" if several else None
    path, df = found
    df = df.drop(columns=["experiment"], errors="ignore").reset_index(drop=True)
    if "fold" not in df.columns:
        raise DataError(f"{path}: missing column fold")
    for col, low in FOLD_INT_COLUMNS.items():
        if col in df.columns:
            whole_numbers(path, df, col, low)
    for col in _ids(df):
        if col == "trial_id":
            df[col] = df[col].astype(str)
        else:
            whole_numbers(path, df, col, 0)
    if "scheme" in df.columns:
        odd = df.index[~df["scheme"].isin(SCHEMES)]
        if len(odd):
            raise DataError(f"{path}: column scheme, row {odd[0]}: {df.at[odd[0], 'scheme']!r} is not one of {', '.join(SCHEMES)}")
    refuse_duplicates(path, df, [*_ids(df), "fold"], "fold")
    for row, r in df.iterrows():
        _check_dates(path, row, r)
    if "fold" in members.columns:
        _refuse_unlisted(path, df, members, "fold")
    layout = [c for c in LAYOUT_COLUMNS if c in df.columns]
    if layout and len(layout) < len(LAYOUT_COLUMNS):
        missing = next(c for c in LAYOUT_COLUMNS if c not in df.columns)
        raise DataError(f"{path}: missing column {missing} (the fold layout is {', '.join(LAYOUT_COLUMNS)}: all or none)")
    df.insert(0, "experiment", label)
    if not layout:
        return df, (f"{path} records no fold layout ({', '.join(LAYOUT_COLUMNS)}: written before tune-gems recorded it)"
                    if several else None)
    rows = _history_rows(histories)
    for row, r in df.iterrows():
        _check_row(path, row, r, rows.get(str(r["trial_id"])) if "trial_id" in df.columns else rows.get(None))
    return df, None


def _history_rows(histories: pd.DataFrame | None) -> dict:
    """{trial_id (None for a train run's table): the fewest rows of its histories} from a validated
    history table (a run's histories have as many rows)."""
    if histories is None or "rows" not in histories.columns:
        return {}
    if "trial_id" not in histories.columns:
        return {None: int(histories["rows"].min())}
    return {str(t): int(g.min()) for t, g in histories.groupby("trial_id")["rows"]}


def read_layouts(folders: list[Path], labels: list[str], members: list[pd.DataFrame]) -> tuple[FoldLayouts, pd.DataFrame | None]:
    """Every folder's history and fold tables, validated against its members: the fold tables
    (`FoldLayouts`) and the history tables (None without any)."""
    layouts, histories, tables, dates = FoldLayouts(), [], [], []
    for folder, label, m in zip(folders, labels, members):
        h = read_histories(folder, label, m)
        folds, why = read_folds(folder, label, m, h)
        if h is not None:
            histories.append(h)
        if folds is not None:
            dates.append(folds)
            if all(c in folds.columns for c in LAYOUT_COLUMNS):
                tables.append(folds)
        if why:
            layouts.uncorrected.append(why)
    layouts.table = pd.concat(tables, ignore_index=True) if tables else None
    layouts.dates = pd.concat(dates, ignore_index=True) if dates else None
    return layouts, pd.concat(histories, ignore_index=True) if histories else None
