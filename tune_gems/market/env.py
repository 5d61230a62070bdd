"""The training environment on torch tensors: P members x E environments, fixed shapes, no host
sync; each member on its own path and fold, its episodes wholly inside its fold's training rows
(under purged folds, inside one run: `run_start_tables`)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from tune_gems.config.schema import EnvConfig
from tune_gems.market.actions import ActionMap
from tune_gems.market.features import DecisionRange, Market, member_index, member_paths, path_index
from tune_gems.rng import to_integers


def run_start_tables(train_runs: Sequence[Sequence[DecisionRange]], episode_length: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per fold, the allowed episode starts: first start per run [F, R], starts before it [F, R], total [F]."""
    R = max(len(runs) for runs in train_runs)
    lo = torch.zeros(len(train_runs), R, dtype=torch.int64)
    span = torch.zeros(len(train_runs), R, dtype=torch.int64)
    for f, runs in enumerate(train_runs):
        for r, run in enumerate(runs):
            lo[f, r], span[f, r] = run.lo, max(run.length - episode_length + 1, 0)
        lo[f, len(runs) :] = lo[f, len(runs) - 1]
    offset = torch.cumsum(span, dim=1) - span
    return lo, offset, span.sum(dim=1)


class Transition:
    """One vectorised step, [P,E,...] each, stored as (t, pos, new_pos): `source` rebuilds `obs`, `next_obs`."""

    def __init__(self, action, reward, end, terminal, net_return, t, pos, new_pos, source: "VecTradingEnv"):
        self.action, self.reward, self.end, self.terminal, self.net_return = action, reward, end, terminal, net_return
        self.t, self.pos, self.new_pos, self.source = t, pos, new_pos, source

    @property
    def obs(self) -> Tensor:
        return self.source.observe_at(self.t, self.pos)

    @property
    def next_obs(self) -> Tensor:
        return self.source.observe_at(self.t + 1, self.new_pos)


class VecTradingEnv:
    """P members x E environments in lockstep, in preallocated tensors; starts from each member's uniforms."""

    def __init__(self, market: Market, cfg: EnvConfig, population: int, n_envs: int,
            path_of_member: Sequence[int] | Tensor | None = None, fold_of_member: Sequence[int] | Tensor | None = None):
        """`path_of_member`, `fold_of_member` [P]: each member's path and fold (default 0)."""
        self.market, self.cfg = market, cfg
        self.actions = ActionMap(cfg, market.device)
        P, E = population, n_envs
        dev = market.device
        self.path_of_member = member_paths(path_of_member, P, market)
        self.rows = market.member_rows(P, path_of_member, fold_of_member)
        self._paths = path_index(market, self.rows)
        self._path = None if self._paths is None else self._paths.view(P, 1)  # against [P,E]
        self.t = torch.zeros(P, E, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(P, E, dtype=torch.float32, device=dev)
        self.steps = torch.zeros(P, E, dtype=torch.int64, device=dev)
        self._run_lo: Tensor | None = None  # [P, R] first start of each run (purged folds only)
        self._run_offset: Tensor | None = None  # [P, R] allowed starts before each run
        if all(len(runs) == 1 for runs in market.train_runs):
            if market.n_folds == 1:
                rng_range = market.train_runs[0][0]
                self._start_lo: int | Tensor = rng_range.lo
                self._start_span: int | Tensor = rng_range.length - cfg.episode_length + 1
            else:  # per member: its own fold's training window
                folds = member_index(fold_of_member, P, market.n_folds, "fold_of_member", "folds")
                train = [runs[0] for runs in market.train_runs]
                self._start_lo = torch.tensor([r.lo for r in train], dtype=torch.int64)[folds].view(P, 1).to(dev)
                self._start_span = torch.tensor([r.length - cfg.episode_length + 1 for r in train], dtype=torch.int64)[folds].to(dev)
        else:  # purged: per member, the runs of its fold's training rows
            folds = member_index(fold_of_member, P, market.n_folds, "fold_of_member", "folds")
            lo, offset, total = run_start_tables(market.train_runs, cfg.episode_length)
            self._run_lo, self._run_offset = lo[folds].to(dev), offset[folds].to(dev)
            self._start_lo = self._run_lo[:, :1]
            self._start_span = total[folds].to(dev)

    def reset(self, start_u: Tensor) -> None:
        self.t.copy_(self._starts(start_u))
        self.pos.zero_()
        self.steps.zero_()

    def _starts(self, start_u: Tensor) -> Tensor:
        """Episode starts [P, E] from uniforms: offset j among the allowed starts, in run r past its first."""
        j = to_integers(start_u, self._start_span)
        start = self._start_lo + j
        if self._run_lo is not None:
            for r in range(1, self._run_lo.shape[1]):
                before = self._run_offset[:, r : r + 1]
                start = torch.where(j >= before, self._run_lo[:, r : r + 1] + (j - before), start)
        return start

    @property
    def obs_dim(self) -> int:
        return self.market.obs_dim

    def observe(self) -> Tensor:
        return self.market.observe(self.t, self.pos, self._path)

    def observe_at(self, t: Tensor, pos: Tensor) -> Tensor:
        """Observations [P, ..., obs_dim] at times t holding pos, on each member's path."""
        return self.market.observe(t, pos, None if self._paths is None else self._paths.view(-1, *([1] * (t.dim() - 1))))

    def step(self, action: Tensor, start_u: Tensor) -> Transition:
        t_now, pos_now = self.t.clone(), self.pos.clone()
        new_pos = self.actions.position(action)
        net = new_pos * self.market.returns_at(self.t, self._path) - self.cfg.cost * (new_pos - self.pos).abs()
        t_next = self.t + 1
        steps = self.steps + 1
        end = steps >= self.cfg.episode_length
        terminal = torch.zeros_like(end)
        # advance, restarting finished episodes at fresh offsets (flat position)
        self.t.copy_(torch.where(end, self._starts(start_u), t_next))
        self.pos.copy_(torch.where(end, torch.zeros_like(new_pos), new_pos))
        self.steps.copy_(torch.where(end, torch.zeros_like(steps), steps))
        return Transition(action, net * self.cfg.reward_scale, end, terminal, net, t_now, pos_now, new_pos, self)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"t": self.t, "pos": self.pos, "steps": self.steps}

