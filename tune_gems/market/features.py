"""The Market: price paths as read-only device tensors of look-ahead-free features and next-step
returns, one row per (fold, path); each fold normalised on its own training rows (docs/data.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from tune_gems.data.series import SOURCE_COLUMN_ATTR
from tune_gems.contracts.errors import DataError

SEGMENTS = ("train", "val", "test")
_STD_FLOOR = 1e-12


@dataclass(frozen=True)
class DecisionRange:
    """Decision times t in [lo, hi) of one segment: t and t+1 both lie in the segment."""

    lo: int
    hi: int

    @property
    def length(self) -> int:
        return self.hi - self.lo


class Market:
    """Price paths as device tensors, fold-major (`row`); `fold_ranges[f]` fold f's decision ranges,
    `train_runs[f]` its runs of training rows."""

    def __init__(self, prices: pd.Series | Sequence[pd.Series], bounds, window: int, device: torch.device | str = "cpu",
            fold_ids: Sequence[int] | None = None):
        """`fold_ids`: the run's index of each fold given (default 0..F-1)."""
        paths = [prices] if isinstance(prices, pd.Series) else list(prices)
        folds = [bounds] if hasattr(bounds, "train") else list(bounds)
        if not paths:
            raise DataError("data: no price path to build a market from")
        if not folds or any(f.test != folds[0].test for f in folds):
            raise DataError("data: every fold needs the same test segment (tune_gems.data.segments.fold_bounds)")
        n = len(paths[0])
        if any(len(p) != n for p in paths):
            raise DataError(f"data: price paths differ in length ({sorted({len(p) for p in paths})}); every path needs the same length")
        if n < window:
            raise DataError(f"data: {n} prices, fewer than the {window}-step observation window (env.window)")
        self.window = window
        self.n = n
        self.indexes = tuple(p.index if isinstance(p, pd.Series) else pd.RangeIndex(n) for p in paths)  # own dates, or rows
        self.index = self.indexes[0]
        self.bounds = tuple(folds)  # the SegmentBounds of each fold held
        self.n_paths, self.n_folds = len(paths), len(folds)
        self.fold_ids = tuple(range(len(folds))) if fold_ids is None else tuple(int(f) for f in fold_ids)
        if len(self.fold_ids) != len(folds):
            raise ValueError(f"{len(self.fold_ids)} fold ids for {len(folds)} folds")
        self.columns = tuple(getattr(p, "attrs", {}).get(SOURCE_COLUMN_ATTR) for p in paths)  # as the file spells it
        raw = []
        for path in paths:
            p = np.asarray(path, dtype=np.float64)
            logret = np.zeros_like(p)
            logret[1:] = np.log(p[1:] / p[:-1])
            ret_next = np.zeros_like(p)
            ret_next[:-1] = p[1:] / p[:-1] - 1.0
            raw.append((logret, ret_next))
        logrets, nexts, means, stds = [], [], [], []
        for fold in folds:  # fold-major rows: each fold normalised on its own training window
            runs = getattr(fold, "runs", (fold.train,))
            for logret, ret_next in raw:
                if len(runs) == 1:
                    s, e = runs[0]
                    train_lr = logret[max(s, 1) : e]
                else:  # purged: the runs' log returns together, nothing of the group between them
                    train_lr = np.concatenate([logret[max(s, 1) : e] for s, e in runs])
                mean, std = float(train_lr.mean()), float(max(train_lr.std(), _STD_FLOOR))
                logrets.append((logret - mean) / std)
                nexts.append(ret_next)
                means.append(mean)
                stds.append(std)
        self.norm_means, self.norm_stds = tuple(means), tuple(stds)
        self.norm_mean, self.norm_std = means[0], stds[0]
        self.features = torch.tensor(np.stack(logrets), dtype=torch.float32, device=device)  # [paths, n]
        self.returns_next = torch.tensor(np.stack(nexts), dtype=torch.float32, device=device)  # [paths, n]
        self.logret_norm = self.features[0]
        self.ret_next = self.returns_next[0]
        self.fold_ranges = tuple({name: DecisionRange(max(seg[0], window), seg[1] - 1) for name,
                                  seg in zip(SEGMENTS, (fold.train, fold.val, fold.test))} for fold in folds)
        self.ranges = self.fold_ranges[0]
        self.train_runs = tuple(tuple(DecisionRange(max(s, window), e - 1) for s,
                                      e in getattr(fold, "runs", (fold.train,))) for fold in folds)
        # windows[k, s] = row k's features s..s+W-1 (a view): the observation at t is one row gather
        self._windows = self.features.unfold(1, window, 1)

    @property
    def n_rows(self) -> int:
        return self.features.shape[0]

    def row(self, fold: int, path: int) -> int:
        return fold * self.n_paths + path

    def member_rows(self, population: int, path_of_member=None, fold_of_member=None) -> Tensor:
        """Each member's feature row [P] int64 on the device (None: path 0, fold 0)."""
        paths = member_index(path_of_member, population, self.n_paths, "path_of_member", "paths")
        folds = member_index(fold_of_member, population, self.n_folds, "fold_of_member", "folds")
        return (folds * self.n_paths + paths).to(self.device)

    def member_windows(self, segment: str, population: int, fold_of_member=None) -> tuple[Tensor, int]:
        """(first decision time of each member's `segment` window [P], the common length T)."""
        folds = member_index(fold_of_member, population, self.n_folds, "fold_of_member", "folds")
        ranges = [r[segment] for r in self.fold_ranges]
        if len({r.length for r in ranges}) != 1:
            raise ValueError(f"the folds' {segment} windows differ in length ({[r.length for r in ranges]})")
        lo = torch.tensor([r.lo for r in ranges], dtype=torch.int64)[folds]
        return lo.to(self.device), ranges[0].length

    @property
    def device(self) -> torch.device:
        return self.features.device

    def check_lengths(self, episode_length: int) -> None:
        """Every segment of every fold has decisions; training fits one episode (in one run)."""
        for f, ranges in enumerate(self.fold_ranges):
            where = "" if self.n_folds == 1 else f"fold {f}'s "
            for name, r in ranges.items():
                if r.length < 2:
                    raise DataError(f"data: {where}{name} segment has {max(r.length, 0)} decision steps after the {self.window}-step window; need at least 2")
            runs = self.train_runs[f]
            if len(runs) == 1 and runs[0].length < episode_length:
                raise DataError(
                    f"data: {where}train segment has {runs[0].length} decision steps, fewer than env.episode_length={episode_length}"
                )
            if max(r.length for r in runs) < episode_length:
                steps = ", ".join(str(max(r.length, 0)) for r in runs)
                raise DataError(
                    f"data: {where}training runs have {steps} decision steps, none as many as env.episode_length={episode_length}"
                )

    def observe(self, t: Tensor, pos: Tensor, path: Tensor | None = None) -> Tensor:
        """Observations [..., W+1] at times t with positions pos; `path` per element (None: path 0)."""
        row = t - (self.window - 1)
        window = self._windows[0, row] if path is None else self._windows[path, row]
        return torch.cat([window, pos.unsqueeze(-1)], dim=-1)

    def returns_at(self, t: Tensor, path: Tensor | None = None) -> Tensor:
        return self.ret_next[t] if path is None else self.returns_next[path, t]

    @property
    def obs_dim(self) -> int:
        return self.window + 1


def member_index(values: Sequence[int] | Tensor | None, population: int, limit: int, name: str, what: str) -> Tensor:
    """A per-member path or fold index, an int64 CPU tensor [P] (None: 0), checked on the host."""
    if values is None:
        return torch.zeros(population, dtype=torch.int64)
    idx = torch.as_tensor(values, dtype=torch.int64).flatten().cpu()
    if idx.numel() != population:
        raise ValueError(f"{name} has {idx.numel()} entries for a population of {population}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= limit):
        raise ValueError(f"{name} must lie in [0, {limit}) (the market's {what}), got {idx.tolist()}")
    return idx


def member_paths(path_of_member: Sequence[int] | Tensor | None, population: int, market: Market) -> Tensor:
    return member_index(path_of_member, population, market.n_paths, "path_of_member", "paths").to(market.device)


def path_index(market: Market, rows: Tensor) -> Tensor | None:
    """What to index the market with: None on a one-row market (a 1-D lookup), else `rows`."""
    return None if market.n_rows == 1 else rows

