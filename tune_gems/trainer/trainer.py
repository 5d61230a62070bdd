"""The trainer: one process, one device, P members; epochs of fixed iterations with nothing synced
within, their evaluation, rows and HEALTH_DIAG line, divergence and exact checkpoints. An epoch is
queued (`begin_epoch`) apart from its boundary (`finish_epoch`)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from tune_gems.config.dotted import flatten
from tune_gems.config.schema import Config
from tune_gems.contracts.errors import CheckpointError
from tune_gems.data.segments import fold_table
from tune_gems.data.summary import history_table
from tune_gems.design.arms import RunArms
from tune_gems.market.features import Market
from tune_gems.market.evaluation import baseline_stats
from tune_gems.ops import resolve_backend
from tune_gems.stats.metrics import EVAL_STATS, SEGMENTS
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.epoch_row import EpochMeasures, EpochResult, epoch_result
from tune_gems.trainer.eval_window import EVAL_SEGMENT, EVAL_WINDOW_KEY, EvalWindow
from tune_gems.trainer.evaluator import GreedyEvaluator
from tune_gems.trainer.graph import StepRunner
from tune_gems.trainer.health import health_line
from tune_gems.trainer.learner import Learner
from tune_gems.trainer.member_ids import member_ids
from tune_gems.trainer.run_setup import prepare_market, run_device

RESUMABLE_CHANGES = ("trainer.epochs", "trainer.checkpoint_every", "trainer.checkpoint_interval_s", "trainer.graph", "device", "kernels")
"""Config keys that may differ between a checkpoint and the run resuming from it."""


class Trainer:
    """One run of `cfg`; `prices`: a sweep driver's shared path; `arms`: the run's arms record."""

    def __init__(
        self, cfg: Config, *, prices: pd.Series | None = None, log: Callable[[str], None] | None = print,
        arms: RunArms | None = None, market: Market | None = None,
    ):  # fmt: skip
        self.cfg, self.log = cfg, log or (lambda _msg: None)
        self.on_iteration: Callable[[], None] | None = None  # after each iteration (train's progress bar)
        self.device = run_device(cfg)
        self.market = market if market is not None else prepare_market(cfg, self.device, prices, n_seed_indices=cfg.trainer.population)
        self.ops = resolve_backend(cfg.kernels, self.device)
        self.learner = Learner(cfg, self.market, self.device, self.ops, arms=arms)
        self.arms: RunArms = self.learner.run_arms  # on the folds the market holds
        use_graph = self.device.type == "cuda" and cfg.trainer.graph != "off"
        self.runner = StepRunner(self.learner.iteration, self.learner.state_tensors, use_graph)
        self.evaluator = GreedyEvaluator(self.learner, self.market, cfg.env, use_graph)
        self.ids = member_ids(self.learner, self.market)
        self.window = EvalWindow.of_run(cfg, self.ids, self.market, self.evaluator)  # eval_returns.npz; in every checkpoint
        self.epoch = 0
        self.env_steps = 0
        self.updates = 0
        self.diverged = False
        self.history: list[dict[str, Any]] = []
        self.member_history: list[dict[str, Any]] = []
        self._prefilled = False
        self._queued: EpochClock | None = None  # the clock of the epoch begun and not finished

    @property
    def done(self) -> bool:
        return self.diverged or self.epoch >= self.cfg.trainer.epochs

    @property
    def queues_ahead(self) -> bool:
        """Whether queuing an epoch returns before it has trained (on CUDA)."""
        return self.device.type == "cuda"

    @property
    def epoch_queued(self) -> bool:
        """An epoch was queued and not finished: the device state is past `epoch`, so no checkpoint."""
        return self._queued is not None

    @property
    def steps_per_iteration(self) -> int:
        return self.learner.P * self.cfg.trainer.n_envs

    def _prefill(self) -> None:
        tc = self.cfg.trainer
        need = max(tc.learning_starts, self.learner.replay.min_fill())
        self.learner.reset_envs()
        n = math.ceil(need / tc.n_envs)
        for _ in range(n):
            self.learner.collect()
        self.env_steps += n * self.steps_per_iteration
        self._prefilled = True

    def baselines(self) -> pd.DataFrame:
        """The baselines on the validation and test segments, a row per fold, segment, baseline and path."""
        env = self.cfg.env
        returns = self.market.returns_next[: self.market.n_paths]  # raw returns: the same under every fold
        frames = []
        for fold, ranges in zip(self.market.fold_ids, self.market.fold_ranges):
            segments = {s: ranges[s] for s in SEGMENTS}
            frame = baseline_stats(returns, segments, env.cost, env.periods_per_year, momentum_span=env.momentum_span)
            frames.append(frame.assign(fold=int(fold)))
        table = pd.concat(frames, ignore_index=True)
        return table.assign(history=table["path"] if self.cfg.data.source != "synthetic" else 0)

    def fold_table(self) -> pd.DataFrame:
        """One row per fold (per history and fold on several calendars), for folds.csv."""
        m = self.market
        return fold_table(m.indexes, m.bounds, self.cfg.data.folds.layout, m.fold_ids)

    def history_table(self) -> pd.DataFrame:
        return history_table(self.cfg.data, self.market)

    def sample_timings(self, iterations: int) -> tuple[float, float, float]:
        """(prefill s, s per iteration, s per validation pass) on this device: for `--dry-run`; a throw-away only."""
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
        self.evaluator.evaluate(EVAL_SEGMENT)
        sync()
        return prefill_s, per_iteration_s, time.perf_counter() - t2

    def run_epoch(self) -> EpochResult:
        self.begin_epoch()
        return self.finish_epoch()

    def begin_epoch(self) -> None:
        """Queue the next epoch's iterations (prefilling once); on CUDA only enqueued."""
        if self.done:
            raise RuntimeError("training is finished")
        if self._queued is not None:
            raise RuntimeError(f"epoch {self.epoch + 1} is already queued; finish it first")
        tc = self.cfg.trainer
        if not self._prefilled:
            self._prefill()
        self.learner.acc.zero_()
        clock = EpochClock(self.device)
        tick = self.on_iteration
        for _ in range(tc.iterations_per_epoch):
            self.runner()
            if tick is not None:
                tick()
        clock.stop()
        self._queued = clock

    def finish_epoch(self) -> EpochResult:
        """The queued epoch's boundary: accumulators read back, evaluation, rows, HEALTH_DIAG."""
        if self._queued is None:
            raise RuntimeError("no epoch is queued; begin_epoch first")
        tc = self.cfg.trainer
        acc = self.learner.acc.double().cpu().numpy() / tc.iterations_per_epoch  # the epoch's one readback
        train_s, self._queued = self._queued.seconds(), None
        self.epoch += 1
        self.env_steps += tc.iterations_per_epoch * self.steps_per_iteration
        self.updates += tc.iterations_per_epoch
        rows = dict(zip(self.learner.acc_rows, acc))
        member_diverged = (rows["nonfinite"] > 0) | ~(np.abs(rows["loss"]) <= tc.divergence_threshold)
        self.diverged = bool(member_diverged.any())
        t1 = time.perf_counter()
        val_stats, val_returns, val_positions = self.evaluator.evaluate(EVAL_SEGMENT)
        evals = {"val": {k: np.where(member_diverged, np.nan, v) for k, v in val_stats.items()}}
        self.window.keep(self.epoch, val_returns, val_positions, member_diverged)
        evals["test"] = {k: np.full(self.learner.P, np.nan) for k in EVAL_STATS}
        if self.epoch >= tc.epochs and not self.diverged:
            evals["test"] = self.evaluator.evaluate("test")[0]
        eval_s = time.perf_counter() - t1
        measures = EpochMeasures(
            self.epoch, self.env_steps, self.updates, self.diverged, rows, evals, member_diverged,
            noisy_sigma=float(self.learner.online.noisy_sigma().mean()),
            sps=float(tc.iterations_per_epoch * self.steps_per_iteration / max(train_s, 1e-9)), train_s=train_s, eval_s=eval_s,
        )  # fmt: skip
        gems = self.learner.member_gems
        result = epoch_result(self.cfg, self.ids, gems.gems, measures, self.history, self.member_history)
        self.history.append(result.metrics)
        self.member_history.extend(result.members)
        self.log(health_line(result.metrics, gems, self.ids))
        return result

    def _meta(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "env_steps": self.env_steps, "updates": self.updates, "diverged": self.diverged,
            "prefilled": self._prefilled, "history": self.history, "member_history": self.member_history,
            "config": self.cfg.to_dict(), EVAL_WINDOW_KEY: self.window.meta(), "layer_kernel": self.learner.products.name}

    def checkpoint_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(live state tensors, fresh host metadata); refused while an epoch is queued."""
        if self._queued is not None:
            raise RuntimeError(f"a checkpoint of epoch {self.epoch} asked after epoch {self.epoch + 1} was queued")
        return self.learner.state_tensors(), self._meta()

    def save_checkpoint(self, path: str | Path) -> None:
        ckpt.save(path, *self.checkpoint_payload())

    def load_checkpoint(self, path: str | Path) -> None:
        if self._queued is not None:
            raise RuntimeError("a checkpoint loaded while an epoch is queued")
        state, meta, version = ckpt.read(path)
        _check_compatible(path, meta.get("config", {}), self.cfg.to_dict())
        written, here = meta.get("layer_kernel", self.learner.products.name), self.learner.products.name
        if written != here:  # the two paths lay the flat parameters out differently
            raise CheckpointError(f"{path}: written with model.layer_kernel={written}, this run's is {here} "
                                  f"(auto: triton on CUDA, torch on the CPU): set model.layer_kernel={written} to resume it")
        window = self.window.saved(path, meta.get(EVAL_WINDOW_KEY))
        ckpt.restore_into(path, self.learner.state_tensors(), self.learner.from_checkpoint(state, version))
        self.runner.invalidate()
        self.epoch, self.env_steps, self.updates = int(meta["epoch"]), int(meta["env_steps"]), int(meta["updates"])
        self.diverged, self._prefilled = bool(meta["diverged"]), bool(meta["prefilled"])
        self.history, self.member_history = list(meta["history"]), list(meta["member_history"])
        self.window.kept = window


class EpochClock:
    """An epoch's training seconds: two CUDA events on the stream (the device's), else the host's clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = self._t1 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self._end.record()
        else:
            self._t1 = time.perf_counter()

    def seconds(self) -> float:
        if self.cuda:
            self._end.synchronize()
            return self._start.elapsed_time(self._end) / 1000.0
        return self._t1 - self._t0


def _check_compatible(path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Every config key equal but RESUMABLE_CHANGES (a key the checkpoint lacks: at its default)."""
    a, b = flatten(saved), flatten(current)
    defaults = flatten(Config().to_dict())
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE_CHANGES:
            continue
        if key not in a and key in defaults and b.get(key) == defaults[key]:
            continue
        if a.get(key) != b.get(key):
            raise CheckpointError(f"{path}: written with {key}={a.get(key)!r}, this run has {key}={b.get(key)!r}")
