"""The market-noise interval of a verdict's arm difference, from the saved validation returns. On one price history the
seed interval is conditional on that history: this module rebuilds each paired member's net returns over the verdict
window (`eval_returns.npz`) and hands them to `market_noise.market_noise_interval`, diverged members left out. Where the
seed or pooled interval already holds the market's variance, or none can be computed, `market_noise` says why."""


from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.pairs.pairing import Cells, Paired
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.verdicts.market_noise import (
    Bootstrap, MarketNoiseInterval, alpha_sharpe_rows, market_noise_interval, sharpe_rows,
)
from tune_gems.contracts.errors import DataError
from tune_gems.contracts.result_files import (
    EVAL_RETURNS_ARRAYS, EVAL_RETURNS_DIR, EVAL_RETURNS_FILE, EVAL_RETURNS_FOLD_ARRAYS, EVAL_RETURNS_FORMAT,
    EVAL_RETURNS_HISTORY_ARRAYS, trial_eval_returns,
)

OK = "ok"
NOT_NEEDED = "not needed: per-seed paths (the seed interval includes the market's variance)"
UNAVAILABLE = "unavailable"
ACROSS_PERIODS = "not needed: several validation periods (the pooled interval carries their market noise)"
ACROSS_HISTORIES = "not needed: several price histories (the pooled interval carries their market noise)"
"""Several folds or histories: each period's luck is in the spread the pooled interval carries."""

CHECK_RTOL, CHECK_ATOL = 1e-4, 1e-6
"""A metric recomputed from eval_returns.npz must equal members.parquet's value to this
tolerance (a stale or foreign file is refused, float64 rounding is not)."""


@dataclass(frozen=True)
class EvalReturns:
    """One trial's eval_returns.npz (arrays as documented in docs/results.md)."""

    epochs: np.ndarray  # [k] int
    positions: np.ndarray  # [k,P,T] float32
    diverged: np.ndarray  # [k,P] bool
    asset: np.ndarray  # [P,T] float32
    arm: np.ndarray  # [P] str
    seed_index: np.ndarray  # [P] int
    cost: float
    periods_per_year: float
    source: str = ""
    fold: np.ndarray | None = None  # [P] int (None: a one-fold file, fold 0 for every member)
    history: np.ndarray | None = None  # [P] int (None: a one-history file, history 0 for every member)

    def member(self, arm: str, seed_index: int, fold: int = 0, history: int = 0) -> int | None:
        """The population index of the member of `arm` at `seed_index` in that `fold` of that
        `history` (one member per key: a file holds every history's and fold's members)."""
        hit = (self.arm == str(arm)) & (self.seed_index == int(seed_index))
        for ids, want in ((self.fold, fold), (self.history, history)):
            hit &= (ids == int(want)) if ids is not None else int(want) == 0
        hit = np.flatnonzero(hit)
        return int(hit[0]) if hit.size else None

    def epoch_index(self, epoch: int) -> int | None:
        hit = np.flatnonzero(self.epochs == int(epoch))
        return int(hit[0]) if hit.size else None

    def net_returns(self, epoch_index: int, member: int) -> np.ndarray:
        """float64 [T] net returns at the run's cost (tune_gems.market.evaluation.net_returns's estimator)."""
        pos = self.positions[epoch_index, member].astype(np.float64)
        prev = np.concatenate([[0.0], pos[:-1]])
        return pos * self.asset[member].astype(np.float64) - self.cost * np.abs(pos - prev)


