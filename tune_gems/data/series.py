"""Price series, read from CSV/Parquet or generated. A bad file fails here, before any GPU time, in
one line (`tune_gems.contracts.errors.DataError`); downstream may assume float64 strictly positive
prices in strictly increasing time."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import DataError
from tune_gems.data.histories import HistorySpec

CSV_SUFFIXES = (".csv", ".csv.gz", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
TIME_NAMES = ("date", "datetime", "time", "timestamp")
"""Column names (any case) taken as the time column when none is given."""
SOURCE_COLUMN_ATTR = "source_column"
"""Key in a loaded series' `attrs`: the file's column its prices came from, as the file spells it."""
HISTORY_ATTR = "history"
"""Key in a loaded history's `attrs`: its name (tune_gems.data.histories.HistorySpec.name)."""

DEFAULT_REGIMES = ((0.006, 0.0005), (0.010, 0.0), (0.020, -0.0005))
"""(daily volatility, daily drift at edge=1) of the synthetic regimes: calm-up, choppy, stressed."""

@dataclass(frozen=True)
class SyntheticShape:
    """The synthetic series beside its edge: its regimes, persistence, the trend's largest share of a
    return's variance, first day and first price."""

    regimes: Sequence[tuple[float, float]] = DEFAULT_REGIMES
    regime_persistence: float = 0.98
    trend_persistence: float = 0.95
    max_trend_share: float = 0.2
    start: str = "2000-01-03"
    start_price: float = 100.0


DEFAULT_EDGE = 0.8
"""The one default strength of the synthetic momentum edge (`data.synthetic.edge` and
`synthetic_prices`). What it implies (docs/data.md, checked by tests/test_data.py): lag-1
autocorrelation of daily returns 0.15 (real daily series: about 0) and no drift in expectation
(mean simple return 0; mean log return about -1.2e-4 a day, the volatility drag)."""

MAX_STEP_FACTOR = 1000.0
"""The most a price may move in one step, up or down (a factor): more is a data error (a sentinel
such as 1e308, a lost decimal point, an unadjusted split), never a market; one such row makes every
member of every history diverge (1e308) or trains on nonsense (1e-300)."""

_SNIFF_BYTES = 8192  # how much of a CSV to look at for NUL bytes (a binary file)
_MAX_SHOWN = 40  # longest value quoted in a message, so the message stays one short line
_MAX_DETAIL = 160  # longest reader error text repeated in a message


def _fail(path: Any, problem: str) -> DataError:
    """The DataError for `path`, forced onto one line whatever the problem text holds."""
    return DataError(" ".join(f"{path}: {problem}".split()))


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _read_frame(path: Path) -> pd.DataFrame:
    """The file's table, raw; the reader is chosen by extension so a typo never guesses a format."""
    name = path.name.lower()
    if not name.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES):
        allowed = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES)
        ext = f"extension '{path.suffix}'" if path.suffix else "no extension"
        raise _fail(path, f"unknown file type ({ext}); expected one of {allowed}")
    if path.stat().st_size == 0:
        raise _fail(path, "empty file")
    try:
        if name.endswith(PARQUET_SUFFIXES):
            frame = pd.read_parquet(path)
            # A pandas-written Parquet keeps a DatetimeIndex as the index: make it a column again.
            if not isinstance(frame.index, pd.RangeIndex):
                frame = frame.reset_index(names=frame.index.name or "timestamp")
            return frame
        if not name.endswith(".gz"):
            with open(path, "rb") as fh:
                if b"\x00" in fh.read(_SNIFF_BYTES):
                    raise _fail(path, "not a text file (binary content); expected CSV text")
        frame = pd.read_csv(path, skipinitialspace=True, low_memory=False)
        header = pd.read_csv(path, header=None, nrows=1, dtype=str, skipinitialspace=True, keep_default_na=False)
        if header.shape[1] == frame.shape[1]:  # the names as written: pandas renames a repeated one `AAPL.1`
            frame.columns = [raw if raw else str(c) for raw, c in zip(header.iloc[0].tolist(), frame.columns)]
        return frame
    except DataError:
        raise
    except pd.errors.EmptyDataError:
        raise _fail(path, "empty file") from None
    except Exception as e:  # noqa: BLE001 - every reader failure means the same thing to a user
        kind = "Parquet" if name.endswith(PARQUET_SUFFIXES) else "CSV"
        detail = str(e).splitlines()[0][:_MAX_DETAIL] if str(e) else "no details"
        raise _fail(path, f"cannot read as {kind} ({type(e).__name__}: {detail})") from None


