"""Faults lose nothing: a killed trial process, a killed sweep driver, a diverging trial.

Every sweep here runs through the real CLI (`python -m tune_gems sweep`) as a separate process
joined to this module's Ray instance through RAY_ADDRESS, exactly as a user's sweep joins a
cluster; the test injects the fault from outside (SIGKILL of the process Tune reported, or of
the whole driver) once the files the sweep writes show it is mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

from cluster_fixtures import (
    assert_trial_matches_uninterrupted,
    finish,
    kill_group,
    result_rows,
    start_cli,
    tail,
    wait_for,
)
from sweep_fixtures import SMOKE, TINY_SWEEP, ray_address  # noqa: F401 (fixture)
from tune_gems.sweep.search import JOURNAL_FILE, journal_storage

pytestmark = pytest.mark.slow

SWEEP_TIMEOUT = 900  # a bound on polls (a loaded 2-core CI machine runs these sweeps 3-4x slower), never a sleep


def _sweep(tmp_path: Path, name: str, *overrides: str, resume: bool = False) -> list[str]:
    return ["sweep", str(SMOKE), "--storage", str(tmp_path), "--name", name, *(["--resume"] if resume else []), *TINY_SWEEP, *overrides]


# -- a trial process killed mid-run ------------------------------------------------------------


def test_killed_trial_resumes_from_its_checkpoint_and_ends_bit_identical(tmp_path, ray_address):
    """SIGKILL the trial's worker process (the `pid` Tune reports) after its first epoch: Tune
    retries it (failure.max_failures) from its last checkpoint, and every epoch's metrics and
    every member's row equal those of an uninterrupted run of the same config (except sps)."""
    exp, log = tmp_path / "kill", tmp_path / "kill.log"
    # the margin is in epochs, not seconds: the storage's result.json shows an epoch once the next
    # one's checkpoint is synced, so the kill lands after epoch 2 at 40, 60 or 150 iterations an
    # epoch (measured), and 5 epochs leave 3 to retry
    epochs = 5
    p = start_cli(
        _sweep(tmp_path, "kill", "num_samples=1", f"config.trainer.epochs={epochs}", "config.trainer.iterations_per_epoch=60",
               "config.trainer.checkpoint_every=1", "failure.max_failures=2"),
        log, env={"RAY_ADDRESS": ray_address},
    )
    try:
        first = wait_for(lambda: [r for r in result_rows(exp) if r["epoch"] >= 1], 480, "the trial's first epoch")[0]
        assert not first["done"], "the trial finished before it could be killed; make its epochs longer"
        os.kill(first["pid"], signal.SIGKILL)  # the trial's Ray worker process, by the id Tune reported
        assert finish(p, log, SWEEP_TIMEOUT) == 0, tail(log)
    finally:
        kill_group(p)

    rows = result_rows(exp)
    pids = list(dict.fromkeys(r["pid"] for r in rows))
    assert len(pids) == 2 and pids[0] == first["pid"], f"expected one retry in a new process, got pids {pids}"
    before = [r["epoch"] for r in rows if r["pid"] == pids[0]]
    after = [r["epoch"] for r in rows if r["pid"] == pids[1]]
    assert after[0] > 1, f"the retry started from scratch (epochs {after}), not from its checkpoint"
    assert after[0] <= max(before) + 1 and after[-1] == epochs, (before, after)

    trials = pd.read_parquet(exp / "trials.parquet")
    history = pd.read_parquet(exp / "history.parquet")
    assert len(trials) == 1 and trials.loc[0, "status"] == "TERMINATED" and trials.loc[0, "epochs_done"] == epochs
    assert history["epoch"].tolist() == list(range(1, epochs + 1))  # re-run epochs appear once
    assert_trial_matches_uninterrupted(exp, trials.loc[0, "trial_id"])


# -- the sweep driver killed mid-run, then --resume --------------------------------------------


def _journal(exp: Path) -> list[optuna.trial.TrialState]:
    """The state of each trial in the Optuna journal, by replaying its lines (read-only; a line
    being written is skipped)."""
    states: dict[int, optuna.trial.TrialState] = {}
    path = exp / JOURNAL_FILE
    if not path.is_file():
        return []
    for line in path.read_text().splitlines():
        try:
            op = json.loads(line)
        except json.JSONDecodeError:
            continue
        if op["op_code"] == 4:  # CREATE_TRIAL
            states[len(states)] = optuna.trial.TrialState.RUNNING
        elif op["op_code"] == 6:  # SET_TRIAL_STATE_VALUES
            states[op["trial_id"]] = optuna.trial.TrialState(op["state"])
    return list(states.values())


def _snapshot(exp: Path) -> list[str] | None:
    """Trial statuses in Tune's persisted experiment state (what Tuner.restore will read)."""
    files = sorted(exp.glob("experiment_state-*.json"))
    if not files:
        return None
    try:
        data = json.loads(files[-1].read_text())
        return [json.loads(t[0])["status"] for t in data["trial_data"]]
    except (json.JSONDecodeError, KeyError, IndexError, FileNotFoundError):
        return None  # being written