def read_eval_returns(path: str | Path) -> EvalReturns:
    """Read and check one eval_returns.npz; DataError (one line naming the file) when it is not
    one this version can read."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as err:  # noqa: BLE001 - zipfile / numpy raise several types
        raise DataError(f"{path}: not a readable eval_returns file ({type(err).__name__})") from None
    missing = [k for k in EVAL_RETURNS_ARRAYS if k not in arrays]
    if missing:
        raise DataError(f"{path}: missing array(s) {', '.join(missing)}")
    try:
        return _checked(path, arrays)
    except (TypeError, ValueError, IndexError, OverflowError) as err:  # a tampered array of the wrong kind
        raise DataError(f"{path}: arrays of the wrong type or shape ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None


def _scalar(path: Path, arrays: dict[str, np.ndarray], name: str) -> float:
    a = arrays[name]
    if a.size != 1 or a.dtype.kind not in "iuf" or not np.isfinite(a).all():
        raise DataError(f"{path}: {name} must be one finite number (got shape {a.shape}, dtype {a.dtype})")
    return float(a.reshape(()))


def _checked(path: Path, arrays: dict[str, np.ndarray]) -> EvalReturns:
    """The EvalReturns of `arrays`, after every array's kind and shape is checked."""
    if _scalar(path, arrays, "format") != EVAL_RETURNS_FORMAT:
        raise DataError(f"{path}: eval_returns format {_scalar(path, arrays, 'format'):g} is not supported (this tune-gems reads {EVAL_RETURNS_FORMAT})")
    epochs, pos = arrays["epochs"], arrays["positions"]
    if epochs.ndim != 1 or epochs.dtype.kind not in "iu":
        raise DataError(f"{path}: epochs must be a list of whole numbers (got shape {epochs.shape}, dtype {epochs.dtype})")
    k = epochs.shape[0]
    if pos.ndim != 3 or pos.shape[0] != k or arrays["asset"].shape != pos.shape[1:] or arrays["diverged"].shape != pos.shape[:2]:
        raise DataError(f"{path}: inconsistent shapes (positions {pos.shape}, asset {arrays['asset'].shape}, "
                        f"diverged {arrays['diverged'].shape}, epochs {arrays['epochs'].shape})")
    P = pos.shape[1]
    for name, kinds in (("positions", "f"), ("asset", "f"), ("diverged", "b"), ("seed_index", "iu"), ("arm", "US")):
        if arrays[name].dtype.kind not in kinds:
            raise DataError(f"{path}: {name} has dtype {arrays[name].dtype}, expected {'/'.join(kinds)}")
    ids = {}
    for name in ("arm", "seed_index", *EVAL_RETURNS_FOLD_ARRAYS[:1], *EVAL_RETURNS_HISTORY_ARRAYS):
        if name not in arrays:  # fold, history: absent in a one-fold, one-history file
            continue
        if arrays[name].shape != (P,):
            raise DataError(f"{path}: {name} has shape {arrays[name].shape}, expected ({P},) (one per member)")
        if name not in ("arm", "seed_index"):
            if arrays[name].dtype.kind not in "iu":
                raise DataError(f"{path}: {name} has dtype {arrays[name].dtype}, expected i/u")
            ids[name] = arrays[name].astype(np.int64)
    return EvalReturns(
        epochs=epochs.astype(np.int64), positions=pos, diverged=arrays["diverged"].astype(bool),
        asset=arrays["asset"], arm=arrays["arm"].astype(str), seed_index=arrays["seed_index"].astype(np.int64),
        cost=_scalar(path, arrays, "cost"), periods_per_year=_scalar(path, arrays, "periods_per_year"), source=str(path),
        fold=ids.get("fold"), history=ids.get("history"),
    )


class EvalReturnsLookup:
    """The eval returns of each (experiment, trial_id), read once; `get` returns (data, why-not)."""

    def __init__(self, paths: Iterable[str | Path], labels: Iterable[str], trials: pd.DataFrame | None = None):
        self.folders = dict(zip(labels, (Path(p) for p in paths)))
        counts = trials.groupby("experiment")["trial_id"].nunique() if trials is not None and len(trials) else pd.Series(dtype=int)
        self.single = {str(e) for e, n in counts.items() if n == 1}
        self._cache: dict[tuple[str, str], tuple[EvalReturns | None, str]] = {}

    def get(self, experiment: str, trial_id: str) -> tuple[EvalReturns | None, str]:
        key = (str(experiment), str(trial_id))
        if key not in self._cache:
            self._cache[key] = self._read(*key)
        return self._cache[key]

    def _read(self, experiment: str, trial_id: str) -> tuple[EvalReturns | None, str]:
        folder = self.folders.get(experiment)
        if folder is None:
            return None, f"no folder for experiment {experiment!r}"
        candidates = [folder / EVAL_RETURNS_DIR / trial_eval_returns(trial_id)] if "/" not in trial_id and trial_id not in (".", "..") else []
        if experiment in self.single:
            candidates.append(folder / EVAL_RETURNS_FILE)
        for f in candidates:
            if f.is_file():
                try:
                    return read_eval_returns(f), ""
                except DataError as err:
                    return None, str(err)
        return None, f"no {EVAL_RETURNS_DIR}/{trial_eval_returns(trial_id)} (results older than the saved returns, or a trial without a final checkpoint)"


