"""A sweep's own Ray and records under stress, through the real CLI with NO RAY_ADDRESS (so the
sweep starts its own Ray, as on a laptop):

- while it runs, every process of that Ray listens on loopback only;
- Ctrl-C (SIGINT to the process group, as a terminal sends it) exits 130, the tables mark the
  unfinished trials UNFINISHED, their Optuna trials stay RUNNING (Tune still owns them), and
  `--resume` with no overrides finishes them;
- a SIGKILLed driver leaves no Ray process behind (the watchdog ends them), and with a URI
  storage (file://) the Optuna journal copied beside the results lets `--resume` finish the
  study even though the driver's local journal mirror is gone with its machine.

The resumes join the test process's Ray (RAY_ADDRESS): what they are tested on is the records the
interrupted sweeps left, and a Ray start costs seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest

from cluster_fixtures import finish, kill_group, tail, wait_for
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, ray_address  # noqa: F401 (fixture)
from tune_gems.contracts.outputs import MARKER_FILE
from tune_gems.sweep.search import JOURNAL_FILE, journal_storage

pytestmark = pytest.mark.slow

SWEEP_TIMEOUT = 900  # a bound on polls (a loaded 2-core CI machine runs these sweeps 3-4x slower), never a sleep
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _start(args: list[str], log: Path, cache: Path, **extra_env: str) -> subprocess.Popen:
    """`python -m tune_gems ARGS` in its own session, without RAY_ADDRESS unless `extra_env` sets it."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(extra_env, TUNE_GEMS_CACHE=str(cache), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "tune_gems", *args], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _psutil():
    import ray  # noqa: F401 - Ray ships psutil in its thirdparty_files and puts them on sys.path
    import psutil

    return psutil


def _descendants(pid: int) -> list:
    psutil = _psutil()
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _listening(procs: list) -> list[tuple[int, str, str]]:
    """(pid, name, address) of every listening TCP socket of these processes."""
    psutil = _psutil()
    pids = {p.pid: p for p in procs}
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                name = pids[c.pid].name()
            except psutil.Error:
                name = "?"
            out.append((c.pid, name, c.laddr.ip))
    return out


def _alive(procs: list) -> list:
    psutil = _psutil()
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _ray_up_and_loopback_only(pid: int) -> list:
    """Once the sweep's Ray runs: its processes, after checking that none listens beyond loopback."""
    procs = wait_for(lambda: [p for p in _descendants(pid) if "raylet" in _name(p)] and _descendants(pid), 120, "the sweep's Ray")
    sockets = wait_for(lambda: _listening(_descendants(pid)), 60, "Ray's listening sockets")
    exposed = [s for s in sockets if s[2] not in LOOPBACK]
    assert not exposed, f"listening beyond loopback: {exposed}"
    return _descendants(pid) or procs


def _name(p) -> str:
    try:
        return p.name()
    except Exception:  # noqa: BLE001 - gone meanwhile
        return ""


def _study_states(journal: Path, name: str) -> list[str]:
    study = optuna.load_study(study_name=name, storage=journal_storage(journal))
    return [t.state.name for t in study.trials]


def _complete_in_journal(path: Path) -> int:
    """COMPLETE trials in a journal file, by replaying its lines (read-only)."""
    if not path.is_file():
        return 0
    done = 0
    for line in path.read_text().splitlines():
        try:
            op = json.loads(line)
        except json.JSONDecodeError:
            continue
        if op.get("op_code") == 6 and op.get("state") == optuna.trial.TrialState.COMPLETE.value:
            done += 1
    return done


def _interrupt_when(p: subprocess.Popen, ready) -> None:
    """Ctrl-C (SIGINT to the process group) at the first moment `ready()` holds, polling for it:
    the group is frozen (SIGSTOP) while the state is confirmed, so nothing moves between the look
    and the signal; otherwise it goes on (SIGCONT) and the poll continues."""

    def frozen_and_ready() -> bool:
        assert p.poll() is None, "the sweep ended before the state to interrupt was reached"
        if not ready():
            return False
        os.killpg(p.pid, signal.SIGSTOP)
        if ready():
            os.killpg(p.pid, signal.SIGINT)  # delivered when the group continues
            os.killpg(p.pid, signal.SIGCONT)
            return True
        os.killpg(p.pid, signal.SIGCONT)
        return False

    wait_for(frozen_and_ready, SWEEP_TIMEOUT, "a first epoch on the console with no trial finished", interval=0.02)


