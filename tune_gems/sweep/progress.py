"""The sweep's own console reporter: every HEALTH_DIAG line, prefixed with its trial id, and a
status line per finished trial (objective, best so far, an ETA), in place of Ray's output.

Why not let Ray forward the trials' stdout: Ray's log de-duplication drops or merges lines that
look alike across trials ("[repeated 2x across cluster]"), prefixes them with a process id
rather than the trial, and its default reporter prints a ~90-line result dump per trial. Here
each trial sends its HEALTH_DIAG line inside its `tune.report` (HEALTH_KEY), and this driver-side
Tune callback prints it: one line per trial and epoch, none lost, none merged. Ray's own
reporter is silenced (`ray_verbosity`) unless `tune-gems sweep --verbose`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ray.tune import Callback

from tune_gems.trainer.health import without_arm_detail

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


def _format_s(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class SweepConsole(Callback):
    """Prints `[<trial id>] HEALTH_DIAG ...` per result (the per-arm part only when verbose) and,
    per finished trial, `trial k/N finished: <id> <status> objective <metric>=<v> | best <v>
    (<id>) | <elapsed> elapsed, ETA <t>`. The ETA is the time per finished trial of this run
    times the trials left (it folds in the concurrency)."""

    def __init__(
        self, total: int, metric: str, mode: str, verbose: bool = False,
        clock: Callable[[], float] = time.monotonic, out: Callable[[str], None] | None = None,
    ) -> None:
        self.total, self.metric, self.mode, self.verbose = total, metric, mode, verbose
        self.clock = clock
        self.out = out or _print
        self.start = clock()
        self.finished_here = 0
        self.best: tuple[float, str] | None = None

    def setup(self, **info: Any) -> None:
        self.start = self.clock()

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
        epochs = (trial.last_result or {}).get("epoch", "?")
        best = f"{self.best[0]:.3f} ({self.best[1]})" if self.best else "-"
        elapsed = self.clock() - self.start
        left = max(0, self.total - done)
        eta = _format_s(elapsed / self.finished_here * left) if left else "0s"
        self.out(
            f"tune-gems sweep: trial {done}/{self.total} finished: {trial.trial_id} {status} after {epochs} epoch(s), "
            f"objective {self.metric}={value:.3f} | best {best} | {_format_s(elapsed)} elapsed, ETA {eta}"
        )
