"""A quiet sweep console: tune-gems' lines and HEALTH_DIAG without Ray's, Optuna's and Tune's chatter (`--verbose`
brings it back), quieted in the trial's worker (`quiet_trial`) and the driver (`quiet_driver`); errors still show."""

from __future__ import annotations

import logging
import math
import os
from contextlib import contextmanager
from typing import Iterator

DEDUP_ENV = "RAY_DEDUP_LOGS"
"""Ray's switch for merging alike worker lines across the cluster ("[repeated 2x ...]")."""


def keep_every_line() -> None:
    """Before Ray is imported: no merging of alike worker lines (a user's own setting wins)."""
    os.environ.setdefault(DEDUP_ENV, "0")


REPORTER_ENV = "RAY_AIR_NEW_OUTPUT"
"""Tune's switch between its newer console reporter (1, the default) and the older one (0)."""


def quiet_reporter(verbose: bool) -> None:
    """Before the sweep, without --verbose: Tune's older reporter, silent at verbosity 0 (the newer one always prints
    boxes and a TensorBoard hint at a folder that vanishes with Ray). A user's own setting wins."""
    if not verbose:
        os.environ.setdefault(REPORTER_ENV, "0")


TRIAL_LOGGERS = ("ray.train._internal.storage", "ray.train.v2._internal.execution.storage", "ray.tune.trainable.trainable")
"""Loggers of the "Checkpoint successfully created" line (Tune's function trainable; Train v2)
and of "Restored on <ip> from checkpoint: ..." (a resumed trial; RESTORE_LOGGERS)."""
DRIVER_LOGGERS = ("ray.tune.execution.experiment_state", "ray.tune.analysis.experiment_analysis",
                  "ray._private.authentication.authentication_token_setup")
"""Loggers of the experiment-snapshot warnings, of the missing-results warning of a trial
that never reported, and of `ray.init`'s token-authentication notice ("Token authentication
is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out": a local instance that
listens on loopback only, tune_gems.sweep.local_ray; the setting itself is left as Ray chose)."""
STARTUP_LOGGERS = ("ray._private.worker", "optuna.storages.journal._storage", "ray.tune.tune")
"""Loggers of the start-up and closing notices, INFO lines that say nothing a sweep's own lines
do not: Ray's "Started a local Ray instance." (or "Connecting to existing Ray cluster at
address: ..."), Optuna's "A new study created in Journal with name: ..." and Tune's "Wrote the
latest version of all result files and experiment state to '...'". Their warnings and errors
still show."""
TRIAL_QUIET_LEVEL = logging.WARNING
DRIVER_QUIET_LEVEL = logging.ERROR
STARTUP_QUIET_LEVEL = logging.WARNING
TUNE_LOGGER = "ray.tune.tune"
TUNE_STOP_NOTICES = ("Stop signal received", "Experiment has been interrupted, but the most recent state was saved")
"""The WARNING lines Tune's logger prints on Ctrl-C: "Stop signal received (e.g. via
SIGINT/Ctrl+C), ending Ray Tune run. ..." and "Experiment has been interrupted, but the most
recent state was saved. Resume experiment with: Tuner.restore(path=..., trainable=...)", a
second resume command, and not the one a tune-gems user runs (the CLI prints that, once)."""
RESTORE_LOGGERS = ("ray.tune.execution.tune_controller", "ray.tune.trainable.trainable")
"""Loggers of `--resume`'s INFO lines "Restoring the run from the latest experiment state file:
..." (driver) and "Restored on <ip> from checkpoint: Checkpoint(...)" (each trial's worker): the
sweep says itself where each trial restarts (tune_gems.sweep.resume.restart_lines)."""


SLOW_NOTICE = "performance bottleneck"
"""In Tune's WARNING on a step over TUNE_WARN_THRESHOLD_S ("The `process_trial_result` operation took
0.83 s, which may be a performance bottleneck."): on a loaded machine every few results, nothing to act on."""
NOTICES = {TUNE_LOGGER: TUNE_STOP_NOTICES, "ray.tune.utils.util": (SLOW_NOTICE,),
           "ray.tune.execution.tune_controller": (SLOW_NOTICE,)}
"""The driver's loggers whose records holding one of these texts are dropped while the sweep runs."""


class _DropNotices(logging.Filter):
    """Drops a logger's records whose message holds one of `texts`; every other passes."""

    def __init__(self, texts: tuple[str, ...]) -> None:
        super().__init__()
        self.texts = texts

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(t in str(record.msg) for t in self.texts)


