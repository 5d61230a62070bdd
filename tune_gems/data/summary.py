"""What a run trains on, said at its start (a mistyped column or a surprising date split otherwise
shows only in the results), and the history table the results carry."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tune_gems.data.histories import HISTORY_TABLE_COLUMNS
from tune_gems.data.series import calendar_groups, format_when

SEGMENT_LABELS = (("train", "train"), ("val", "validation"), ("test", "test"))


def _column(spec: Any, found: str | None) -> str:
    """`price column 'Close'`, with `(asked 'close')` when the file spells it otherwise."""
    column = found or spec.price_column
    return f"price column {column!r}" + ("" if column == spec.price_column else f" (asked {spec.price_column!r})")


def source_line(data_cfg: Any, market: Any) -> str:
    """`data: <file>, price column 'Close' (asked 'close'), <n> rows`, the synthetic series, or several
    histories with each one's file, column and calendar."""
    if data_cfg.source == "synthetic":
        syn = data_cfg.synthetic
        paths = "one path per seed index" if syn.paths == "per_seed" else "one shared path"
        return f"data: synthetic series, {market.n} prices, seed {syn.seed}, edge {syn.edge:g}, {paths}"
    specs = data_cfg.price_histories
    if len(specs) == 1:
        return f"data: {specs[0].path}, {_column(specs[0], market.columns[0])}, {market.n} rows"
    one_file = len({spec.path for spec in specs}) == 1
    calendars = len(calendar_groups(market.indexes))
    each = [f"{spec.name} ({'' if one_file else f'{spec.path}, '}{_column(spec, found)}"
            f"{f', time column {idx.name!r}' if calendars > 1 and idx.name is not None else ''})"
            for spec, found, idx in zip(specs, market.columns, market.indexes)]
    where = f"{specs[0].path}, " if one_file else ""
    on = "one calendar" if calendars == 1 else f"{calendars} calendars"
    return f"data: {where}{len(specs)} histories on {on}, {market.n} rows each: {' | '.join(each)}"


def history_table(data_cfg: Any, market: Any) -> pd.DataFrame:
    """One row per history (HISTORY_TABLE_COLUMNS): index, name, file, column as spelled, first and last
    timestamp (`row 1`, `row <n>` without) and rows."""
    rows = []
    for h, spec in enumerate(data_cfg.price_histories):
        found = market.columns[h] if data_cfg.source != "synthetic" else None
        rows.append({"history": h, "name": spec.name, "source": spec.path or "synthetic", "column": found,
                     "first": _when(market.indexes[h], 0), "last": _when(market.indexes[h], market.n - 1), "rows": int(market.n)})
    return pd.DataFrame(rows, columns=list(HISTORY_TABLE_COLUMNS))


def _when(index: pd.Index, i: int) -> str:
    """Row i's timestamp, or `row <i + 1>` without a time column."""
    return format_when(index[i]) if isinstance(index, pd.DatetimeIndex) else f"row {i + 1}"


def _span(index: pd.Index, lo: int, hi: int) -> str:
    """Rows [lo, hi) as dates, `<first>..<last>`, or `rows <lo>..<hi - 1>` without a time column."""
    return f"{format_when(index[lo])}..{format_when(index[hi - 1])}" if isinstance(index, pd.DatetimeIndex) else f"rows {lo}..{hi - 1}"


def _segment(index: pd.Index, label: str, rows: tuple[int, int]) -> str:
    return f"{label} {rows[1] - rows[0]} rows ({_span(index, *rows)})"


def _runs(index: pd.Index, runs: tuple[tuple[int, int], ...]) -> str:
    """A purged fold's training rows: `train <rows> rows in <n> run(s) (<first>..<last> + ...)`."""
    rows = sum(hi - lo for lo, hi in runs)
    return f"train {rows} rows in {len(runs)} run(s) ({' + '.join(_span(index, lo, hi) for lo, hi in runs)})"


def split_line(market: Any, index: pd.Index | None = None, head: str = "split") -> str:
    """`split: train <rows> rows (<first>..<last>) | validation ... | test ...`, dates where the data has
    them; with folds each fold's training rows and window, then the common test."""
    index = market.index if index is None else index
    folds = market.bounds
    sealed = [f"sealed {folds[0].sealed} rows after it (no search reads them; `tune-gems confirm --final` opens them)"]
    sealed = sealed if folds[0].sealed else []
    if len(folds) == 1 and not folds[0].purged:
        segments = [_segment(index, label, getattr(folds[0], key)) for key, label in SEGMENT_LABELS]
        return f"{head}: " + " | ".join([*segments, *sealed])
    parts = [
        f"fold {k}: {_runs(index, f.runs) if f.purged else _segment(index, 'train', f.train)}, {_segment(index, 'validation', f.val)}"
        for k, f in zip(market.fold_ids, folds)
    ]
    return f"{head}: " + " | ".join([*parts, _segment(index, "test", folds[0].test), *sealed])


def split_lines(data_cfg: Any, market: Any) -> list[str]:
    """The split line (`split_line`); histories on several calendars: one per calendar, at its
    dates (`split of <name>, <name>: ...`; the rows are every history's)."""
    groups = calendar_groups(market.indexes)
    if len(groups) == 1:
        return [split_line(market)]
    names = [spec.name for spec in data_cfg.price_histories]
    return [split_line(market, market.indexes[g[0]], f"split of {', '.join(names[h] for h in g)}") for g in groups]


def layout_line(market: Any) -> str | None:
    """`folds: purged cross-validation, <k> groups of <L> rows ...`: what a purged layout drops
    around each group (the walk-forward layout says all it has in the split line: None)."""
    folds = market.bounds
    if not folds[0].purged:
        return None
    first = folds[0]
    before, after = first.purge
    return (
        f"folds: purged cross-validation, {len(folds)} group(s) of {first.val[1] - first.val[0]} rows "
        f"before the test segment; each fold validates on its group and trains on the rows before "
        f"and after it, less {before} row(s) before the group and the test segment (n-step targets), {after} after the "
        f"group (the observation window) and an embargo of {first.embargo}; a run of rows too short for an episode is dropped"
    )


def data_lines(data_cfg: Any, market: Any) -> list[str]:
    layout = layout_line(market)
    return [source_line(data_cfg, market), *([layout] if layout else []), *split_lines(data_cfg, market)]
