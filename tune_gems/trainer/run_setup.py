"""What a run needs before its trainer (and the sweep driver without one): device, price series, market."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from tune_gems.config.schema import Config
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.data import series as data_mod
from tune_gems.data.segments import TrainingReach, fold_bounds, is_date_split, seal_digest, sealed_rows
from tune_gems.market.features import Market

CUBLAS_DETERMINISTIC = ":4096:8"
"""cuBLAS workspace setting under which its reduction orders repeat run to run."""


def resolve_device(name: str) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda requested but no CUDA device is available")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run_device(cfg: Config) -> torch.device:
    """The run's device, checked against `trainer.graph`; on CUDA, cuBLAS set to a fixed reduction order."""
    device = resolve_device(cfg.device)
    if cfg.trainer.graph == "on" and device.type != "cuda":
        raise ConfigError("trainer.graph: 'on' needs a CUDA device (use auto or off)")
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
    return device


def load_run_prices(cfg: Config) -> pd.Series | list[pd.Series]:
    """The configured price series (one per history, on one calendar), long enough for the segments."""
    if len(cfg.data.price_histories) > 1:
        return data_mod.load_histories(cfg.data, min_rows=_min_rows(cfg))
    return data_mod.load_series(cfg.data, min_rows=_min_rows(cfg))


def _min_rows(cfg: Config) -> int:
    min_len = cfg.env.window + 2
    return cfg.env.window + cfg.env.episode_length + 3 * min_len


def seal_record(cfg: Config, prices: pd.Series | Sequence[pd.Series]) -> dict[str, Any] | None:
    """The seal of the run's data (`segments.seal_digest` of `load_run_prices`'s series), or None."""
    paths = [prices] if isinstance(prices, pd.Series) else list(prices)
    rows = sealed_rows(len(paths[0]), cfg.data.sealed, cfg.env.window + 2)
    return seal_digest(paths, [h.name for h in cfg.data.price_histories], rows) if rows else None


def prepare_market(cfg: Config, device: torch.device, prices: pd.Series | Sequence[pd.Series] | None = None,
        n_seed_indices: int | None = None, folds: Sequence[int] | None = None, open_seal: bool = False) -> Market:
    """Load (or take) the price paths, split them into folds and build the market; synthetic `per_seed` paths are
    generated here. `data.sealed` rows are cut first, or with `open_seal` become every fold's test."""
    n_seed_indices = cfg.trainer.population if n_seed_indices is None else n_seed_indices
    per_seed = cfg.data.source == "synthetic" and cfg.data.synthetic.paths == "per_seed"
    if prices is not None and not per_seed:
        paths = [prices] if isinstance(prices, pd.Series) else list(prices)
        if len(paths) != len(cfg.data.price_histories):
            raise ValueError(f"prepare_market: {len(paths)} price series for the config's {len(cfg.data.price_histories)} histories")
    else:
        first = cfg.first_seed_index
        paths = data_mod.load_paths(cfg.data, n_seed_indices, min_rows=_min_rows(cfg), first_seed_index=first)
        path0 = paths[0] if first == 0 else data_mod.load_series(cfg.data) if prices is not None else None
        if prices is not None and not np.array_equal(np.asarray(prices, dtype=np.float64), np.asarray(path0, dtype=np.float64)):
            raise ValueError("prepare_market: the given prices are not the path of seed index 0 of the config's per_seed synthetic paths")
    reach = TrainingReach(cfg.env.window, cfg.trainer.n_step, cfg.env.episode_length)  # what purged folds keep clear
    specs = cfg.data.price_histories
    calendars = data_mod.calendar_groups([p.index for p in paths])
    if len(calendars) > 1 and is_date_split(cfg.data.splits):
        names = ", ".join(repr(specs[g[0]].name) for g in calendars)
        raise ConfigError(f"data.splits: dates {list(cfg.data.splits)} cut each calendar at other rows, and the {len(specs)} "
                          f"histories are on {len(calendars)} calendars (those of {names}): a fold is the same rows of every "
                          "history, so give three fractions")
    try:  # the layout is in rows, the same for every history
        n = len(paths[0])
        sealed = sealed_rows(n, cfg.data.sealed, cfg.env.window + 2)
        if sealed and n - sealed < _min_rows(cfg):
            raise DataError(f"data.sealed: sealing {sealed} of the {n} rows leaves {max(n - sealed, 0)}, fewer than the "
                            f"{_min_rows(cfg)} a run needs (an observation window, an episode and three segments)")
        if open_seal and not sealed:
            raise ValueError("prepare_market: open_seal on data without a seal (data.sealed is 0)")
        searched = [p.iloc[: n - sealed] for p in paths] if sealed else paths
        bounds = fold_bounds(searched[0], cfg.data.splits, cfg.data.folds, min_len=cfg.env.window + 2, reach=reach)
        opened = {"test": (n - sealed, n)} if open_seal else {}
        bounds = [dataclasses.replace(b, sealed=sealed, **opened) for b in bounds]
        fold_ids = list(range(len(bounds))) if folds is None else [int(f) for f in folds]
        if any(not 0 <= f < len(bounds) for f in fold_ids):
            raise ValueError(f"prepare_market: folds {fold_ids} outside the config's {len(bounds)} folds")
        market = Market(paths if opened else searched, [bounds[f] for f in fold_ids], cfg.env.window, device, fold_ids=fold_ids)
        market.check_lengths(cfg.env.episode_length)
    except (ConfigError, DataError) as e:  # with several histories, a layout that does not fit names them first
        if len(specs) < 2:
            raise
        names = ", ".join(repr(s.name) for s in specs)
        on = "one calendar" if len(calendars) == 1 else f"{len(calendars)} calendars"
        raise type(e)(f"histories {names} ({on} of {len(paths[0])} rows): {e}") from None
    return market
