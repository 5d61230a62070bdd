"""A quiet sweep console: tune-gems' own lines, HEALTH_DIAG and Tune's status table, without
Ray's per-checkpoint chatter (`tune-gems sweep --verbose` brings it back).

Where the noise comes from (Ray 2.x):

- "Checkpoint successfully created at: ..." is an INFO line of the storage logger, in the trial's
  worker process (`StorageContext.persist_current_checkpoint`, called by every `tune.report`
  with a checkpoint); Ray forwards worker output to the driver's console. Quieted in the
  trial (`quiet_trial`), so it never leaves the worker.
- "Experiment state snapshotting has been triggered multiple times ..." and "Saving the
  experiment state ... has already taken ..." are WARNING lines of Tune's experiment-state
  logger in the driver (thresholds TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S
  and TUNE_WARN_SLOW_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S). Quieted in the driver
  (`quiet_driver`) for the length of the sweep; errors still show.
- "Failed to fetch metrics for 1 trial(s): ... FileNotFoundError('Could not fetch metrics ...:
  both result.json and progress.csv were not found ...')" is a WARNING of Tune's
  experiment-analysis logger in the driver, for a trial that never reported: after a driver
  SIGKILL and `--resume`, the trial Tune had started but that wrote nothing. The tables mark
  such a trial themselves (tune_gems.sweep.results); quieted in the driver like the above.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

DEDUP_ENV = "RAY_DEDUP_LOGS"
"""Ray's switch for merging alike worker lines across the cluster ("[repeated 2x ...]")."""


def keep_every_line() -> None:
    """Before Ray is imported: no merging of alike worker lines (a user's own setting wins).
    The HEALTH_DIAG lines do not depend on it (they travel in the results,
    tune_gems.sweep.progress); any other line a trial prints is shown as printed."""
    os.environ.setdefault(DEDUP_ENV, "0")


TRIAL_LOGGERS = ("ray.train._internal.storage", "ray.train.v2._internal.execution.storage")
"""Loggers of the "Checkpoint successfully created" line (Tune's function trainable; Train v2)."""
DRIVER_LOGGERS = ("ray.tune.execution.experiment_state", "ray.tune.analysis.experiment_analysis")
"""Loggers of the experiment-snapshot warnings and of the missing-results warning of a trial
that never reported."""
TRIAL_QUIET_LEVEL = logging.WARNING
DRIVER_QUIET_LEVEL = logging.ERROR


def quiet_trial(verbose: bool) -> None:
    """In a trial's worker process (it runs the sweep's trials one after another, all with the
    sweep's one `verbose`): keep the storage logger's INFO lines there unless verbose."""
    if verbose:
        return
    for name in TRIAL_LOGGERS:
        logging.getLogger(name).setLevel(TRIAL_QUIET_LEVEL)


@contextmanager
def quiet_driver(verbose: bool) -> Iterator[None]:
    """In the driver, while the sweep runs: the experiment-snapshot warnings only when verbose;
    the loggers' levels are restored afterwards (the driver may be a library caller's process)."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in DRIVER_LOGGERS]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(DRIVER_QUIET_LEVEL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, before):
            lg.setLevel(level)