def _find_column(frame: pd.DataFrame, wanted: str, what: str, path: Path) -> Any:
    """The frame's column matching `wanted` ignoring case and surrounding spaces."""
    key = wanted.strip().lower()
    hits = [c for c in frame.columns if str(c).strip().lower() == key]
    if len(hits) > 1:
        raise _fail(path, f"{what} column '{wanted}' is ambiguous: {', '.join(map(str, hits))}")
    if not hits:
        columns = ", ".join(str(c).strip() for c in frame.columns)
        raise _fail(path, f"no {what} column '{wanted}' (columns: {columns})")
    return hits[0]


def format_when(ts: pd.Timestamp) -> str:
    """A timestamp as short as it can be said: the date alone for naive midnight times."""
    return str(ts.date()) if ts.tz is None and ts == ts.normalize() else str(ts)


def _where(i: int, times: pd.DatetimeIndex | None) -> str:
    """Row i (0-based) as a user finds it: data rows count from 1 after the header, plus its time."""
    return f"row {i + 1}" + (f" ({format_when(times[i])})" if times is not None else "")


def _parse_times(raw: pd.Series, path: Path) -> pd.DatetimeIndex:
    """Timestamps of the time column; naive or timezone-aware, mixed UTC offsets become UTC."""
    if pd.api.types.is_datetime64_any_dtype(raw):
        parsed = pd.Series(raw)
    else:
        text = raw.astype("string") if pd.api.types.is_numeric_dtype(raw) else raw
        parsed = None
        for kwargs in ({}, {"format": "mixed"}, {"format": "mixed", "utc": True}):
            try:
                with warnings.catch_warnings():  # "could not infer format": we retry and report ourselves
                    warnings.simplefilter("ignore", UserWarning)
                    parsed = pd.to_datetime(text, errors="coerce", **kwargs)
            except (ValueError, TypeError):
                continue
            if pd.api.types.is_datetime64_any_dtype(parsed) and not (parsed.isna() & raw.notna()).any():
                break
    if parsed is None or not pd.api.types.is_datetime64_any_dtype(parsed):
        raise _fail(path, "unparseable timestamps (mixed or unknown formats)")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        value = raw.iloc[i]
        problem = "missing timestamp" if pd.isna(value) else f"unparseable timestamp {_show(value)}"
        raise _fail(path, f"{problem} in row {i + 1}")
    times = pd.DatetimeIndex(parsed)
    step = np.diff(times.asi8)
    bad = np.flatnonzero(step <= 0)
    if len(bad):
        i = int(bad[0]) + 1
        if step[i - 1] == 0:
            raise _fail(path, f"duplicate timestamp {format_when(times[i])} in rows {i} and {i + 1}")
        this, prev = format_when(times[i]), format_when(times[i - 1])
        raise _fail(path, f"timestamps not sorted: row {i + 1} ({this}) is earlier than row {i} ({prev})")
    return times


def _parse_prices(raw: pd.Series, times: pd.DatetimeIndex | None, path: Path, column: str) -> np.ndarray:
    """Float64 prices; the first non-numeric, missing, non-finite or non-positive one is an error,
    and so is one more than MAX_STEP_FACTOR times (or less than 1 / it) the price before it."""
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    missing = raw.isna().to_numpy()
    bad = np.flatnonzero(np.isnan(values) & ~missing)
    if len(bad):
        i = int(bad[0])
        raise _fail(path, f"non-numeric price {_show(raw.iloc[i])} in {_where(i, times)}")
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        i = int(bad[0])
        problem = "missing price" if missing[i] else f"non-finite price {values[i]}"
        raise _fail(path, f"{problem} in {_where(i, times)}")
    bad = np.flatnonzero(values <= 0)
    if len(bad):
        i = int(bad[0])
        raise _fail(path, f"non-positive price {values[i]:g} in {_where(i, times)}")
    with np.errstate(over="ignore", under="ignore"):
        step = values[1:] / values[:-1]
    bad = np.flatnonzero((step > MAX_STEP_FACTOR) | (step < 1.0 / MAX_STEP_FACTOR))
    if len(bad):
        i = int(bad[0]) + 1
        raise _fail(path, f"price {values[i]:g} in {_where(i, times)} of column {column!r} is {step[i - 1]:.3g} times the "
                          f"price before it ({values[i - 1]:g}); a step of more than {MAX_STEP_FACTOR:g}x either way is a "
                          "data error (a sentinel value, a lost decimal point, an unadjusted split): fix that row")
    return values