def _settled(exp: Path) -> bool:
    """Tune's state files (experiment state, search generator, searcher) are copied to storage
    together after each snapshot: true when they were written together and none just now (a
    snapshot frozen halfway through its copy would be torn)."""
    try:
        times = [max(f.stat().st_mtime for f in exp.glob(pattern)) for pattern in STATE_FILES]
    except (ValueError, FileNotFoundError):
        return False
    return max(times) - min(times) < 1.0 and time.time() - max(times) > 0.2


STATE_FILES = ("experiment_state-*.json", "search_gen_state-*.json", "searcher-state-*.pkl")


def _kill_point(moment: str, n: int):
    def ready(exp: Path) -> bool:
        snap, journal = _snapshot(exp), _journal(exp)
        if not snap or not journal:
            return False
        done_tune = snap.count("TERMINATED")
        done_optuna = sum(s == optuna.trial.TrialState.COMPLETE for s in journal)
        if moment == "state_current":  # Tune's snapshot agrees with the study; two trials or more left for the next kill
            return (
                len(snap) == len(journal) and 1 <= done_tune == done_optuna <= n - 2 and "RUNNING" in snap and _settled(exp)
            )
        # journal_ahead: a trial finished (told to Optuna) after Tune's last snapshot
        return done_optuna > done_tune

    return ready


def _kill_driver_when(p, exp: Path, ready, timeout: float) -> None:
    """Freeze the driver (SIGSTOP), confirm the kill point on the files it wrote while nothing
    moves, then SIGKILL it; otherwise let it go on (SIGCONT) and look again."""

    def frozen_at_point() -> bool:
        assert p.poll() is None, "the sweep finished before the kill point was reached"
        if not ready(exp):
            return False
        os.killpg(p.pid, signal.SIGSTOP)
        if ready(exp):
            return True
        os.killpg(p.pid, signal.SIGCONT)
        return False

    wait_for(frozen_at_point, timeout, "the kill point", interval=0.02)
    kill_group(p)  # SIGKILL: no handler runs, no state is flushed


def test_a_driver_killed_twice_resumes_with_every_trial_once_in_results_and_study(tmp_path, ray_address):
    """Kill the sweep driver (SIGKILL) while trials run, `tune-gems sweep ... --resume`, kill the
    resumed driver, resume again: the sweep completes, every trial appears exactly once in the
    tables with every epoch once, and the Optuna study holds exactly those trials, finished
    (none left RUNNING), each with what an uninterrupted driver would have asked.

    The first kill (state_current): Tune's persisted experiment state agrees with the study.
    The second, of the resumed driver (journal_ahead): a trial finished in the study but Tune's
    last snapshot does not have it (the snapshot is throttled to >= 10 s or every num_to_keep
    checkpoints). Both kill points on one sweep: the second resume starts from the first's
    state, as a user's twice-interrupted sweep does; four trials leave at least two, running
    side by side, after the first kill, so one can finish while the other runs."""
    n, epochs = 4, 6  # long enough that Tune snapshots its state while a trial runs beside another
    exp = tmp_path / "drv"
    # a checkpoint every epoch: Tune snapshots its experiment state on checkpoints, and the kill
    # points need snapshots while trials still run
    args = _sweep(tmp_path, "drv", f"num_samples={n}", f"config.trainer.epochs={epochs}", "config.trainer.iterations_per_epoch=60",
                  "config.trainer.checkpoint_every=1")
    env = {"RAY_ADDRESS": ray_address}
    for moment, run, log in (("state_current", args, "run.log"), ("journal_ahead", [*args, "--resume"], "resume1.log")):
        p = start_cli(run, tmp_path / log, env)
        try:
            _kill_driver_when(p, exp, _kill_point(moment, n), timeout=SWEEP_TIMEOUT)
        finally:
            kill_group(p)
        assert not (exp / "trials.parquet").exists(), moment  # it really died mid-run

    log2 = tmp_path / "resume2.log"
    p = start_cli([*args, "--resume"], log2, env)
    try:
        assert finish(p, log2, SWEEP_TIMEOUT) == 0, tail(log2)
    finally:
        kill_group(p)

    trials = pd.read_parquet(exp / "trials.parquet")
    history = pd.read_parquet(exp / "history.parquet")
    members = pd.read_parquet(exp / "members.parquet")
    assert len(trials) == n and trials["trial_id"].is_unique, trials[["trial_id", "status"]]
    assert set(trials["status"]) == {"TERMINATED"} and set(trials["epochs_done"]) == {epochs}
    assert history.groupby("trial_id")["epoch"].apply(list).map(lambda e: e == list(range(1, epochs + 1))).all()
    arms_per_trial = pd.read_parquet(exp / "arms.parquet").groupby("trial_id").size()  # the spec's design
    assert not members.duplicated(["trial_id", "epoch", "member"]).any() and len(members) == epochs * 2 * int(arms_per_trial.sum())

    study = optuna.load_study(study_name="drv", storage=journal_storage(exp / JOURNAL_FILE))
    states = [t.state for t in study.trials]
    # issue 32: a trial Optuna handed out that Tune never ran (asked after Tune's last snapshot)
    # is adopted by the resumed driver and run with its own number, seed and parameters: the
    # study holds trials 0..n-1, all finished, none asked twice, none left FAIL or RUNNING
    assert states == [optuna.trial.TrialState.COMPLETE] * n, f"study trial states {states}"
    by_seed = trials.set_index("seed")  # per_trial seeds: seed = base seed + number
    assert sorted(by_seed.index) == list(range(n))
    uninterrupted = _asked_uninterrupted(args, tmp_path / "ref-journal.log", n)
    for t in study.trials:
        row = by_seed.loc[t.number]
        assert t.value == pytest.approx(row["objective"])
        assert t.params == {k: v for k, v in uninterrupted[t.number].items() if k not in ("seed", "first_seed_index")}  # as uninterrupted
        for key, value in t.params.items():
            assert row[key] == pytest.approx(value) if isinstance(value, float) else row[key] == value


