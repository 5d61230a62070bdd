"""The trading environment on torch tensors: features without look-ahead, a population x n_envs
vectorised environment with fixed shapes and no host sync in `step`, and greedy evaluation.

Time convention: prices p_0..p_{T-1}. The observation at decision time t holds the W log
returns log(p_s / p_{s-1}) for s = t-W+1..t (prices up to and including t, never later) and
the position held before acting. The position chosen at t earns the simple return from t to
t+1: reward = pos_t * (p_{t+1}/p_t - 1) - cost * |pos_t - pos_{t-1}|.

Log returns are normalised with the mean and std of the training segment only; validation and
test data never influence the features.

Paths: a Market may hold several price paths of the same length (per-seed synthetic paths, see
`tune_gems.data.series.load_paths`); every consumer (env, evaluator, replay) reads member p's features
from path `path_of_member[p]`, an explicit argument that defaults to path 0 for every member.
A real price file is one path.

Folds (walk-forward, `tune_gems.data.segments.fold_bounds`): a Market may also hold several splits of
the same paths, one per fold, which share the test segment. Each fold's features are
normalised on that fold's own training window, so the market holds one row of features per
(fold, path), fold-major (`Market.row`); member p reads row `row(fold_of_member[p],
path_of_member[p])`, starts its episodes in its fold's training window and is evaluated on its
fold's validation window. One fold (the default) is exactly the one-split market.

Purged cross-validation (`scheme: purged`): a fold trains on up to two runs of rows, before and
after its validation group (`SegmentBounds.runs`); it is normalised on the runs' log returns
together, and an episode starts in one run at an offset that leaves the whole episode inside
that run (`VecTradingEnv`: one uniform picks an offset among every run's allowed starts), so
no episode steps into the purge, the embargo or the validation group.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from tune_gems.config.schema import Config, EnvConfig
from tune_gems.data.series import SOURCE_COLUMN_ATTR
from tune_gems.contracts.errors import DataError
from tune_gems.rng import to_integers

SEGMENTS = ("train", "val", "test")
_STD_FLOOR = 1e-12
MARKETS_KEPT = 4
"""Markets a MarketCache holds by default (the most recently used): a few data configs of one
sweep, each a few MB of device tensors."""


@dataclass(frozen=True)
class DecisionRange:
    """Decision times t in [lo, hi) of one segment: t and t+1 both lie in the segment."""

    lo: int
    hi: int

    @property
    def length(self) -> int:
        return self.hi - self.lo


class Market:
    """Price paths prepared as device tensors: normalised log returns and next-step returns.

    `prices` is one series or a sequence of series of equal length (one per path); `bounds`
    (the train/val/test split, or a sequence of them: one per fold, sharing the test segment)
    applies to every path, and each path is normalised, per fold, with the mean and std of that
    fold's training segment. `features` and `returns_next` are [folds x paths, n], fold-major
    (`row`); `logret_norm` and `ret_next` are row 0 (fold 0, path 0: what a one-path caller
    reads). `ranges` are fold 0's decision ranges, `fold_ranges[f]` fold f's; `train_runs[f]`
    the decision ranges of fold f's runs of training rows (one, `fold_ranges[f]["train"]`,
    except under purged cross-validation, where "train" spans the runs and the validation group
    between them: episodes start only in the runs).
    """

    def __init__(
        self,
        prices: pd.Series | Sequence[pd.Series],
        bounds,
        window: int,
        device: torch.device | str = "cpu",
        fold_ids: Sequence[int] | None = None,
    ):
        """`fold_ids`: the run's fold index of each fold given (default 0..F-1); a market of
        fold k alone (the arms-and-folds invariant's reference run) reports fold k."""
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
        self.index = paths[0].index if isinstance(paths[0], pd.Series) else pd.RangeIndex(n)
        self.bounds = tuple(folds)  # the SegmentBounds of each fold held
        self.n_paths, self.n_folds = len(paths), len(folds)
        self.fold_ids = tuple(range(len(folds))) if fold_ids is None else tuple(int(f) for f in fold_ids)
        if len(self.fold_ids) != len(folds):
            raise ValueError(f"{len(self.fold_ids)} fold ids for {len(folds)} folds")
        first = paths[0]
        self.times = first.index if isinstance(getattr(first, "index", None), pd.DatetimeIndex) else None
        """Path 0's timestamps (None without a time column): the split's dates (tune_gems.data.summary)."""
        self.column = getattr(first, "attrs", {}).get(SOURCE_COLUMN_ATTR)
        """The file's column the prices were read from (None for synthetic paths)."""
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
        self.fold_ranges = tuple(
            {
                name: DecisionRange(max(seg[0], window), seg[1] - 1)
                for name, seg in zip(SEGMENTS, (fold.train, fold.val, fold.test))
            }
            for fold in folds
        )
        self.ranges = self.fold_ranges[0]
        self.train_runs = tuple(
            tuple(DecisionRange(max(s, window), e - 1) for s, e in getattr(fold, "runs", (fold.train,))) for fold in folds
        )
        # windows[k, s] = path k's features s..s+W-1 (a view, no copy): the observation at t is
        # row t-W+1, one row gather instead of a gather of W indices per observation
        self._windows = self.features.unfold(1, window, 1)

    @property
    def n_rows(self) -> int:
        """Rows of features: one per (fold, path)."""
        return self.features.shape[0]

    def row(self, fold: int, path: int) -> int:
        """The feature row of `path` under fold `fold`'s normalisation."""
        return fold * self.n_paths + path

    def member_rows(self, population: int, path_of_member=None, fold_of_member=None) -> Tensor:
        """Each member's feature row [P] (int64, on the market's device) from its path and fold
        (None: path 0, fold 0 for everyone), checked once on the host."""
        paths = _member_index(path_of_member, population, self.n_paths, "path_of_member", "paths")
        folds = _member_index(fold_of_member, population, self.n_folds, "fold_of_member", "folds")
        return (folds * self.n_paths + paths).to(self.device)

    def member_windows(self, segment: str, population: int, fold_of_member=None) -> tuple[Tensor, int]:
        """(first decision time of each member's `segment` window [P] int64 on the device, the
        common number of decisions T): every fold's window of one segment has the same length
        (fold_bounds gives every validation window `val_length` rows; the test is common)."""
        folds = _member_index(fold_of_member, population, self.n_folds, "fold_of_member", "folds")
        ranges = [r[segment] for r in self.fold_ranges]
        if len({r.length for r in ranges}) != 1:
            raise ValueError(f"the folds' {segment} windows differ in length ({[r.length for r in ranges]})")
        lo = torch.tensor([r.lo for r in ranges], dtype=torch.int64)[folds]
        return lo.to(self.device), ranges[0].length

    @property
    def device(self) -> torch.device:
        return self.features.device

    def check_lengths(self, episode_length: int) -> None:
        """Each segment of every fold must have decision times; training must fit one episode
        (under purged cross-validation: in one of the fold's runs at least)."""
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
        """Observations [..., W+1] at decision times t [...] with current positions pos [...];
        `path` (broadcastable to t) picks each one's path, None means path 0."""
        row = t - (self.window - 1)
        window = self._windows[0, row] if path is None else self._windows[path, row]
        return torch.cat([window, pos.unsqueeze(-1)], dim=-1)

    def returns_at(self, t: Tensor, path: Tensor | None = None) -> Tensor:
        """Simple returns from t to t+1 at decision times t [...], on `path` (None: path 0)."""
        return self.ret_next[t] if path is None else self.returns_next[path, t]

    @property
    def obs_dim(self) -> int:
        return self.window + 1


def _series_digest(prices: pd.Series | None) -> str | None:
    """A digest of everything a Market reads from a given price series: its values, its index
    (the times), its name and attributes (the source column)."""
    if prices is None:
        return None
    digest = hashlib.sha256(pd.util.hash_pandas_object(prices, index=True).to_numpy().tobytes())
    digest.update(repr((prices.name, sorted(prices.attrs.items()), type(prices.index).__name__)).encode())
    return digest.hexdigest()


def market_key(cfg: Config, device: torch.device | str, prices: pd.Series | None, n_seed_indices: int | None = None) -> tuple:
    """What `tune_gems.trainer.trainer.prepare_market(cfg, device, prices, n_seed_indices)` builds
    its market from, as a hashable key: the whole data section (source, file, synthetic paths,
    splits, folds), the observation window and episode length (the minimum rows, the
    segments' check), the seed indices (first_seed_index and their number: per-seed paths)
    and the device, with a digest of a given price series. Two calls with equal keys build
    equal markets."""
    n = cfg.trainer.population if n_seed_indices is None else int(n_seed_indices)
    data = json.dumps(cfg.data.model_dump(mode="json"), sort_keys=True)
    return (data, cfg.env.window, cfg.env.episode_length, cfg.first_seed_index, n, str(torch.device(device)), _series_digest(prices))


class MarketCache:
    """Markets already built in this process, by `market_key` (issue 33: a Ray actor reused for
    the next trial of the same data config and seed set does not rebuild its paths and
    features). Sharing is safe because nothing writes to a Market after construction: the
    environments, evaluators, replay and baselines only read its tensors. Holds the `limit`
    most recently used markets; thread-safe (a build runs under the lock: one trial at a time
    builds a given market)."""

    def __init__(self, limit: int = MARKETS_KEPT):
        if limit < 1:
            raise ValueError(f"a market cache holds at least one market, got limit={limit}")
        self.limit = limit
        self._markets: OrderedDict[Hashable, Market] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._markets)

    def get(self, key: Hashable, build: Callable[[], Market]) -> Market:
        """The market of `key`: the cached one, or `build()`'s (then cached)."""
        with self._lock:
            market = self._markets.get(key)
            if market is None:
                market = build()
                self._markets[key] = market
                while len(self._markets) > self.limit:
                    self._markets.popitem(last=False)
            self._markets.move_to_end(key)
            return market


