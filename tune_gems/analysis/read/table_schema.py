"""The column schema of the experiment tables (docs/results.md): which columns hold whole numbers,
floats, flags and text, and `validate_table`, which refuses a table that breaks it in one line
naming the file and the column; apart from load.py's reading of the folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import DataError

INT_COLUMNS = {"epoch": 1, "member": 0, "seed": 0, "seed_index": 0, "epochs_done": 0,
               "trainer.iterations_per_epoch": 1, "trainer.epochs": 1, "trainer.population": 1}
"""Whole-number columns and their smallest allowed value (the trials' config counts among them:
the plan costs a design from them)."""
NULLABLE_INT = {("trials", "seed"), ("trials", "trainer.iterations_per_epoch"), ("trials", "trainer.epochs"),
                ("trials", "trainer.population")}
"""(table, column) pairs where a missing value is allowed (a trial whose config was invalid)."""
FLOAT_COLUMNS = frozenset({"loss", "q_mean", "grad_norm", "noisy_sigma", "objective"})
NONNEGATIVE_COLUMNS = frozenset({"train_s", "eval_s", "sps", "env_steps", "updates"})
"""Timings and counts: a number >= 0 and not infinite where present (NaN: not recorded). A
negative or infinite time would cost a design at negative or infinite seconds (`tune-gems plan`)."""
FINITE_COLUMNS = {"members": frozenset({"val_sharpe", "test_sharpe", "val_alpha_sharpe", "test_alpha_sharpe"})}
"""Per table, the Sharpe ratios a run writes, never infinite (constant returns give 0,
tune_gems.market.evaluation): NaN is a diverged member or a test value before the last epoch,
+-inf no run writes, and an infinite value would pass for a finite outcome in every mean."""
FLOAT_PREFIXES = ("val_", "test_")
FLOAT_SUFFIXES = ("_rel", "_null", "_excess")
FLAG_COLUMNS = frozenset({"diverged"})
TEXT_COLUMNS = {"trial_id": True, "config_label": True, "status": True, "arm": False}
"""Text columns; True where a missing value is refused."""
_FLAG_WORDS = {"true", "false", "1", "0", "yes", "no", "1.0", "0.0"}


def _is_float_column(name: str, gem_columns: frozenset[str]) -> bool:
    return (
        name in FLOAT_COLUMNS
        or name in NONNEGATIVE_COLUMNS
        or name in gem_columns
        or (name.startswith(FLOAT_PREFIXES) and "." not in name)
        or (name.endswith(FLOAT_SUFFIXES) and "." not in name)
    )


def _shown(v: Any) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 40 else text[:37] + "..."


def _numeric(path: Path, df: pd.DataFrame, col: str) -> pd.Series:
    values = df[col]
    if pd.api.types.is_bool_dtype(values):
        raise DataError(f"{path}: column {col} holds booleans, expected numbers")
    if pd.api.types.is_numeric_dtype(values):
        return values
    converted = pd.to_numeric(values, errors="coerce")
    bad = values[converted.isna() & values.notna()]
    bad = bad[~bad.map(lambda v: isinstance(v, float))]  # NaN given as a float object is fine
    if len(bad) or any(isinstance(v, bool) for v in values.dropna()):
        first = bad.iloc[0] if len(bad) else next(v for v in values.dropna() if isinstance(v, bool))
        raise DataError(f"{path}: column {col} holds {_shown(first)} (row {bad.index[0] if len(bad) else '?'}), expected numbers")
    return converted.astype(float)


def whole_numbers(path: Path, df: pd.DataFrame, name: str, low: int, nullable: bool = False) -> pd.Series:
    """Column `name` of `df` as whole numbers >= `low` (converted in place; missing values only
    where `nullable`), else a DataError naming `path`, the column and the first bad value."""
    values = _numeric(path, df, name)
    present = values.dropna()
    if len(present) < len(values) and not nullable:
        raise DataError(f"{path}: column {name} has missing values (row {values[values.isna()].index[0]})")
    if len(present):
        finite = present.map(lambda v: float(v) == float(v) and abs(float(v)) != float("inf"))
        whole = present[finite].map(lambda v: float(v).is_integer())
        if not finite.all() or not whole.all():
            raise DataError(f"{path}: column {name} holds {_shown(present[~finite].iloc[0] if not finite.all() else present[finite][~whole].iloc[0])}, expected whole numbers")
        if (present < low).any():
            raise DataError(f"{path}: column {name} holds {_shown(present[present < low].iloc[0])}, expected >= {low}")
    df[name] = values
    return values


def validate_table(path: Path, df: pd.DataFrame, table: str, gem_columns: Iterable[str] = ()) -> None:
    """Refuse (DataError naming file and column) a table breaking docs/results.md's schema; converts
    text-held numbers in place and leaves unnamed columns alone."""
    gems = frozenset(gem_columns)
    for col in list(df.columns):
        name = str(col)
        if name in INT_COLUMNS:
            whole_numbers(path, df, name, INT_COLUMNS[name], nullable=(table, name) in NULLABLE_INT)
        elif name in FLAG_COLUMNS:
            values = df[name]
            if not pd.api.types.is_bool_dtype(values) and not pd.api.types.is_numeric_dtype(values):
                odd = values.dropna()[~values.dropna().map(lambda v: isinstance(v, (bool, int, float)) or str(v).strip().lower() in _FLAG_WORDS)]
                if len(odd):
                    raise DataError(f"{path}: column {name} holds {_shown(odd.iloc[0])}, expected true/false")
        elif name in TEXT_COLUMNS:
            values = df[name]
            if TEXT_COLUMNS[name] and values.isna().any():
                raise DataError(f"{path}: column {name} has missing values (row {values[values.isna()].index[0]})")
            if pd.api.types.is_float_dtype(values) or pd.api.types.is_bool_dtype(values):
                raise DataError(f"{path}: column {name} holds {values.dtype} values, expected text")
        elif _is_float_column(name, gems):
            df[name] = _numeric(path, df, name)
            if name in NONNEGATIVE_COLUMNS:
                _refuse_where(path, name, df[name], lambda v: (v < 0) | np.isinf(v), "expected a number >= 0 (a time or "
                              "a count; NaN where it was not recorded)")
            elif name in FINITE_COLUMNS.get(table, ()):
                _refuse_where(path, name, df[name], np.isinf, "expected a finite number (NaN for a diverged member)")
    if table == "arms":
        _check_arms(path, df)


def _refuse_where(path: Path, col: str, values: pd.Series, bad, expected: str) -> None:
    """DataError naming `path`, `col` and the first row whose value `bad` flags."""
    flagged = bad(values.astype(float))
    if flagged.any():
        row = values.index[np.asarray(flagged)][0]
        raise DataError(f"{path}: column {col} holds {_shown(values[row])} (row {row}), {expected}")


def _check_arms(path: Path, df: pd.DataFrame) -> None:
    """Refuse an arms table with an arm listed twice (every member would pair twice) or missing a name or
    a key's level (its factor would silently drop out of the comparisons)."""
    _refuse_missing(path, df, ["arm", *(c for c in df.columns if "." in str(c))])
    refuse_duplicates(path, df, [c for c in ("trial_id", "arm") if c in df.columns], "arm")


