"""The trainer: one process, one device, P members. Epochs of fixed iterations, greedy
evaluation, the HEALTH_DIAG line, divergence detection and exact checkpoints.

Within an epoch nothing syncs with the host: iterations run eagerly (CPU) or as graph replays
(CUDA) and accumulate per-member metrics on the device; the epoch boundary reads them back
once, evaluates on the validation segment, and reports.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch

from tune_gems.data import series as data_mod
from tune_gems.design.arm_sets import arm_aliases, has_gains, paired_gains, verdict_gains
from tune_gems.design.arms import DEFAULT_ARM
from tune_gems.config.schema import Config
from tune_gems.config.dotted import flatten
from tune_gems.market.env import Market, SegmentEvaluator
from tune_gems.contracts.errors import CheckpointError, ConfigError
from tune_gems.market.evaluation import baseline_stats, evaluation_stats, read_back, segment_asset_returns
from tune_gems.model.layers import Affine
from tune_gems.stats.metrics import (
    ARM_SEPARATOR, EVAL_STATS, FOLD_METRICS, FOLD_PREFIX, GAIN_METRICS, GAIN_OBJECTIVES, GEM_GAIN_PREFIX, SEGMENTS, epoch_metrics,
)
from tune_gems.ops import resolve_backend
from tune_gems.contracts.result_files import EVAL_RETURNS_FILE, EVAL_RETURNS_FORMAT
from tune_gems.contracts.safe_files import open_atomic
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.graph import StepRunner
from tune_gems.trainer.health import health_line
from tune_gems.trainer.learner import Learner

RESUMABLE_CHANGES = ("trainer.epochs", "trainer.checkpoint_every", "trainer.checkpoint_interval_s", "trainer.graph", "device", "kernels")
"""Config keys that may differ between a checkpoint and the run resuming from it."""

CUBLAS_DETERMINISTIC = ":4096:8"
EVAL_STEPS_PER_GRAPH = 32
"""Evaluation steps captured in one CUDA graph: a segment of T steps runs as T // 32 replays
plus one of the rest, instead of T replays (each replay has a fixed launch cost)."""

EVAL_WINDOW_KEY = "eval_window"
"""Checkpoint meta key of the kept validation evaluations (Trainer.checkpoint_payload)."""
EVAL_SEGMENT = "val"
"""The segment whose per-step returns are kept for the market-noise interval."""


def _finite_or_nan(v: np.ndarray, reduce: Callable[[np.ndarray], Any]) -> float:
    """`reduce` over the finite values (diverged members are NaN; a breakeven cost may be inf)."""
    ok = v[np.isfinite(v)]
    return float(reduce(ok)) if ok.size else math.nan


def _mean(v: np.ndarray) -> float:
    return _finite_or_nan(v, np.mean)


def _std(v: np.ndarray) -> float:
    """Sample std over finite values; 0.0 for one value, NaN for none."""
    ok = v[np.isfinite(v)]
    return float(ok.std(ddof=1)) if ok.size > 1 else 0.0 if ok.size else math.nan


@dataclass
class EpochResult:
    metrics: dict[str, Any]
    members: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class KeptEvaluation:
    """One validation evaluation kept on the host for the market-noise interval: the epoch, the
    evaluator's per-step net returns and positions ([P,T] float32, as the device computed them)
    and which members had diverged ([P] bool; their series are not a result)."""

    epoch: int
    returns: torch.Tensor
    positions: torch.Tensor
    diverged: torch.Tensor


def resolve_device(name: str) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda requested but no CUDA device is available")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def load_prices(cfg: Config) -> pd.Series:
    """The configured price series, with enough rows for a window, an episode and three segments."""
    return data_mod.load_series(cfg.data, min_rows=_min_rows(cfg))


def _min_rows(cfg: Config) -> int:
    min_len = cfg.env.window + 2
    return cfg.env.window + cfg.env.episode_length + 3 * min_len


def prepare_market(
    cfg: Config,
    device: torch.device,
    prices: pd.Series | None = None,
    n_seed_indices: int | None = None,
    folds: Sequence[int] | None = None,
) -> Market:
    """Load (or take) the price paths, split them into the run's folds and build the device-side
    features.

    `n_seed_indices`: the distinct seed indices of the run (default: its population, the seeds
    per arm), from `cfg.first_seed_index` on; with synthetic `per_seed` paths each gets its own
    path (tune_gems.data.series.load_paths), else one is shared. `prices` (a sweep's driver loads the
    series once for every trial) is that one shared path; with synthetic `per_seed` paths the
    paths are generated here instead (they are a function of the config alone; one path could
    not serve every seed index), and `prices` must be the path of seed index 0. `folds`: which
    of the config's folds (`data.folds`, tune_gems.data.series.fold_bounds) the market holds (default
    all; one fold alone is the reference run of the folds invariant, tests/test_folds.py).
    """
    n_seed_indices = cfg.trainer.population if n_seed_indices is None else n_seed_indices
    per_seed = cfg.data.source == "synthetic" and cfg.data.synthetic.paths == "per_seed"
    if prices is not None and not per_seed:
        paths = [prices]
    else:
        first = cfg.first_seed_index
        paths = data_mod.load_paths(cfg.data, n_seed_indices, min_rows=_min_rows(cfg), first_seed_index=first)
        path0 = paths[0] if first == 0 else data_mod.load_series(cfg.data) if prices is not None else None
        if prices is not None and not np.array_equal(np.asarray(prices, dtype=np.float64), np.asarray(path0, dtype=np.float64)):
            raise ValueError("prepare_market: the given prices are not the path of seed index 0 of the config's per_seed synthetic paths")
    bounds = data_mod.fold_bounds(paths[0], cfg.data.splits, cfg.data.folds, min_len=cfg.env.window + 2)
    fold_ids = list(range(len(bounds))) if folds is None else [int(f) for f in folds]
    if any(not 0 <= f < len(bounds) for f in fold_ids):
        raise ValueError(f"prepare_market: folds {fold_ids} outside the config's {len(bounds)} folds")
    market = Market(paths, [bounds[f] for f in fold_ids], cfg.env.window, device, fold_ids=fold_ids)
    market.check_lengths(cfg.env.episode_length)
    return market


class Trainer:
    def __init__(
        self, cfg: Config, *, prices: pd.Series | None = None, log: Callable[[str], None] | None = print, market: Market | None = None,
    ):
        """`market`: the one `prepare_market(cfg, device, prices)` builds, already built (a reused
        sweep actor's, tune_gems.sweep.trainable); None builds it."""
        self.cfg, self.log = cfg, log or (lambda _msg: None)
        self.on_iteration: Callable[[], None] | None = None
        """Called after each training iteration (`tune-gems train`'s progress bar), if set."""
        self.device = resolve_device(cfg.device)
        if cfg.trainer.graph == "on" and self.device.type != "cuda":
            raise ConfigError("trainer.graph: 'on' needs a CUDA device (use auto or off)")
        if self.device.type == "cuda":
            # cuBLAS picks reduction orders that vary run to run unless given a fixed workspace
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
        self.market = market if market is not None else prepare_market(cfg, self.device, prices, n_seed_indices=cfg.trainer.population)
        self.ops = resolve_backend(cfg.kernels, self.device)
        self.learner = Learner(cfg, self.market, self.device, self.ops)
        use_graph = self.device.type == "cuda" and cfg.trainer.graph != "off"
        self.runner = StepRunner(self.learner.iteration, self.learner.state_tensors, use_graph)
        self.epoch = 0
        self.env_steps = 0
        self.updates = 0
        self.diverged = False
        self.history: list[dict[str, Any]] = []
        self.member_history: list[dict[str, Any]] = []
        self._prefilled = False
        self._evaluators: dict[str, tuple[SegmentEvaluator, list[tuple[StepRunner, int]]]] = {}
        self._eval_w: dict | None = None  # the evaluation weights' buffers (_refresh_eval_weights)
        self.eval_window: list[KeptEvaluation] = []
        """The last `trainer.objective_last_k` validation evaluations (the `_lastk` window), oldest
        first: what `write_eval_returns` writes; part of every checkpoint."""
        self._eval_asset_host: np.ndarray | None = None
        self._eval_asset()  # read once here, on the thread that trains

    # -- progress ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.diverged or self.epoch >= self.cfg.trainer.epochs

    @property
    def steps_per_iteration(self) -> int:
        return self.learner.P * self.cfg.trainer.n_envs

    def _prefill(self) -> None:
        """Fill replay before learning: at least learning_starts transitions per member."""
        tc = self.cfg.trainer
        need = max(tc.learning_starts, self.learner.replay.min_fill())
        self.learner.reset_envs()
        n = math.ceil(need / tc.n_envs)
        for _ in range(n):
            self.learner.collect()
        self.env_steps += n * self.steps_per_iteration
        self._prefilled = True

    # -- evaluation --------------------------------------------------------------------------
    def _greedy_policy(self, obs: torch.Tensor) -> torch.Tensor:
        """Noise-free greedy actions from the evaluation weights (`_refresh_eval_weights`)."""
        net = self.learner.online
        with self.learner.matmul_precision():
            return net.expected_q(net(obs, self._eval_weights()).logits).argmax(-1)

    def _eval_weights(self) -> dict:
        if self._eval_w is None:
            self._refresh_eval_weights()
        return self._eval_w

    def _refresh_eval_weights(self) -> None:
        """The online net's noise-free weights, computed once per evaluation pass into fixed
        buffers that the captured evaluation steps read: they do not change within a segment,
        so the steps need not redo spectral norm's sigma and division every step. The same
        ops on the same inputs as computing them in every step: the same bits."""
        net = self.learner.online
        with self.learner.matmul_precision():
            fresh = net.weights("eval")
        if self._eval_w is None:
            self._eval_w = {k: Affine(w.clone(), b.clone(), getattr(a, "chunk", None)) for k, a in fresh.items() for w, b in [a]}
        else:
            for k, (w, b) in fresh.items():
                self._eval_w[k][0].copy_(w)
                self._eval_w[k][1].copy_(b)

    def _evaluator(self, segment: str) -> tuple[SegmentEvaluator, list[tuple[StepRunner, int]]]:
        """A segment's evaluator and its runners: (runner, calls) pairs that together run the
        segment's T steps, EVAL_STEPS_PER_GRAPH steps per call and one call for the rest."""
        if segment not in self._evaluators:
            ev = SegmentEvaluator(
                self.market, self.learner.env.actions, self.cfg.env.cost, self._greedy_policy,
                self.learner.P, segment, path_of_member=self.learner.path_of_member, fold_of_member=self.learner.fold_of_member,
            )  # fmt: skip
            use_graph, chunk = self.runner.use_graph, EVAL_STEPS_PER_GRAPH
            # one warm-up call before capture: the runner for the rest is first called T % chunk
            # steps before the segment's end, and its warm-up must not step past it
            runners = [(StepRunner(ev.step, ev.state_tensors, use_graph, warmup=1, steps=chunk), ev.T // chunk)]
            if ev.T % chunk:
                runners.append((StepRunner(ev.step, ev.state_tensors, use_graph, warmup=1, steps=ev.T % chunk), 1))
            self._evaluators[segment] = (ev, [(r, n) for r, n in runners if n])
        return self._evaluators[segment]

    @torch.no_grad()
    def evaluate(self, segment: str) -> tuple[dict[str, np.ndarray], torch.Tensor, torch.Tensor]:
        """Greedy, noise-free policy over a whole segment: ({stat: [P]} for every name in
        metrics.EVAL_STATS, net returns [P,T], positions [P,T]). On CUDA one step is captured
        once and replayed T times; the statistics come back in one transfer."""
        ev, runners = self._evaluator(segment)
        self._refresh_eval_weights()
        ev.reset()
        for runner, calls in runners:
            for _ in range(calls):
                runner()
        asset = self._asset_returns(segment)  # each member's own path and fold window
        env = self.cfg.env
        stats = read_back(evaluation_stats(ev.positions, asset, env.cost, env.periods_per_year))
        return stats, ev.returns.clone(), ev.positions.clone()

    def _asset_returns(self, segment: str) -> torch.Tensor:
        """The asset returns each member's positions earn over its own window of `segment`."""
        return segment_asset_returns(self.market, segment, self.learner.path_of_member, self.learner.fold_of_member)

    def baselines(self) -> pd.DataFrame:
        """The flat, buy-and-hold and momentum baselines on the validation and test segments
        (tune_gems.market.evaluation.baseline_stats; one row per fold, segment, baseline and path: each
        fold's own validation window, the common test segment), the yardstick for the members'
        evaluation columns. Written beside the tables by the writers."""
        env = self.cfg.env
        returns = self.market.returns_next[: self.market.n_paths]  # raw returns: the same under every fold
        frames = []
        for fold, ranges in zip(self.market.fold_ids, self.market.fold_ranges):
            segments = {s: ranges[s] for s in SEGMENTS}
            frame = baseline_stats(returns, segments, env.cost, env.periods_per_year, momentum_span=env.momentum_span)
            frames.append(frame.assign(fold=int(fold)))
        return pd.concat(frames, ignore_index=True)

    def fold_table(self) -> pd.DataFrame:
        """One row per fold of the run: its windows (tune_gems.data.series.fold_table), for folds.csv."""
        m = self.market
        return data_mod.fold_table(m.index, m.bounds, self.cfg.data.folds.layout, m.fold_ids)

    def sample_timings(self, iterations: int) -> tuple[float, float, float]:
        """(prefill s, s per training iteration, s per validation evaluation), measured by running
        them on this run's device: what `--dry-run` extrapolates a run's time from. One untimed
        iteration first (graph capture, kernel warm-up). The trainer has moved on afterwards:
        a throw-away instance, never one that trains."""
        def sync() -> None:
            if self.device.type == "cuda":
                torch.cuda.synchronize()

        t0 = time.perf_counter()
        self._prefill()
        sync()
        prefill_s = time.perf_counter() - t0
        self.runner()
        sync()
        t1 = time.perf_counter()
        for _ in range(iterations):
            self.runner()
        sync()
        per_iteration_s = (time.perf_counter() - t1) / iterations
        t2 = time.perf_counter()
        self.evaluate(EVAL_SEGMENT)
        sync()
        return prefill_s, per_iteration_s, time.perf_counter() - t2

    # -- one epoch ---------------------------------------------------------------------------
    def run_epoch(self) -> EpochResult:
        if self.done:
            raise RuntimeError("training is finished")
        tc = self.cfg.trainer
        if not self._prefilled:
            self._prefill()
        self.learner.acc.zero_()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tick = self.on_iteration
        for _ in range(tc.iterations_per_epoch):
            self.runner()
            if tick is not None:
                tick()
        acc = self.learner.acc.double().cpu().numpy() / tc.iterations_per_epoch  # the epoch's one readback
        train_s = time.perf_counter() - t0
        self.epoch += 1
        self.env_steps += tc.iterations_per_epoch * self.steps_per_iteration
        self.updates += tc.iterations_per_epoch
        rows = dict(zip(self.learner.acc_rows, acc))
        member_diverged = (rows["nonfinite"] > 0) | ~(np.abs(rows["loss"]) <= tc.divergence_threshold)
        self.diverged = bool(member_diverged.any())
        t1 = time.perf_counter()
        val_stats, val_returns, val_positions = self.evaluate(EVAL_SEGMENT)
        evals = {"val": self._masked(val_stats, member_diverged)}
        self._keep_evaluation(val_returns, val_positions, member_diverged)
        evals["test"] = {k: np.full(self.learner.P, np.nan) for k in EVAL_STATS}
        if self.epoch >= tc.epochs and not self.diverged:
            evals["test"] = self.evaluate("test")[0]
        eval_s = time.perf_counter() - t1
        result = self._result(rows, evals, member_diverged, train_s, eval_s)
        self.history.append(result.metrics)
        self.member_history.extend(result.members)
        self.log(health_line(result.metrics, self.learner.gems, self.arm_names, self._arm_off(), self.market.fold_ids, arm_aliases(self.cfg)))
        return result

    # -- the kept validation returns (market-noise interval, docs/results.md) -------------------
    def _keep_evaluation(self, returns: torch.Tensor, positions: torch.Tensor, member_diverged: np.ndarray) -> None:
        """Append this epoch's validation series (moved to the host at the epoch boundary, where
        the statistics are read back anyway) and keep the last `trainer.objective_last_k`."""
        kept = KeptEvaluation(
            self.epoch,
            returns.detach().to("cpu", torch.float32).clone(),
            positions.detach().to("cpu", torch.float32).clone(),
            torch.as_tensor(np.asarray(member_diverged, dtype=bool)).clone(),
        )
        self.eval_window = [*self.eval_window, kept][-self.cfg.trainer.objective_last_k :]

    def _eval_asset(self) -> np.ndarray:
        """float32 [P,T]: the asset return each member's validation position earns (its own
        path, `evaluation.segment_asset_returns`). Read from the device once, on the thread that
        trains (at construction: a background checkpoint writer must not touch the device)."""
        if self._eval_asset_host is None:
            P, T = self.learner.P, self.market.ranges[EVAL_SEGMENT].length
            asset = self._asset_returns(EVAL_SEGMENT)
            asset = asset.expand(P, T) if asset.ndim == 1 else asset
            self._eval_asset_host = asset.detach().to("cpu", torch.float32).numpy().copy()
        return self._eval_asset_host

    def eval_returns(self, meta: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """The arrays of EVAL_RETURNS_FILE (docs/results.md "eval_returns.npz"): k = the kept
        evaluations (at most `trainer.objective_last_k`), P members, T validation steps.

        returns, positions float32 [k,P,T]; diverged bool [k,P]; epochs int64 [k]; asset float32
        [P,T]; member, seed_index, seed, path, fold, window_start int64 [P] (window_start: the
        series row of the member's first validation decision; every fold's window has T steps);
        arm str [P]; cost, periods_per_year float64; segment str; format int64 (EVAL_RETURNS_FORMAT). `meta`: a checkpoint payload's
        metadata (`checkpoint_payload()[1]`, or a background writer's snapshot of it) to take the
        window from instead of the live one; only host data is read then."""
        window = self._window_meta() if meta is None else meta.get(EVAL_WINDOW_KEY)
        if window is None:
            raise ValueError(f"eval_returns: the metadata has no {EVAL_WINDOW_KEY!r}")
        P, env = self.learner.P, self.cfg.env
        return {
            "format": np.asarray(EVAL_RETURNS_FORMAT, dtype=np.int64),
            "epochs": np.asarray(window["epochs"], dtype=np.int64),
            "returns": window["returns"].numpy().astype(np.float32, copy=False),
            "positions": window["positions"].numpy().astype(np.float32, copy=False),
            "diverged": window["diverged"].numpy().astype(bool, copy=False),
            "asset": self._eval_asset(),
            "member": np.arange(P, dtype=np.int64),
            "arm": np.asarray([str(self.arm_of(p)) for p in range(P)], dtype=str),
            "seed_index": np.asarray([self.seed_index(p) for p in range(P)], dtype=np.int64),
            "seed": np.asarray(self.learner.seeds, dtype=np.int64),
            "path": np.asarray(self.learner.path_of_member, dtype=np.int64),
            "fold": np.asarray([self.fold_of(p) for p in range(P)], dtype=np.int64),
            "window_start": self._window_start(),
            "cost": np.asarray(env.cost, dtype=np.float64),
            "periods_per_year": np.asarray(env.periods_per_year, dtype=np.float64),
            "segment": np.asarray(EVAL_SEGMENT),
        }

    def write_eval_returns(self, directory: str | Path, meta: dict[str, Any] | None = None) -> None:
        """Write `<directory>/eval_returns.npz` (EVAL_RETURNS_FILE; the arrays of `eval_returns`)
        through a temporary name, so a reader never sees a partial file. Written with every
        checkpoint, from that checkpoint's own metadata (`meta`, in the background writer's
        thread): beside a train run's checkpoint, and into each sweep checkpoint directory."""
        directory = Path(directory)
        arrays = self.eval_returns(meta)
        with open_atomic(directory / EVAL_RETURNS_FILE) as f:  # never through a planted symlink
            np.savez_compressed(f, **arrays)

    def _window_start(self) -> np.ndarray:
        """int64 [P]: the series row of each member's first validation decision (its fold's)."""
        lo, _ = self.market.member_windows(EVAL_SEGMENT, self.learner.P, self.learner.fold_of_member)
        return lo.cpu().numpy().astype(np.int64)

    def _window_meta(self) -> dict[str, Any]:
        """The kept evaluations as checkpoint metadata (host tensors, built fresh on each call)."""
        w = self.eval_window
        P, T = self.learner.P, self.market.ranges[EVAL_SEGMENT].length
        if not w:
            return {"epochs": [], "returns": torch.zeros(0, P, T), "positions": torch.zeros(0, P, T),
                    "diverged": torch.zeros(0, P, dtype=torch.bool)}
        return {
            "epochs": [e.epoch for e in w],
            "returns": torch.stack([e.returns for e in w]),
            "positions": torch.stack([e.positions for e in w]),
            "diverged": torch.stack([e.diverged for e in w]),
        }

    def _saved_window(self, path, saved: Any) -> list[KeptEvaluation]:
        """The kept evaluations of a checkpoint's metadata, checked against this run's shapes;
        none in a checkpoint written before they existed (the window refills over the next
        epochs)."""
        if saved is None:
            return []
        P, T = self.learner.P, self.market.ranges[EVAL_SEGMENT].length
        field_name = f"meta.{EVAL_WINDOW_KEY}"
        if not isinstance(saved, dict) or not {"epochs", "returns", "positions", "diverged"} <= set(saved):
            raise CheckpointError(f"{path}: field {field_name} must be a mapping with epochs, returns, positions, diverged")
        epochs = saved["epochs"]
        if not isinstance(epochs, list) or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
            raise CheckpointError(f"{path}: field {field_name}.epochs must be a list of epoch numbers")
        k = len(epochs)
        for name, shape, dtype in (("returns", (k, P, T), torch.float32), ("positions", (k, P, T), torch.float32),
                                   ("diverged", (k, P), torch.bool)):
            t = saved[name]
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype:
                got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise CheckpointError(f"{path}: field {field_name}.{name} is {got}, this run needs {shape} {dtype}")
        return [
            KeptEvaluation(int(e), saved["returns"][i].clone(), saved["positions"][i].clone(), saved["diverged"][i].clone())
            for i, e in enumerate(epochs)
        ]

    # -- arms (tune_gems.design.arms; the learner's member layout, one arm without `arms`) ------------
    @property
    def arm_names(self) -> tuple[str, ...]:
        layout = getattr(self.learner, "layout", None)
        return tuple(layout.arms) if layout is not None else (DEFAULT_ARM,)

    def arm_of(self, member: int) -> str:
        layout = getattr(self.learner, "layout", None)
        return layout.arm_of(member) if layout is not None else DEFAULT_ARM

    def seed_index(self, member: int) -> int:
        layout = getattr(self.learner, "layout", None)
        return layout.seed_index(member) if layout is not None else member

    def fold_of(self, member: int) -> int:
        """The member's walk-forward fold (data.folds; the run's index, 0 without folds)."""
        return int(self.market.fold_ids[self.learner.fold_of_member[member]])

    def _arm_off(self) -> dict[str, set[str]]:
        """Per arm, the gems it has off in every member (HEALTH_DIAG prints `off` for them)."""
        member_gems = getattr(self.learner, "member_gems", None)
        out: dict[str, set[str]] = {}
        for arm in self.arm_names:
            members = [p for p in range(self.learner.P) if self.arm_of(p) == arm]
            out[arm] = {
                s.name for s in self.learner.gems.settings.values()
                if (all(member_gems.modes[s.name][p] == "off" for p in members) if member_gems is not None else s.mode == "off")
            }  # fmt: skip
        return out

    @staticmethod
    def _masked(stats: dict[str, np.ndarray], member_diverged: np.ndarray) -> dict[str, np.ndarray]:
        return {k: np.where(member_diverged, np.nan, v) for k, v in stats.items()}

    def _result(self, rows, evals, member_diverged, train_s, eval_s) -> EpochResult:
        P = self.learner.P
        loss = rows["loss"]
        settings = self.learner.gems.settings.values()
        gem_values = {s.metric: rows[s.name] for s in settings}
        with np.errstate(divide="ignore", invalid="ignore"):
            gem_values.update({f"{s.metric}_rel": rows[s.name] / loss for s in settings})
        gem_values.update({f"{s.metric}_null": rows[f"{s.name}_null"] for s in settings})
        gem_values.update({f"{s.metric}_excess": rows[s.name] - rows[f"{s.name}_null"] for s in settings})
        val, test = evals["val"]["sharpe"], evals["test"]["sharpe"]
        m: dict[str, Any] = {
            "epoch": self.epoch,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "loss": float(np.mean(loss)),
            "q_mean": float(np.mean(rows["q_mean"])),
            "grad_norm": float(np.mean(rows["grad_norm"])),
            "noisy_sigma": float(self.learner.online.noisy_sigma().mean()),
            "val_sharpe_mean": _mean(val),
            "val_sharpe_std": _std(val),
            "val_sharpe_min": _finite_or_nan(val, np.min),
            "val_sharpe_max": _finite_or_nan(val, np.max),
            "test_sharpe_mean": _mean(test),
            "test_sharpe_std": _std(test),
        }
        for seg in SEGMENTS:
            m.update({f"{seg}_{k}_mean": _mean(evals[seg][k]) for k in EVAL_STATS if k != "sharpe"})
        m.update({f"{seg}_alpha_sharpe_std": _std(evals[seg]["alpha_sharpe"]) for seg in SEGMENTS})
        m.update({f"{seg}_breakeven_cost_bps_median": _finite_or_nan(evals[seg]["breakeven_cost_bps"], np.median) for seg in SEGMENTS})
        k = self.cfg.trainer.objective_last_k
        for objective, column in (("val_sharpe_mean_lastk", "val_sharpe_mean"), ("val_alpha_sharpe_mean_lastk", "val_alpha_sharpe_mean")):
            recent = [h[column] for h in self.history[-(k - 1):]] if k > 1 else []
            m[objective] = float(np.mean([*recent, m[column]]))
        m.update({k: float(np.mean(v)) for k, v in gem_values.items()})
        m["diverged"] = self.diverged
        m["sps"] = float(self.cfg.trainer.iterations_per_epoch * self.steps_per_iteration / max(train_s, 1e-9))
        m.update(train_s=float(train_s), eval_s=float(eval_s))
        arm_of = [self.arm_of(p) for p in range(P)]  # plain str: checkpoints load weights-only
        arms = self.arm_names
        for arm in arms if len(arms) > 1 else ():
            mine = (np.array(arm_of) == arm) & ~member_diverged
            m[f"val_sharpe_mean@{arm}"] = _mean(val[mine])
            m[f"val_alpha_sharpe_mean@{arm}"] = _mean(evals["val"]["alpha_sharpe"][mine])
            m.update({f"{s.metric}@{arm}": _mean(rows[s.name][mine]) for s in settings})
        if has_gains(arms):
            m.update(self._gains(arm_of, evals["val"], member_diverged))
        fold_of = np.array([self.fold_of(p) for p in range(P)])
        folds = self.market.fold_ids
        for fold in folds if len(folds) > 1 else ():
            mine = (fold_of == fold) & ~member_diverged
            for column in FOLD_METRICS:
                seg, stat = column.split("_", 1)
                m[f"{column}{ARM_SEPARATOR}{FOLD_PREFIX}{fold}"] = _mean(evals[seg][stat.removesuffix("_mean")][mine])
        assert tuple(m) == epoch_metrics(self.cfg.plugins, arms, folds)
        members = []
        for p in range(P):
            row = {"epoch": self.epoch, "member": p, "seed": self.learner.seeds[p], "arm": str(arm_of[p]),
                   "seed_index": int(self.seed_index(p)), "fold": int(fold_of[p])}  # fmt: skip
            row.update(val_sharpe=float(val[p]), test_sharpe=float(test[p]))
            for seg in SEGMENTS:
                row.update({f"{seg}_{k}": float(evals[seg][k][p]) for k in EVAL_STATS if k != "sharpe"})
            row.update(loss=float(loss[p]), q_mean=float(rows["q_mean"][p]), grad_norm=float(rows["grad_norm"][p]))
            row.update({k: float(v[p]) for k, v in gem_values.items()})
            row["diverged"] = bool(member_diverged[p])
            members.append(row)
        return EpochResult(metrics=m, members=members)

    def _gains(self, arm_of: list[str], val: dict[str, np.ndarray], member_diverged: np.ndarray) -> dict[str, float]:
        """The paired gains of a designed run (tune_gems.design.arm_sets.paired_gains: proposal minus
        control, and minus without-<gem>, at each seed index; NaN where a member of a pair
        diverged), the gains' last-k means (the same k and window as the other objectives;
        NaN if any epoch in the window is NaN), and the verdict's statistic on the same window
        (tune_gems.design.arm_sets.verdict_gains, from the members' last-k rows)."""
        gems = self.cfg.gem_names()
        S = self.cfg.trainer.population
        # pairs are the same seed index in the same fold
        pair_key = [self.learner.fold_of_member[p] * S + self.learner.layout.seed_slot(p) for p in range(self.learner.P)]
        g = paired_gains(gems, arm_of, pair_key, val["sharpe"], val["alpha_sharpe"], aliases=arm_aliases(self.cfg))
        k = self.cfg.trainer.objective_last_k
        out = {name: g[name] for name in GAIN_METRICS}
        for objective, column in zip(GAIN_OBJECTIVES, GAIN_METRICS):
            recent = [h[column] for h in self.history[-(k - 1):]] if k > 1 else []
            out[objective] = float(np.mean([*recent, g[column]]))
        out.update({f"{GEM_GAIN_PREFIX}{name}": g[f"gain_{name}"] for name in gems})
        P = self.learner.P
        earlier = [r for r in self.member_history if r["epoch"] > self.epoch - k]
        window = np.array([[r["val_alpha_sharpe"] for r in earlier] + list(val["alpha_sharpe"])], dtype=np.float64)
        flags = np.array([[bool(r["diverged"]) for r in earlier] + list(member_diverged)], dtype=bool)
        out.update(verdict_gains(gems, arm_of, pair_key, window.reshape(-1, P), flags.reshape(-1, P), aliases=arm_aliases(self.cfg)))
        return out

    def fit(self, on_epoch: Callable[[EpochResult], None] | None = None) -> list[EpochResult]:
        results = []
        while not self.done:
            r = self.run_epoch()
            results.append(r)
            if on_epoch is not None:
                on_epoch(r)
        return results

    # -- checkpoints -------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "diverged": self.diverged,
            "prefilled": self._prefilled,
            "history": self.history,
            "member_history": self.member_history,
            "config": self.cfg.to_dict(),
            EVAL_WINDOW_KEY: self._window_meta(),
        }

    def checkpoint_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(state tensors, metadata): everything a checkpoint holds. The tensors are the live
        device state (a writer that works in the background must snapshot them before the next
        iteration); the metadata is host data, built fresh on each call (it includes the kept
        validation evaluations, `eval_window`, as host tensors under EVAL_WINDOW_KEY)."""
        return self.learner.state_tensors(), self._meta()

    def save_checkpoint(self, path: str | Path) -> None:
        ckpt.save(path, *self.checkpoint_payload())

    def load_checkpoint(self, path: str | Path) -> None:
        state, meta = ckpt.load(path)
        _check_compatible(path, meta.get("config", {}), self.cfg.to_dict())
        window = self._saved_window(path, meta.get(EVAL_WINDOW_KEY))
        ckpt.restore_into(path, self.learner.state_tensors(), state)
        self.runner.invalidate()
        self.epoch, self.env_steps, self.updates = int(meta["epoch"]), int(meta["env_steps"]), int(meta["updates"])
        self.diverged, self._prefilled = bool(meta["diverged"]), bool(meta["prefilled"])
        self.history, self.member_history = list(meta["history"]), list(meta["member_history"])
        self.eval_window = window


def _check_compatible(path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Every config key equal, except RESUMABLE_CHANGES; a key the checkpoint lacks (written
    before the key existed, e.g. `first_seed_index` or `data.folds`) is compatible at its default value."""
    a, b = flatten(saved), flatten(current)
    defaults = flatten(Config().to_dict())
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE_CHANGES:
            continue
        if key not in a and key in defaults and b.get(key) == defaults[key]:
            continue
        if a.get(key) != b.get(key):
            raise CheckpointError(f"{path}: written with {key}={a.get(key)!r}, this run has {key}={b.get(key)!r}")
