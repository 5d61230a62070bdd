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
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from tune_gems import data as data_mod
from tune_gems.config import Config, flatten
from tune_gems.env import Market, SegmentEvaluator
from tune_gems.errors import CheckpointError, ConfigError
from tune_gems.metrics import EPOCH_METRICS, GEM_KEYS, sharpe
from tune_gems.ops import resolve_backend
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.graph import StepRunner
from tune_gems.trainer.health import health_line
from tune_gems.trainer.learner import ACC_ROWS, Learner

RESUMABLE_CHANGES = ("trainer.epochs", "trainer.checkpoint_every", "trainer.graph", "device", "kernels")
"""Config keys that may differ between a checkpoint and the run resuming from it."""

CUBLAS_DETERMINISTIC = ":4096:8"


@dataclass
class EpochResult:
    metrics: dict[str, Any]
    members: list[dict[str, Any]] = field(default_factory=list)


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
    min_len = cfg.env.window + 2
    return data_mod.load_series(cfg.data, min_rows=cfg.env.window + cfg.env.episode_length + 3 * min_len)


def prepare_market(cfg: Config, device: torch.device, prices: pd.Series | None = None) -> Market:
    """Load (or take) the price series, split it and build the device-side features."""
    if prices is None:
        prices = load_prices(cfg)
    bounds = data_mod.split_bounds(prices, cfg.data.splits, min_len=cfg.env.window + 2)
    market = Market(prices, bounds, cfg.env.window, device)
    market.check_lengths(cfg.env.episode_length)
    return market


