"""A Gymnasium environment over one segment, with the vectorised one's features and reward: Box(W+1)
observations, MultiDiscrete([A, A]) actions, truncated after `episode_length` steps."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

from tune_gems.config.schema import EnvConfig
from tune_gems.market.actions import ActionMap
from tune_gems.market.features import Market


class TradingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, prices: pd.Series, bounds, cfg: EnvConfig | None = None, segment: str = "train",
            random_start: bool = True):
        self.cfg = cfg or EnvConfig()
        self.market = Market(prices, bounds, self.cfg.window, "cpu")
        self.actions = ActionMap(self.cfg, "cpu")
        self.range = self.market.ranges[segment]
        self.random_start = random_start
        A = self.actions.sub_actions
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(self.market.obs_dim,), dtype=np.float32)
        self.action_space = gym.spaces.MultiDiscrete([A, A])
        self._t = self.range.lo
        self._start = self.range.lo
        self._pos = 0.0

    def _obs(self) -> np.ndarray:
        t = torch.tensor([self._t])
        return self.market.observe(t, torch.tensor([self._pos], dtype=torch.float32))[0].numpy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        span = max(self.range.length - self.cfg.episode_length, 0)
        self._start = self.range.lo + (int(self.np_random.integers(0, span + 1)) if self.random_start and span else 0)
        self._t, self._pos = self._start, 0.0
        return self._obs(), {"t": self._t, "position": self._pos}

    def step(self, action):
        a = torch.as_tensor(np.asarray(action, dtype=np.int64)).view(1, -1)
        new_pos = float(self.actions.position(a)[0])
        net = new_pos * float(self.market.ret_next[self._t]) - self.cfg.cost * abs(new_pos - self._pos)
        self._pos = new_pos
        self._t += 1
        truncated = self._t - self._start >= self.cfg.episode_length or self._t >= self.range.hi
        info = {"t": self._t, "position": new_pos, "net_return": net}
        return self._obs(), net * self.cfg.reward_scale, False, truncated, info