def load_prices(path: str | Path, price_column: str = "close", time_column: str | None = None, *,
                min_rows: int = 0) -> pd.Series:
    """A validated float64 price series from CSV or Parquet, reading only `price_column` (names match ignoring case and
    spaces); without `time_column` a date-like column if any. DataError "<path>: <problem>"."""
    p = Path(path)
    if not p.exists():
        raise _fail(path, "no such file")
    if not p.is_file():
        raise _fail(path, "not a file")
    frame = _read_frame(p)
    frame.columns = [str(c).strip() for c in frame.columns]
    twice = frame.columns[frame.columns.duplicated()]
    if len(twice):  # one name twice: which column holds its prices is anyone's guess (case variants: `_find_column`)
        at = [i + 1 for i, c in enumerate(frame.columns) if c == twice[0]]
        raise _fail(path, f"column {twice[0]!r} appears {len(at)} times in the header (columns {', '.join(map(str, at))}); "
                          "give each column its own name")
    if len(frame) == 0:
        raise _fail(path, "no data rows")
    price_col = _find_column(frame, price_column, "price", path)
    if time_column is not None:
        time_col = _find_column(frame, time_column, "time", path)
    else:
        time_col = next((c for c in frame.columns if c.lower() in TIME_NAMES), None)
    times = _parse_times(frame[time_col], path) if time_col is not None else None
    values = _parse_prices(frame[price_col], times, path, price_col)
    if len(values) < min_rows:
        raise _fail(path, f"{len(values)} rows, need at least {min_rows}")
    if len(values) > 1 and np.all(values == values[0]):  # every log return 0: nothing to normalise or learn
        raise _fail(path, f"constant price {values[0]:g} in all {len(values)} rows of column '{price_col}': not a price series")
    index = times.rename(time_col) if times is not None else pd.RangeIndex(len(values))
    series = pd.Series(values, index=index, name=price_column, dtype=np.float64)
    series.attrs[SOURCE_COLUMN_ATTR] = price_col  # the column as the file spells it, for the start-up summary
    return series


def synthetic_prices(n: int, seed: int, edge: float = DEFAULT_EDGE, edge_periods: Sequence[Sequence[float]] | None = None,
                     shape: SyntheticShape = SyntheticShape()) -> pd.Series:
    """A seeded regime-switching series with a weak momentum edge (docs/data.md "The synthetic
    series"), `edge=0` a control with nothing to learn; `edge_periods` changes the edge over time
    without changing a random draw. Multiplications only, so the same bits on every machine."""
    return synthetic_paths(n, [seed], edge, edge_periods, shape)[0]


def synthetic_paths(n: int, seeds: Sequence[int], edge: float = DEFAULT_EDGE, edge_periods: Sequence[Sequence[float]] | None = None,
                    shape: SyntheticShape = SyntheticShape()) -> list[pd.Series]:
    """`synthetic_prices` of each seed, built together (one walk over the rows for every path,
    one shared business-day index), each path with the bits it has alone."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not len(seeds):
        raise ValueError("synthetic_paths: no seeds")
    edge_of_row = edge if edge_periods is None else _edge_of_row(n, edge_periods)
    for share_value in np.unique(np.atleast_1d(np.asarray(edge_of_row, dtype=np.float64) * shape.max_trend_share)):
        if not 0.0 <= share_value <= 1.0:
            raise ValueError(f"edge * max_trend_share must lie in [0, 1], got {float(share_value)}")
    vol, drift = (np.asarray(col, dtype=np.float64) for col in zip(*shape.regimes))
    k = len(vol)
    stay = shape.regime_persistence if k > 1 else 1.0
    transition = np.where(np.eye(k, dtype=bool), stay, (1.0 - shape.regime_persistence) / max(k - 1, 1))
    cumulative = np.cumsum(transition, axis=1)
    jumps, trend_shocks, noise = (np.empty((len(seeds), n)) for _ in range(3))
    first = np.empty(len(seeds), dtype=np.int64)
    for p, seed in enumerate(seeds):  # each path's draws in its own generator's order
        rng = np.random.default_rng(seed)
        jumps[p], trend_shocks[p], noise[p] = rng.random(n), rng.standard_normal(n), rng.standard_normal(n)
        first[p] = rng.integers(k)
    state = _regime_chain(cumulative, jumps, first)
    trend = _ar1(trend_shocks, shape.trend_persistence, np.sqrt(1.0 - shape.trend_persistence**2))

    share = edge_of_row * shape.max_trend_share
    returns = drift[state] * edge_of_row + vol[state] * (np.sqrt(share) * trend + np.sqrt(1.0 - share) * noise)
    returns[:, 0] = 0.0  # the first price is the start price itself
    # Strictly positive prices: no regime here comes near a -100% day, the floor only makes it certain.
    prices = shape.start_price * np.cumprod(1.0 + np.maximum(returns, -0.5), axis=1)
    index = pd.bdate_range(start=shape.start, periods=n)
    return [pd.Series(row, index=index, name="close", dtype=np.float64) for row in prices]


def _regime_chain(cumulative: np.ndarray, jumps: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The regime [P, n] of each path's rows: every row's move from every regime at once, then one loop
    over the rows."""
    k = cumulative.shape[0]
    P, n = jumps.shape
    moves = np.minimum((cumulative[None, None, :, :] <= jumps[:, :, None, None]).sum(-1), k - 1)  # [P, n, k]
    by_row = np.ascontiguousarray(moves.transpose(1, 0, 2)).reshape(n, P * k)  # row t: every path's move from every regime
    offset = np.arange(P, dtype=np.int64) * k
    s = np.asarray(start, dtype=np.int64)
    states = np.empty((n, P), dtype=np.int64)
    for row in range(n):
        s = by_row[row][offset + s]
        states[row] = s
    return states.T.copy()


