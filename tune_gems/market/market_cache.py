"""Markets already built in this process (a reused Ray actor's next trial does not rebuild them)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Callable, Hashable

import pandas as pd
import torch

from tune_gems.config.schema import Config
from tune_gems.market.features import Market

MARKETS_KEPT = 4
"""Markets a MarketCache holds by default (the most recently used; each a few MB)."""


def _series_digest(prices: pd.Series | list[pd.Series] | None) -> str | None:
    """A digest of what a Market reads from price series: values, index, name, attributes."""
    if prices is None:
        return None
    if not isinstance(prices, pd.Series):
        return "+".join(_series_digest(p) for p in prices)
    digest = hashlib.sha256(pd.util.hash_pandas_object(prices, index=True).to_numpy().tobytes())
    digest.update(repr((prices.name, sorted(prices.attrs.items()), type(prices.index).__name__)).encode())
    return digest.hexdigest()


def market_key(cfg: Config, device: torch.device | str, prices: pd.Series | None, n_seed_indices: int | None = None) -> tuple:
    """What `run_setup.prepare_market` builds from, as a hashable key: equal keys, equal markets."""
    n = cfg.trainer.population if n_seed_indices is None else int(n_seed_indices)
    data = json.dumps(cfg.data.model_dump(mode="json"), sort_keys=True)
    return (data, cfg.env.window, cfg.env.episode_length, cfg.first_seed_index, n, str(torch.device(device)), _series_digest(prices))


class MarketCache:
    """The `limit` most recently used markets by `market_key` (a Market is never written: safe to share)."""

    def __init__(self, limit: int = MARKETS_KEPT):
        if limit < 1:
            raise ValueError(f"a market cache holds at least one market, got limit={limit}")
        self.limit = limit
        self._markets: OrderedDict[Hashable, Market] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._markets)

    def get(self, key: Hashable, build: Callable[[], Market]) -> Market:
        with self._lock:
            market = self._markets.get(key)
            if market is None:
                market = build()
                self._markets[key] = market
                while len(self._markets) > self.limit:
                    self._markets.popitem(last=False)
            self._markets.move_to_end(key)
            return market