def test_ctrl_c_exits_130_marks_unfinished_trials_and_resume_finishes_them(tmp_path, ray_address):
    # a second epoch long enough that Ctrl-C, sent (into the frozen group) once a first epoch is on
    # the console, finds a trial still running; --resume trains them from the start (no checkpoint
    # yet), so every epoch is paid twice
    n, epochs, iterations = 2, 2, 80
    exp = tmp_path / "ctrl"
    args = ["sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "ctrl", *TINY_SWEEP, f"num_samples={n}",
            f"config.trainer.epochs={epochs}", f"config.trainer.iterations_per_epoch={iterations}"]
    log = tmp_path / "run.log"
    p = _start(args, log, tmp_path / "cache")
    try:
        _ray_up_and_loopback_only(p.pid)
        # the console shows each epoch as it ends (the trial folders under the storage are only
        # synced from Ray's staging folder now and then, so they can lag the whole run)
        _interrupt_when(p, lambda: "HEALTH_DIAG epoch=1" in (text := log.read_text()) and "finished:" not in text)
        assert finish(p, log, SWEEP_TIMEOUT) == 130, tail(log)
    finally:
        kill_group(p)
    shown = log.read_text()
    assert shown.count("continue with:") == 1 and "tune-gems: interrupted; continue with:" in shown  # once, not Tune's too
    for notice in ("Started a local Ray instance", "A new study created", "Stop signal received", "Tuner.restore"):
        assert notice not in shown, notice  # Ray's, Optuna's and Tune's notices: only with --verbose
    trials = pd.read_parquet(exp / "trials.parquet")
    assert "UNFINISHED" in set(trials["status"]), trials[["trial_id", "status", "epochs_done"]]
    assert set(trials["status"]) <= {"UNFINISHED", "TERMINATED"}
    assert "RUNNING" in _study_states(exp / JOURNAL_FILE, "ctrl")  # left to --resume, not marked FAIL
    assert "FAIL" not in _study_states(exp / JOURNAL_FILE, "ctrl")

    # resumed under another thread count: the record gains it (issue 39 item 3); on the test process's Ray,
    # whose trials keep one thread (a sweep that starts its own Ray hands a set OMP_NUM_THREADS to its trials)
    log2 = tmp_path / "resume.log"
    p = _start(["sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "ctrl", "--resume"], log2, tmp_path / "cache",
               OMP_NUM_THREADS="2", RAY_ADDRESS=ray_address)
    try:
        assert finish(p, log2, SWEEP_TIMEOUT) == 0, tail(log2)
    finally:
        kill_group(p)
    resumed = log2.read_text()
    assert "resuming with the stored spec" in resumed
    # where each unfinished trial restarts, and why (a checkpoint every 300 s and at the end: none yet)
    assert f"tune-gems sweep: resuming ctrl: 0 finished trial(s) kept, {n} continued: " in resumed
    assert "from the start (no checkpoint yet)" in resumed and "a trial without a checkpoint trains again" in resumed
    assert "Warning" not in resumed and "Restored on" not in resumed, resumed[-3000:]  # no library warning or notice leaks
    trials = pd.read_parquet(exp / "trials.parquet")
    assert len(trials) == n and set(trials["status"]) == {"TERMINATED"} and set(trials["epochs_done"]) == {epochs}
    assert set(trials["trainer.iterations_per_epoch"]) == {iterations}  # the stored spec ran, not smoke.yaml's
    assert _study_states(exp / JOURNAL_FILE, "ctrl") == ["COMPLETE"] * n
    marker = json.loads((exp / MARKER_FILE).read_text())
    assert [e["OMP_NUM_THREADS"] for e in marker["cpu_environment"]][-2:] == [os.environ["OMP_NUM_THREADS"], "2"]


def test_killed_driver_leaves_no_ray_behind_and_resumes_with_the_study_copied_to_its_uri(tmp_path, ray_address):
    n = 2
    store = tmp_path / "store"
    exp = store / "uri"
    uri = f"file://{store}"
    args = ["sweep", str(SMOKE), "--storage", uri, "--name", "uri", *TINY_SWEEP, f"num_samples={n}",
            "max_concurrent_trials=1", "config.trainer.epochs=2", "config.trainer.iterations_per_epoch=40"]
    log = tmp_path / "run.log"
    p = _start(args, log, tmp_path / "cache1")
    try:
        procs = _ray_up_and_loopback_only(p.pid)
        # the journal beside the results gains each finished trial while the sweep runs
        wait_for(lambda: _complete_in_journal(exp / JOURNAL_FILE) >= 1 or p.poll() is not None, SWEEP_TIMEOUT, "a copied COMPLETE trial")
        assert p.poll() is None, f"the sweep ended before it could be killed:\n{tail(log)}"
        procs = _descendants(p.pid) + procs
        os.kill(p.pid, signal.SIGKILL)  # the driver alone: Ray's processes are not signalled
        p.wait(timeout=60)
    finally:
        kill_group(p)
    assert not (exp / "trials.parquet").exists()  # it really died mid-run
    wait_for(lambda: not _alive(procs), 60, "every process of the killed driver's Ray to end")
    shutil.rmtree(tmp_path / "cache1")  # the driver's machine, and its local journal mirror, are gone

    log2 = tmp_path / "resume.log"
    p = _start(["sweep", str(SMOKE), "--storage", uri, "--name", "uri", "--resume"], log2, tmp_path / "cache2", RAY_ADDRESS=ray_address)
    try:
        assert finish(p, log2, SWEEP_TIMEOUT) == 0, tail(log2)
    finally:
        kill_group(p)
    trials = pd.read_parquet(exp / "trials.parquet")
    assert len(trials) == n and set(trials["status"]) == {"TERMINATED"}
    study = optuna.load_study(study_name="uri", storage=journal_storage(exp / JOURNAL_FILE))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == n and "RUNNING" not in [t.state.name for t in study.trials]
    by_seed = trials.set_index("seed")
    for t in complete:
        assert t.value == pytest.approx(by_seed.loc[t.number, "objective"])