def _refuse_missing(path: Path, df: pd.DataFrame, cols: list[str]) -> None:
    for col in cols:
        missing = df[col].isna()
        if missing.any():
            row = df.index[missing.to_numpy()][0]
            arm = f", arm {df.at[row, 'arm']!r}" if col != "arm" and "arm" in df.columns else ""
            raise DataError(f"{path}: column {col} has a missing value (row {row}{arm}); every arm states every "
                            "per-member key's level")


def refuse_duplicates(path: Path, df: pd.DataFrame, keys: list[str], what: str) -> None:
    """DataError naming `path` when two rows share the values of `keys` (`what` one row is):
    a repeated row would count its members (or arm) twice in every statistic."""
    if not keys or not len(df):
        return
    dup = df.duplicated(subset=keys, keep=False)
    if dup.any():
        rows = df.index[dup.to_numpy()]
        first = df.loc[rows[0], keys]
        twin = next((r for r in rows[1:] if (df.loc[r, keys] == first).all()), rows[1])
        where = ", ".join(f"{k} {_shown(first[k])}" for k in keys)
        raise DataError(f"{path}: rows {rows[0]} and {twin} repeat one {what} ({where}): each must appear once")


def as_bool(values: pd.Series) -> pd.Series:
    """A flag column as plain bool: missing values are False; 'true'/'1' strings are True."""
    if values.dtype == bool:
        return values

    def conv(v: Any) -> bool:
        if v is None or (isinstance(v, float) and v != v):
            return False
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes")
        try:
            return bool(v) and not pd.isna(v)
        except (TypeError, ValueError):
            return bool(v)

    return values.map(conv).astype(bool)