def _member_index(values: Sequence[int] | Tensor | None, population: int, limit: int, name: str, what: str) -> Tensor:
    """A per-member index (path or fold) as an int64 CPU tensor [P]; None gives 0 to everyone.
    Checked here, once, on the host: a wrong mapping is a caller's bug."""
    if values is None:
        return torch.zeros(population, dtype=torch.int64)
    idx = torch.as_tensor(values, dtype=torch.int64).flatten().cpu()
    if idx.numel() != population:
        raise ValueError(f"{name} has {idx.numel()} entries for a population of {population}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= limit):
        raise ValueError(f"{name} must lie in [0, {limit}) (the market's {what}), got {idx.tolist()}")
    return idx


def run_start_tables(train_runs: Sequence[Sequence[DecisionRange]], episode_length: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per fold, the episode starts its runs allow, as int64 tables for `VecTradingEnv._starts`:
    (first start of each run [F, R], allowed starts before each run [F, R], allowed starts in
    all [F]); R is the most runs a fold has, a fold with fewer gets runs of no starts. A start s
    in run r is allowed when the episode's last decision s + episode_length - 1 stays inside the
    run (below its `hi`), as in a one-run fold; a run shorter than an episode allows none."""
    R = max(len(runs) for runs in train_runs)
    lo = torch.zeros(len(train_runs), R, dtype=torch.int64)
    span = torch.zeros(len(train_runs), R, dtype=torch.int64)
    for f, runs in enumerate(train_runs):
        for r, run in enumerate(runs):
            lo[f, r], span[f, r] = run.lo, max(run.length - episode_length + 1, 0)
        lo[f, len(runs) :] = lo[f, len(runs) - 1]
    offset = torch.cumsum(span, dim=1) - span
    return lo, offset, span.sum(dim=1)


def member_paths(path_of_member: Sequence[int] | Tensor | None, population: int, market: Market) -> Tensor:
    """The path index of each member as an int64 tensor [P] on the market's device; None gives
    path 0 to everyone."""
    return _member_index(path_of_member, population, market.n_paths, "path_of_member", "paths").to(market.device)


def _per_member(path: Tensor | None, like: Tensor) -> Tensor | None:
    """Member paths [P] shaped to broadcast against a [P, ...] tensor (None stays None)."""
    return None if path is None else path.view(-1, *([1] * (like.dim() - 1)))


def _path_index(market: Market, rows: Tensor) -> Tensor | None:
    """What to index the market with: None on a one-row market (one path, one fold: the cheaper
    1-D lookup, the same values), else the member rows."""
    return None if market.n_rows == 1 else rows


class Transition:
    """One vectorised step, [P,E,...] each. `end` marks the last step of an episode (a time
    limit: bootstrap from `next_obs`); `terminal` marks a true end (no bootstrap).

    The step is stored compactly: the decision time `t` and the position `pos` held before
    acting determine the observation, and the position the action chose (`new_pos`) with t+1
    determines the next one. `obs` and `next_obs` are rebuilt on demand by `source` (the env
    that made the step), exactly as the env would have built them; replay stores only t, pos,
    action and the bookkeeping and rebuilds through the same source.
    """

    def __init__(self, action, reward, end, terminal, net_return, t, pos, new_pos, source: "VecTradingEnv"):
        self.action, self.reward, self.end, self.terminal, self.net_return = action, reward, end, terminal, net_return
        self.t, self.pos, self.new_pos, self.source = t, pos, new_pos, source

    @property
    def obs(self) -> Tensor:
        return self.source.observe_at(self.t, self.pos)

    @property
    def next_obs(self) -> Tensor:
        return self.source.observe_at(self.t + 1, self.new_pos)


class ActionMap:
    """Branching actions -> target position: branch 0 picks a direction, branch 1 a size."""

    branches = 2

    def __init__(self, cfg: EnvConfig, device):
        self.directions = torch.tensor(cfg.directions, dtype=torch.float32, device=device)
        self.sizes = torch.tensor(cfg.sizes, dtype=torch.float32, device=device)

    @property
    def sub_actions(self) -> int:
        return self.directions.shape[0]

    def position(self, action: Tensor) -> Tensor:
        return self.directions[action[..., 0]] * self.sizes[action[..., 1]]


class VecTradingEnv:
    """P members x E environments stepping in lockstep on the training segment.

    State lives in preallocated tensors updated in place; `step` never reads a value back to
    the host, so it can be captured in a CUDA graph. Episode starts come from uniforms [P,E]
    the caller draws from each member's own RNG (one per environment, every step).
    """

    def __init__(
        self,
        market: Market,
        cfg: EnvConfig,
        population: int,
        n_envs: int,
        path_of_member: Sequence[int] | Tensor | None = None,
        fold_of_member: Sequence[int] | Tensor | None = None,
    ):
        """`path_of_member` [P]: the market path each member trains on (default: path 0 for all);
        `fold_of_member` [P]: its fold (default 0): episodes start in that fold's training window."""
        self.market, self.cfg = market, cfg
        self.actions = ActionMap(cfg, market.device)
        P, E = population, n_envs
        dev = market.device
        self.path_of_member = member_paths(path_of_member, P, market)
        self.rows = market.member_rows(P, path_of_member, fold_of_member)
        self._paths = _path_index(market, self.rows)
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
                folds = _member_index(fold_of_member, P, market.n_folds, "fold_of_member", "folds")
                train = [runs[0] for runs in market.train_runs]
                self._start_lo = torch.tensor([r.lo for r in train], dtype=torch.int64)[folds].view(P, 1).to(dev)
                self._start_span = torch.tensor([r.length - cfg.episode_length + 1 for r in train], dtype=torch.int64)[folds].to(dev)
        else:  # purged: per member, the runs of its fold's training rows
            folds = _member_index(fold_of_member, P, market.n_folds, "fold_of_member", "folds")
            lo, offset, total = run_start_tables(market.train_runs, cfg.episode_length)
            self._run_lo, self._run_offset = lo[folds].to(dev), offset[folds].to(dev)
            self._start_lo = self._run_lo[:, :1]
            self._start_span = total[folds].to(dev)

    def reset(self, start_u: Tensor) -> None:
        self.t.copy_(self._starts(start_u))
        self.pos.zero_()
        self.steps.zero_()

    def _starts(self, start_u: Tensor) -> Tensor:
        """Episode starts [P, E] from uniforms [P, E]: an offset j among the member's allowed
        starts, the first run's from its lo; with several runs (purged), offset j past run r's
        first allowed start is a start in run r (fixed shapes, no host sync)."""
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
        """Observations [P, ..., obs_dim] of member p at times t[p, ...] holding positions pos[p, ...],
        on member p's path: how replay rebuilds the observations it stored as (t, pos)."""
        return self.market.observe(t, pos, _per_member(self._paths, t))

    def step(self, action: Tensor, start_u: Tensor) -> Transition:
        """Act, earn, advance; environments whose episode ends restart at `_starts(start_u)`."""
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


class SegmentEvaluator:
    """Runs a greedy policy over a whole segment for every member, from a flat position.

    The loop is sequential in time (the position feeds the next observation), so each step is
    a fixed-shape update of preallocated state: `step()` can be captured once as a CUDA graph
    and replayed T times (see tune_gems.trainer.graph.StepRunner), or run eagerly on CPU.
    `policy` maps observations [P,1,obs_dim] to actions [P,1,K] and must read the live
    parameters inside the call (so a captured graph sees later updates).
    """

    def __init__(
        self,
        market: Market,
        actions: ActionMap,
        cost: float,
        policy: Callable[[Tensor], Tensor],
        population: int,
        segment: str,
        path_of_member: Sequence[int] | Tensor | None = None,
        fold_of_member: Sequence[int] | Tensor | None = None,
    ):
        """`path_of_member`, `fold_of_member` [P]: each member's path and fold (default 0): a
        member walks its own fold's window of `segment` (every fold's has the same length)."""
        dev = market.device
        self.market, self.actions, self.cost, self.policy = market, actions, cost, policy
        self.path_of_member = member_paths(path_of_member, population, market)
        paths = _path_index(market, market.member_rows(population, path_of_member, fold_of_member))
        self._path = None if paths is None else paths.view(population, 1)  # against [P,1]
        self.lo_of_member, self.T = market.member_windows(segment, population, fold_of_member)
        self._lo = self.lo_of_member.view(population, 1)
        self.t = self._lo.clone()
        self.pos = torch.zeros(population, 1, device=dev)
        self.i = torch.zeros(1, dtype=torch.int64, device=dev)
        self.returns = torch.zeros(population, self.T, device=dev)
        self.positions = torch.zeros(population, self.T, device=dev)

    def state_tensors(self) -> dict[str, Tensor]:
        return {"t": self.t, "pos": self.pos, "i": self.i, "returns": self.returns, "positions": self.positions}

    def reset(self) -> None:
        self.t.copy_(self._lo)
        self.pos.zero_()
        self.i.zero_()

    def step(self) -> None:
        act = self.policy(self.market.observe(self.t, self.pos, self._path))
        new_pos = self.actions.position(act)
        ret = new_pos * self.market.returns_at(self.t, self._path) - self.cost * (new_pos - self.pos).abs()
        self.returns.index_copy_(1, self.i, ret)
        self.positions.index_copy_(1, self.i, new_pos)
        self.pos.copy_(new_pos)
        self.t.add_(1)
        self.i.add_(1)


def evaluate_segment(
    market: Market,
    actions: ActionMap,
    cost: float,
    policy: Callable[[Tensor], Tensor],
    population: int,
    segment: str,
    path_of_member: Sequence[int] | Tensor | None = None,
    fold_of_member: Sequence[int] | Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Eager one-off evaluation: per-step net returns and positions, both [P,T]."""
    ev = SegmentEvaluator(market, actions, cost, policy, population, segment, path_of_member, fold_of_member)
    for _ in range(ev.T):
        ev.step()
    return ev.returns.clone(), ev.positions.clone()