def _ar1(shocks: np.ndarray, persistence: float, scale: float) -> np.ndarray:
    """m_t = persistence m_{t-1} + scale shocks[t] from m_{-1} = 0 of each path (`shocks` [P, n]):
    the same IEEE operations, in the same order, as the scalar recursion (bit for bit)."""
    a = float(persistence)
    scaled = np.ascontiguousarray(shocks.T) * float(scale)  # [n, P]: each row's c * shock
    out = np.empty_like(scaled)
    m = np.zeros(scaled.shape[1])
    for row in range(len(scaled)):
        np.multiply(m, a, out=m)
        np.add(m, scaled[row], out=m)
        out[row] = m
    return out.T.copy()


def _edge_of_row(n: int, periods: Sequence[Sequence[float]]) -> np.ndarray:
    """The edge of each of n rows under `edge_periods` (each period from row round(start * n))."""
    starts = np.asarray([round(float(p[0]) * n) for p in periods], dtype=np.int64)
    edges = np.asarray([float(p[1]) for p in periods], dtype=np.float64)
    if len(starts) == 0 or starts[0] != 0 or np.any(np.diff(starts) < 0):
        raise ValueError(f"edge_periods must start at 0 and increase, got {[list(p) for p in periods]}")
    return edges[np.searchsorted(starts, np.arange(n), side="right") - 1]


def load_series(cfg: Any, min_rows: int = 0) -> pd.Series:
    """The series a `DataConfig` names: the synthetic one, or a validated price file (its one
    history; a config of several histories: `load_histories`)."""
    if cfg.source == "synthetic":
        syn = cfg.synthetic
        if syn.n < min_rows:
            raise DataError(f"data.synthetic.n: {syn.n} rows, need at least {min_rows}")
        return synthetic_prices(syn.n, syn.seed, syn.edge, syn.edge_periods)
    if len(cfg.price_histories) != 1:
        raise ValueError(f"load_series: {cfg.histories_key} names {len(cfg.price_histories)} histories; load them with load_histories")
    return load_histories(cfg, min_rows)[0]


def _load_history(spec: HistorySpec, min_rows: int, several: bool) -> pd.Series:
    """One history's validated prices, its name in `attrs`; with `several`, a problem names the
    history before the file (`history 'wti': data/x.csv: ...`: one file may hold every history)."""
    try:
        series = load_prices(spec.path, spec.price_column, spec.time_column, min_rows=min_rows)
    except DataError as e:
        if not several:
            raise
        raise DataError(f"history {spec.name!r}: {e}") from None
    series.attrs[HISTORY_ATTR] = spec.name
    return series


def load_histories(cfg: Any, min_rows: int = 0) -> list[pd.Series]:
    """Every price history of a file `DataConfig`, validated singly and then together; each keeps its
    own index (`calendar_groups`)."""
    specs = cfg.price_histories
    series = [_load_history(spec, min_rows, len(specs) > 1) for spec in specs]
    check_side_by_side(specs, series, cfg.histories_key)
    check_distinct_markets(specs, series, cfg.histories_key)
    return series