def quiet_trial(verbose: bool) -> None:
    """In a trial's worker process (it runs the sweep's trials one after another, all with the
    sweep's one `verbose`): keep the storage logger's INFO lines there unless verbose."""
    if verbose:
        return
    for name in TRIAL_LOGGERS:
        logging.getLogger(name).setLevel(TRIAL_QUIET_LEVEL)


@contextmanager
def quiet_driver(verbose: bool) -> Iterator[None]:
    """While the sweep runs, the driver's notices and warnings only when verbose; the loggers are
    restored afterwards (the driver may be a library caller's process)."""
    if verbose:
        yield
        return
    levels = {**dict.fromkeys((*STARTUP_LOGGERS, *RESTORE_LOGGERS), STARTUP_QUIET_LEVEL),
              **dict.fromkeys(DRIVER_LOGGERS, DRIVER_QUIET_LEVEL)}
    loggers = [logging.getLogger(name) for name in levels]
    before = [lg.level for lg in loggers]
    for lg, level in zip(loggers, levels.values()):
        lg.setLevel(level)
    filters = {name: _DropNotices(texts) for name, texts in NOTICES.items()}
    for name, f in filters.items():
        logging.getLogger(name).addFilter(f)
    try:
        yield
    finally:
        for name, f in filters.items():
            logging.getLogger(name).removeFilter(f)
        for lg, level in zip(loggers, before):
            lg.setLevel(level)


SUMMARY_COLUMNS = ("trial_id", "status", "objective", "val_sharpe_mean", "test_sharpe_mean", "epochs_done", "diverged",
                   "config_label")
"""The closing table's columns; the label last, whole (a trial's arms make it long)."""


def closing_table(trials, mode: str = "max") -> str:
    """The sweep's closing table: one row per trial, the best objective first (`mode` max or
    min; trials without an objective last, then by trial id); labels left-aligned and whole."""
    import pandas as pd

    cols = [c for c in SUMMARY_COLUMNS if c in trials.columns]
    t = trials[cols].copy()
    if "objective" in t.columns and len(t):
        value = pd.to_numeric(t["objective"], errors="coerce")
        t = t.assign(_none=value.isna(), _key=(-value if mode == "max" else value).fillna(0.0))
        t = t.sort_values(["_none", "_key", "trial_id"], kind="stable").drop(columns=["_none", "_key"])
    if "config_label" in t.columns and len(t):  # left-aligned: every cell (and the header) padded to one width
        width = max(len("config_label"), int(t["config_label"].astype(str).str.len().max()))
        t = t.rename(columns={"config_label": "config_label".ljust(width)})
        t[t.columns[-1]] = t[t.columns[-1]].astype(str).str.ljust(width)
    text = t.to_string(index=False, na_rep="-", float_format=lambda x: "-" if math.isnan(x) else f"{x:.3f}")
    return "\n".join(line.rstrip() for line in text.splitlines())


def objective_tie(values) -> float | None:
    """The one value every finite objective takes when two or more are exactly equal (a search with no
    signal: `verdict_gain` is exactly 0 when every seed pair ties), else None."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(finite) < 2 or any(v != finite[0] for v in finite):
        return None
    return finite[0]


SCORED = "TERMINATED"
"""The status of a trial that ran all its epochs (trials.parquet)."""
TIED_GAIN_CAUSE = ("for a verdict gain of 0: every seed pair tied, the wired and measured policies traded alike "
                   "(a weight too small to change the policy, or members that never trade)")
"""Why a `verdict_gain*` objective of exactly 0 ties: its pseudo-median over seed pairs is 0 when
no pair differs (tune_gems.stats.metrics)."""


def tie_note(trials, metric: str) -> str | None:
    """The closing table's note when every finished trial scored the same (`objective_tie`), with the
    likely cause; an unfinished trial counts for nothing."""
    import pandas as pd

    if "objective" not in trials.columns:
        return None
    done = trials[trials["status"] == SCORED] if "status" in trials.columns else trials
    values = pd.to_numeric(done["objective"], errors="coerce").tolist()
    tied = objective_tie(values)
    if tied is None:
        return None
    n = sum(1 for v in values if math.isfinite(v))
    cause = f"; {TIED_GAIN_CAUSE}" if tied == 0 and metric.startswith("verdict_gain") else ""
    return (f"no signal: all {n} scored trials have {metric}={tied:.3f}, so the search could not rank them and "
            f"the best trial is a tie{cause}")