@dataclass(frozen=True)
class MarketEvidence:
    """`status`: OK, NOT_NEEDED or "unavailable: <why>"; `interval` when OK; `n_dropped`: pairs
    left out because a member diverged in the window."""

    status: str
    interval: MarketNoiseInterval | None = None
    n_dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.interval is not None

    def columns(self) -> dict[str, float | str]:
        """The verdict table's market-noise columns (docs/results.md)."""
        iv = self.interval
        nan = math.nan
        return {
            "market_noise": self.status,
            "market_effect": iv.estimate if iv else nan,
            "market_ci_low": iv.low if iv else nan,
            "market_ci_high": iv.high if iv else nan,
            "market_ci_level": iv.confidence if iv else nan,
            "market_p_value": iv.p_value if iv else nan,
            "market_mean_block": iv.mean_block if iv else nan,
            "market_n_steps": iv.n_steps if iv else nan,
            "market_n_series": iv.n_pairs if iv else nan,
            "market_dropped": self.n_dropped if iv else nan,
        }


MARKET_COLUMNS = tuple(MarketEvidence("").columns())
"""The market-noise columns of verdicts.csv, in order."""


def _unavailable(why: str) -> MarketEvidence:
    return MarketEvidence(f"{UNAVAILABLE}: {why}")


def _per_seed_paths(table: pd.DataFrame) -> pd.Series:
    """Per cell: True where the member trains and evaluates on its own synthetic path."""
    paths = table.get("data.synthetic.paths", pd.Series("shared", index=table.index)).astype(str)
    source = table.get("data.source", pd.Series("synthetic", index=table.index)).astype(str)
    return paths.str.contains("per_seed") & source.str.contains("synthetic")


def market_window(pr: Paired, th: Thresholds) -> int | None:
    """The window length (in epochs) of a comparison's pairs for the market-noise interval, one
    for all its pairs (None when the pairs' windows differ)."""
    if pr.pairs is None or not len(pr.pairs):
        return th.last_k
    lengths = set(np.atleast_1d(th.window_length(pr.pairs["end_epoch"].to_numpy(int))).tolist())
    return int(lengths.pop()) if len(lengths) == 1 else None