class Trainer:
    def __init__(self, cfg: Config, *, prices: pd.Series | None = None, log: Callable[[str], None] | None = print):
        self.cfg, self.log = cfg, log or (lambda _msg: None)
        self.device = resolve_device(cfg.device)
        if cfg.trainer.graph == "on" and self.device.type != "cuda":
            raise ConfigError("trainer.graph: 'on' needs a CUDA device (use auto or off)")
        if self.device.type == "cuda":
            # cuBLAS picks reduction orders that vary run to run unless given a fixed workspace
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
        self.market = prepare_market(cfg, self.device, prices)
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
        self._evaluators: dict[str, tuple[SegmentEvaluator, StepRunner]] = {}

    # -- progress ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.diverged or self.epoch >= self.cfg.trainer.epochs

    @property
    def steps_per_iteration(self) -> int:
        return self.cfg.trainer.population * self.cfg.trainer.n_envs

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
        """Noise-free greedy actions; reads the live parameters on every call."""
        net = self.learner.online
        with self.learner.matmul_precision():
            return net.expected_q(net(obs, net.weights("eval")).logits).argmax(-1)

    def _evaluator(self, segment: str) -> tuple[SegmentEvaluator, StepRunner]:
        if segment not in self._evaluators:
            ev = SegmentEvaluator(
                self.market, self.learner.env.actions, self.cfg.env.cost, self._greedy_policy,
                self.cfg.trainer.population, segment,
            )  # fmt: skip
            self._evaluators[segment] = (ev, StepRunner(ev.step, ev.state_tensors, self.runner.use_graph))
        return self._evaluators[segment]

    @torch.no_grad()
    def evaluate(self, segment: str) -> tuple[np.ndarray, torch.Tensor]:
        """Greedy, noise-free policy over a whole segment: (Sharpe per member, returns [P,T]).
        On CUDA one step is captured once and replayed T times."""
        ev, runner = self._evaluator(segment)
        ev.reset()
        for _ in range(ev.T):
            runner()
        rets = ev.returns.clone()
        return np.asarray(sharpe(rets, self.cfg.env.periods_per_year)), rets

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
        for _ in range(tc.iterations_per_epoch):
            self.runner()
        acc = self.learner.acc.double().cpu().numpy() / tc.iterations_per_epoch  # the epoch's one readback
        elapsed = time.perf_counter() - t0
        self.epoch += 1
        self.env_steps += tc.iterations_per_epoch * self.steps_per_iteration
        self.updates += tc.iterations_per_epoch
        rows = dict(zip(ACC_ROWS, acc))
        member_diverged = (rows["nonfinite"] > 0) | ~(np.abs(rows["loss"]) <= tc.divergence_threshold)
        self.diverged = bool(member_diverged.any())
        val, _ = self.evaluate("val")
        val = np.where(member_diverged, np.nan, val)
        test = np.full(tc.population, np.nan)
        if self.epoch >= tc.epochs and not self.diverged:
            test, _ = self.evaluate("test")
        result = self._result(rows, val, test, member_diverged, elapsed)
        self.history.append(result.metrics)
        self.member_history.extend(result.members)
        self.log(health_line(result.metrics, self.learner.gems))
        return result

    def _result(self, rows, val, test, member_diverged, elapsed) -> EpochResult:
        P = self.cfg.trainer.population
        loss = rows["loss"]
        gem_values = {GEM_KEYS[n]: rows[n] for n in ("g6", "g10", "g12")}
        with np.errstate(divide="ignore", invalid="ignore"):
            gem_rel = {f"{k}_rel": v / loss for k, v in gem_values.items()}
        ok = val[~np.isnan(val)]
        tok = test[~np.isnan(test)]
        m: dict[str, Any] = {
            "epoch": self.epoch,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "loss": float(np.mean(loss)),
            "q_mean": float(np.mean(rows["q_mean"])),
            "grad_norm": float(np.mean(rows["grad_norm"])),
            "noisy_sigma": float(self.learner.online.noisy_sigma().mean()),
            "val_sharpe_mean": float(ok.mean()) if ok.size else math.nan,
            "val_sharpe_std": float(ok.std(ddof=1)) if ok.size > 1 else 0.0 if ok.size else math.nan,
            "val_sharpe_min": float(ok.min()) if ok.size else math.nan,
            "val_sharpe_max": float(ok.max()) if ok.size else math.nan,
            "test_sharpe_mean": float(tok.mean()) if tok.size else math.nan,
            "test_sharpe_std": float(tok.std(ddof=1)) if tok.size > 1 else 0.0 if tok.size else math.nan,
        }
        m.update({k: float(np.mean(v)) for k, v in gem_values.items()})
        m.update({k: float(np.mean(v)) for k, v in gem_rel.items()})
        m["diverged"] = self.diverged
        m["sps"] = float(self.cfg.trainer.iterations_per_epoch * self.steps_per_iteration / max(elapsed, 1e-9))
        assert tuple(m) == EPOCH_METRICS
        members = []
        for p in range(P):
            row = {"epoch": self.epoch, "member": p, "seed": self.learner.seeds[p]}
            row.update(val_sharpe=float(val[p]), test_sharpe=float(test[p]), loss=float(loss[p]))
            row.update(q_mean=float(rows["q_mean"][p]), grad_norm=float(rows["grad_norm"][p]))
            row.update({k: float(v[p]) for k, v in gem_values.items()})
            row.update({k: float(v[p]) for k, v in gem_rel.items()})
            row["diverged"] = bool(member_diverged[p])
            members.append(row)
        return EpochResult(metrics=m, members=members)

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
        }

    def save_checkpoint(self, path: str | Path) -> None:
        ckpt.save(path, self.learner.state_tensors(), self._meta())

    def load_checkpoint(self, path: str | Path) -> None:
        state, meta = ckpt.load(path)
        _check_compatible(path, meta.get("config", {}), self.cfg.to_dict())
        ckpt.restore_into(path, self.learner.state_tensors(), state)
        self.runner.invalidate()
        self.epoch, self.env_steps, self.updates = int(meta["epoch"]), int(meta["env_steps"]), int(meta["updates"])
        self.diverged, self._prefilled = bool(meta["diverged"]), bool(meta["prefilled"])
        self.history, self.member_history = list(meta["history"]), list(meta["member_history"])


def _check_compatible(path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    a, b = flatten(saved), flatten(current)
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE_CHANGES:
            continue
        if a.get(key) != b.get(key):
            raise CheckpointError(f"{path}: written with {key}={a.get(key)!r}, this run has {key}={b.get(key)!r}")