def _asked_uninterrupted(args: list[str], journal: Path, n: int) -> list[dict]:
    """What an uninterrupted driver's searcher asks for trials 0..n-1 of the sweep `args` (the
    first trials are Optuna's random start-up ones: they do not depend on the results)."""
    from tune_gems.sweep.search import make_searcher
    from tune_gems.sweep.spec_load import load_spec

    spec = load_spec(SMOKE, [a for a in args if "=" in a and not a.startswith("-")])
    searcher = make_searcher(spec, "ref", journal)
    return [searcher.suggest(f"t{i}") for i in range(n)]


# -- divergence --------------------------------------------------------------------------------


def test_a_diverging_trial_is_reported_diverged_and_the_sweep_goes_on(tmp_path, ray_address):
    """trainer.divergence_threshold=1e-6 makes the first epoch's loss count as divergence (a
    learning rate large enough for a real NaN is refused by the config's bounds now). Optuna
    (sampler_seed 0) gives trial 0 that threshold and trial 1 the default; with one trial at a
    time, trial 1 only starts after trial 0 diverged: the sweep exits 0, trial 0 is `diverged`
    (status TERMINATED, NaN objective, FAIL in the study) and trial 1 trains to the end."""
    exp, log = tmp_path / "div", tmp_path / "div.log"
    epochs = 3
    p = start_cli(
        _sweep(
            tmp_path, "div", "num_samples=2", "max_concurrent_trials=1", "sampler_seed=0", f"config.trainer.epochs={epochs}",
            "search.gems={}", "search.params={trainer.divergence_threshold: {type: categorical, choices: [1000000.0, 1.0e-06]}}",
            "design=none", "objective.metric=val_sharpe_mean",  # one arm per trial: the trial is the config
        ),
        log, env={"RAY_ADDRESS": ray_address},
    )
    try:
        assert finish(p, log, SWEEP_TIMEOUT) == 0, tail(log)
    finally:
        kill_group(p)

    trials = pd.read_parquet(exp / "trials.parquet").set_index("seed")  # seed = trial number
    history = pd.read_parquet(exp / "history.parquet")
    members = pd.read_parquet(exp / "members.parquet")
    thresholds = trials["trainer.divergence_threshold"]
    assert thresholds.loc[0] == 1e-6 and thresholds.loc[1] == 1e6, thresholds
    bad, good = trials.loc[0], trials.loc[1]
    assert bad["status"] == "TERMINATED" and bad["error"] is None  # diverged is an outcome, not a crash
    assert bool(bad["diverged"]) and bad["epochs_done"] == 1 and bad["loss"] > 1e-6 and pd.isna(bad["objective"])
    bad_hist = history[history["trial_id"] == bad["trial_id"]]
    assert bad_hist["diverged"].tolist() == [True] and bad_hist["test_sharpe_mean"].isna().all()
    assert members[members["trial_id"] == bad["trial_id"]]["diverged"].all()
    assert good["status"] == "TERMINATED" and not bool(good["diverged"]) and good["epochs_done"] == epochs
    assert history[history["trial_id"] == good["trial_id"]]["loss"].notna().all()
    # the diverged trial ran (and ended) before the healthy one started
    rows = result_rows(exp)
    assert max(r["timestamp"] for r in rows if r["trial_id"] == bad["trial_id"]) <= min(
        r["timestamp"] for r in rows if r["trial_id"] == good["trial_id"]
    )

    study = optuna.load_study(study_name="div", storage=journal_storage(exp / JOURNAL_FILE))
    states = {t.number: t.state for t in study.trials}
    assert states == {0: optuna.trial.TrialState.FAIL, 1: optuna.trial.TrialState.COMPLETE}