def check_distinct_markets(specs: Sequence[HistorySpec], series: Sequence[pd.Series], key: str) -> None:
    """DataError naming both histories when two hold the same price in every row: one market
    counted twice, whose seeds would pass for two histories' independent evidence."""
    for j in range(1, len(series)):
        for i in range(j):
            if np.array_equal(series[i].to_numpy(), series[j].to_numpy()):
                raise DataError(f"{key}.{j}: history {specs[j].name!r} ({specs[j].where}) holds the same price in every row "
                                f"as history {specs[i].name!r} ({specs[i].where}): one market counted twice; give each "
                                "history its own market")


def check_side_by_side(specs: Sequence[HistorySpec], series: Sequence[pd.Series], key: str) -> None:
    """DataError naming a history that cannot stand beside the first: as many rows, and timestamps in
    all (all naive or all aware) or none."""
    ref, first = series[0].index, specs[0]
    for spec, s in zip(specs[1:], series[1:]):
        idx = s.index
        here = f"{key}: history {spec.name!r} ({spec.where})"
        timed = (isinstance(ref, pd.DatetimeIndex), isinstance(idx, pd.DatetimeIndex))
        if timed[0] != timed[1]:
            has, lacks = (first.name, spec.name) if timed[0] else (spec.name, first.name)
            raise DataError(f"{here}: history {has!r} has timestamps and {lacks!r} none; give every history a time "
                            "column, or none")
        if all(timed) and (ref.tz is None) != (idx.tz is None):
            raise DataError(f"{here}: timestamps in {idx.tz or 'no timezone'}, history {first.name!r}'s in "
                            f"{ref.tz or 'no timezone'}; give every history timezone-aware timestamps, or none")
        if len(idx) != len(ref):
            raise DataError(f"{here} has {len(idx)} rows, history {first.name!r} {len(ref)}: the members put row t of "
                            "every history side by side, so histories need as many rows; cut the longer ones")


def calendar_groups(indexes: Sequence[pd.Index]) -> list[list[int]]:
    """The histories grouped by calendar (the same index, row for row), in order of first history."""
    groups: dict[int, list[int]] = {}
    for h, idx in enumerate(indexes):
        groups.setdefault(next((g for g in groups if indexes[g].equals(idx)), h), []).append(h)
    return list(groups.values())


def path_seeds(syn: Any, n_seed_indices: int, first_seed_index: int = 0) -> list[int]:
    """The synthetic seed of each path: `seed + s` per seed index s of the run (first_seed_index
    .. first_seed_index + n_seed_indices - 1; per_seed), or `seed` (shared)."""
    if syn.paths == "per_seed":
        return [syn.seed + first_seed_index + s for s in range(n_seed_indices)]
    return [syn.seed]


def load_paths(cfg: Any, n_seed_indices: int = 1, min_rows: int = 0, first_seed_index: int = 0) -> list[pd.Series]:
    """The price paths for `n_seed_indices` seed indices from `first_seed_index`: synthetic `per_seed`
    one per seed index, `shared` one, files one per history; index with `path_of_member`."""
    if n_seed_indices < 1:
        raise ValueError(f"n_seed_indices must be >= 1, got {n_seed_indices}")
    if cfg.source != "synthetic":
        return load_histories(cfg, min_rows=min_rows)
    syn = cfg.synthetic
    if syn.n < min_rows:
        raise DataError(f"data.synthetic.n: {syn.n} rows, need at least {min_rows}")
    return synthetic_paths(syn.n, path_seeds(syn, n_seed_indices, first_seed_index), syn.edge, syn.edge_periods)


def path_of_member(cfg: Any, seed_slot_of_member: Sequence[int], history_of_member: Sequence[int] | None = None) -> list[int]:
    """Each member's path in `load_paths`: its seed slot under `per_seed`, its history on files, else 0."""
    if cfg.source == "synthetic" and cfg.synthetic.paths == "per_seed":
        return [int(s) for s in seed_slot_of_member]
    if cfg.source != "synthetic" and history_of_member is not None:
        if len(history_of_member) != len(seed_slot_of_member):
            raise ValueError(f"{len(history_of_member)} histories for {len(seed_slot_of_member)} members")
        return [int(h) for h in history_of_member]
    return [0] * len(seed_slot_of_member)
