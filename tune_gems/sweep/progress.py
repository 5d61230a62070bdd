"""The sweep's own console reporter: every HEALTH_DIAG line with its trial id and a line per finished
trial. Ray's de-duplication drops or merges alike lines, so each trial sends HEALTH_DIAG inside its
`tune.report` (HEALTH_KEY) and this driver callback prints it."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ray.tune import Callback
from ray.tune.logger import TBXLoggerCallback
from ray.tune.result import AUTO_RESULT_KEYS

from tune_gems.sweep.console import objective_tie
from tune_gems.trainer.health import without_arm_detail
from tune_gems.trainer.tensorboard import EpochEvents

HEALTH_KEY = "health_diag"
"""The result key that carries a trial's HEALTH_DIAG line of the epoch to the driver."""
FINISHED = ("TERMINATED", "ERROR")
RAY_QUIET_VERBOSITY = 0
"""Tune's verbosity without `--verbose`: silent (this reporter prints instead)."""


def ray_verbosity(verbose: bool) -> int | None:
    """Tune's RunConfig(verbose=...): silent by default, Tune's default reporter when verbose."""
    return None if verbose else RAY_QUIET_VERBOSITY


def _print(line: str) -> None:
    print(line, flush=True)  # flushed at once: the driver may be a job whose stdout is a pipe


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def eta_seconds(durations: list[float], running: list[float], pending: int) -> float:
    """Seconds until the last trial ends, each lasting the finished ones' mean and a pending trial
    starting in the first slot to free. Not "time per finished trial x trials left": side by side, the
    first to finish has its neighbours almost done (that estimate was 50% high)."""
    if not durations:
        return math.nan
    mean = sum(durations) / len(durations)
    slots = sorted([max(0.0, mean - ran) for ran in running] + [0.0])
    for _ in range(pending):
        slots[0] += mean
        slots.sort()
    return max(slots)


class SweepConsole(Callback):
    """Prints `[<trial id>] HEALTH_DIAG ...` per result and per finished trial its objective, the best
    so far (a tie reads as the tie: `console.objective_tie`), elapsed and ETA (`eta_seconds`)."""

    def __init__(self, total: int, metric: str, mode: str, verbose: bool = False,
                 clock: Callable[[], float] = time.monotonic, out: Callable[[str], None] | None = None) -> None:
        self.total, self.metric, self.mode, self.verbose = total, metric, mode, verbose
        self.clock = clock
        self.out = out or _print
        self.start = clock()
        self.finished_here = 0
        self.best: tuple[float, str] | None = None
        self.started: dict[str, float] = {}
        self.durations: list[float] = []
        self.scores: list[float] = []  # the finished trials' objectives (a tie of all: no signal)

    def setup(self, **info: Any) -> None:
        self.start = self.clock()

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self.started[trial.trial_id] = self.clock()

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info: Any) -> None:
        line = result.get(HEALTH_KEY)
        if isinstance(line, str):
            self.out(f"[{trial.trial_id}] {line if self.verbose else without_arm_detail(line)}")

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._finished(trials, trial, "TERMINATED")

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._finished(trials, trial, "ERROR")

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best[0] if self.mode == "max" else value < self.best[0]

    def _finished(self, trials: list, trial, status: str) -> None:
        self.finished_here += 1
        done = sum(1 for t in trials if t.status in FINISHED or t is trial)
        value = (trial.last_result or {}).get("objective", math.nan)
        value = float(value) if isinstance(value, (int, float)) else math.nan
        if math.isfinite(value) and self._better(value):
            self.best = (value, trial.trial_id)
        self.scores.append(value)
        epochs = (trial.last_result or {}).get("epoch", "?")
        best = f"{self.best[0]:.3f} ({self.best[1]})" if self.best else "-"
        if objective_tie(self.scores) is not None:  # said while it runs, not only in the closing table
            best = f"{self.best[0]:.3f}, a tie of all {sum(map(math.isfinite, self.scores))} scored trials (no signal yet)"
        now = self.clock()
        elapsed = now - self.start
        self.durations.append(now - self.started.pop(trial.trial_id, self.start))
        left = max(0, self.total - done)
        running = [now - self.started.get(t.trial_id, self.start) for t in trials
                   if t is not trial and t.status == "RUNNING"]
        seconds = eta_seconds(self.durations, running, max(0, left - len(running)))
        eta = format_seconds(seconds) if left and math.isfinite(seconds) else "0s"
        self.out(
            f"tune-gems sweep: trial {done}/{self.total} finished: {trial.trial_id} {status} after {epochs} epoch(s), "
            f"objective {self.metric}={value:.3f} | best {best} | {format_seconds(elapsed)} elapsed, ETA {eta}"
        )


NOT_METRICS = frozenset(AUTO_RESULT_KEYS) | {"done", "trial_id", "seed", "time_this_iter_s", "timesteps_this_iter"}
"""Result keys that are Tune's bookkeeping or a trial's identity, not an epoch's numbers."""


class TrialEvents(TBXLoggerCallback):
    """TensorBoard event files of the trials with a `train` run's tags, one run per trial in
    `<experiment>/tensorboard/<trial id>`; it takes the place of Tune's default TBXLoggerCallback."""

    def __init__(self) -> None:
        super().__init__()  # checks that tensorboardX is there, as Tune's does
        self._events: dict[str, EpochEvents] = {}

    def _for(self, trial) -> EpochEvents:
        if trial.trial_id not in self._events:
            from pathlib import Path

            self._events[trial.trial_id] = EpochEvents(Path(trial.local_experiment_path), str(trial.trial_id))
        return self._events[trial.trial_id]

    def log_trial_start(self, trial) -> None:
        self._for(trial)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        epoch = result.get("epoch")
        if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
            return
        self._for(trial).write({k: v for k, v in result.items() if k not in NOT_METRICS}, int(epoch))

    def log_trial_end(self, trial, failed: bool = False) -> None:
        events = self._events.pop(trial.trial_id, None)
        if events is not None:
            events.close()