def market_evidence(
    pr: Paired,
    cells: Cells,
    lookup: EvalReturnsLookup | None,
    *,
    column: str,
    k: int,
    confidence: float,
    n_boot: int = defaults.N_BOOT,
    seed: int = defaults.SEED,
) -> MarketEvidence:
    """The market-noise interval of the difference `pr` measures at `confidence`, or why there is none."""
    pairs = pr.pairs
    if pairs is None or not len(pairs):
        return _unavailable("no member pairs")
    table = cells.table.set_index("cell")
    both = np.concatenate([pairs["cell_hi"].to_numpy(), pairs["cell_lo"].to_numpy()])
    if "history" in table.columns and table.loc[both, "history"].nunique() > 1:
        return MarketEvidence(ACROSS_HISTORIES)
    if "fold" in table.columns and table.loc[both, "fold"].nunique() > 1:
        return MarketEvidence(ACROSS_PERIODS)
    if _per_seed_paths(table.loc[both]).all():
        return MarketEvidence(NOT_NEEDED)
    if _per_seed_paths(table.loc[both]).any():
        return _unavailable("some pairs are on per-seed paths, some on one shared path")
    if lookup is None:
        return _unavailable("no result folders to read eval returns from")
    metric = "alpha_sharpe" if column.endswith("alpha_sharpe") else "sharpe"
    long = cells.long
    reported = pd.Series(long[column].astype(float).to_numpy(),
                         index=pd.MultiIndex.from_arrays([long["cell"].to_numpy(), long["epoch"].astype(int).to_numpy()])) \
        if column in long.columns else pd.Series(dtype=float)
    hi_rows, lo_rows, checks, assets = [], [], [], []
    dropped = 0
    ppy = None
    for pair in pairs.itertuples(index=False):
        window = list(range(int(pair.end_epoch) - k + 1, int(pair.end_epoch) + 1))
        sides = []
        for cell in (pair.cell_hi, pair.cell_lo):
            c = table.loc[cell]
            data, why = lookup.get(c["experiment"], c["trial_id"])
            if data is None:
                return _unavailable(f"trial {c['trial_id']}: {why}")
            m = data.member(c["arm"], c["seed_index"], fold=int(c.get("fold", 0)), history=int(c.get("history", 0)))
            if m is None:
                return _unavailable(f"{data.source} has no member of arm {c['arm']!r} at seed index {int(c['seed_index'])}"
                                    f" in fold {int(c.get('fold', 0))} of history {int(c.get('history', 0))}")
            idx = [data.epoch_index(e) for e in window if e >= 1]
            if any(i is None for i in idx) or not idx:
                return _unavailable(f"{data.source} holds epochs {data.epochs.tolist()}, the verdict window needs "
                                    f"{[e for e in window if e >= 1]} (a last checkpoint before the trial's last epoch, "
                                    f"or --last-k above trainer.objective_last_k)")
            sides.append((cell, data, m, idx))
            ppy = data.periods_per_year if ppy is None else ppy
        if any(d.diverged[i, m] for _, d, m, idx in sides for i in idx) or any(
                not np.isfinite(reported.get((cell, int(d.epochs[i])), np.nan)) for cell, d, m, idx in sides for i in idx):
            dropped += 1
            continue
        (ch, dh, mh, ih), (cl, dl, ml, il) = sides
        for a, b in zip(ih, il):
            hi_rows.append(dh.net_returns(a, mh))
            lo_rows.append(dl.net_returns(b, ml))
            checks += [(reported[(ch, int(dh.epochs[a]))]), (reported[(cl, int(dl.epochs[b]))])]
        assets += [dh.asset[mh], dl.asset[ml]]
    if not hi_rows:
        return MarketEvidence(f"{UNAVAILABLE}: every pair has a member that diverged in the window", n_dropped=dropped)
    asset = assets[0]
    if any(a.shape != asset.shape or not np.array_equal(a, asset) for a in assets[1:]):
        return _unavailable("the members' asset returns differ (they are not on one shared path)")
    asset = asset.astype(np.float64)
    hi, lo = np.stack(hi_rows), np.stack(lo_rows)
    ppy = float(ppy)
    if metric == "alpha_sharpe":
        mine = np.stack([alpha_sharpe_rows(hi, asset, ppy), alpha_sharpe_rows(lo, asset, ppy)], axis=1).ravel()
    else:
        mine = np.stack([sharpe_rows(hi, ppy), sharpe_rows(lo, ppy)], axis=1).ravel()
    if not np.allclose(mine, np.asarray(checks, float), rtol=CHECK_RTOL, atol=CHECK_ATOL):
        worst = int(np.argmax(np.abs(mine - np.asarray(checks, float))))
        return _unavailable(f"the saved returns give {column} {mine[worst]:.6g} where members.parquet has "
                            f"{checks[worst]:.6g} (a stale or foreign eval_returns file)")
    iv = market_noise_interval(hi, lo, asset_returns=asset, metric=metric, pooling="per_pair", periods_per_year=ppy,
                               boot=Bootstrap(n_boot, confidence, seed))
    return MarketEvidence(OK, iv, dropped)

