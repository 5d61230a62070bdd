"""What a run prints while it runs: the sweep console's reporter (HEALTH_DIAG per trial and
epoch, a status line per finished trial) and `train`'s iteration-level progress bar. The real
sweep's lines are counted in tests/test_sweep.py (test_smoke_sweep_end_to_end_through_the_cli)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from test_bad_input import TRAIN_TINY
from tune_gems.config.load import load_config
from tune_gems.sweep.progress import HEALTH_KEY, SweepConsole, eta_seconds
from tune_gems.trainer.health import without_arm_detail
from tune_gems.trainer.train_command import run_training

LINE = "HEALTH_DIAG epoch=1 loss=1.0 gems [g6=0.1] gain [sharpe=+0.1] arms [proposal: vs=0.1 g6=0.2 | control: vs=0.3 g6=0.1]"


def test_the_short_line_drops_only_the_per_arm_part():
    assert without_arm_detail(LINE) == "HEALTH_DIAG epoch=1 loss=1.0 gems [g6=0.1] gain [sharpe=+0.1] arms=2"
    plain = "HEALTH_DIAG epoch=1 loss=1.0 gems [g6=0.1]"
    assert without_arm_detail(plain) == plain


def _trial(tid: str, objective: float, status: str = "RUNNING"):
    return SimpleNamespace(trial_id=tid, status=status, last_result={"objective": objective, "epoch": 3})


def test_sweep_console_prefixes_every_line_and_tracks_the_best_and_eta():
    printed: list[str] = []
    now = [0.0]
    console = SweepConsole(total=3, metric="m", mode="max", out=printed.append, clock=lambda: now[0])
    console.setup()
    a, b, c = _trial("a", 0.5), _trial("b", math.nan), _trial("c", 0.2, status="PENDING")
    trials = [a, b, c]
    console.on_trial_start(1, trials, a)
    console.on_trial_start(1, trials, b)  # two at a time: c waits for a slot
    for t in trials:
        console.on_trial_result(1, trials, t, {HEALTH_KEY: LINE})
    console.on_trial_result(1, trials, a, {"no": "line"})  # a result without a line prints nothing
    assert printed == [f"[{t.trial_id}] {without_arm_detail(LINE)}" for t in trials]
    printed.clear()
    now[0] = 10.0
    console.on_trial_complete(1, trials, a)
    a.status = "TERMINATED"
    console.on_trial_start(1, trials, c)  # c takes a's slot
    c.status = "RUNNING"
    now[0] = 20.0
    console.on_trial_error(1, trials, b)
    b.status = "ERROR"
    assert printed[0].startswith("tune-gems sweep: trial 1/3 finished: a TERMINATED after 3 epoch(s), objective m=0.500")
    # a trial takes 10 s; b (running since 0) is about done, c runs next in a's slot: 10 s left, not
    # the 20 s of "time per finished trial x trials left" (issue 31: the first ETA 50% high)
    assert "| best 0.500 (a) | 10s elapsed, ETA 10s" in printed[0]
    # b took 20 s: trials take 15 s; c has run 10 s of them
    assert "trial 2/3 finished: b ERROR" in printed[1] and "m=nan | best 0.500 (a) | 20s elapsed, ETA 5s" in printed[1]
    verbose = SweepConsole(total=1, metric="m", mode="min", verbose=True, out=printed.append)
    verbose.on_trial_result(1, [a], a, {HEALTH_KEY: LINE})
    assert printed[-1] == f"[a] {LINE}"  # the full per-arm part with --verbose


def test_the_eta_fills_the_slots_with_the_pending_trials():
    assert eta_seconds([10.0], [0.0], 2) == 20.0  # the free slot and the running one's take one each
    # slots free at 0 and at 6 (the running trial's 10 s less the 4 it ran): pending trials end at 10, 16, 20
    assert [eta_seconds([10.0], [4.0], n) for n in (0, 1, 2, 3)] == [6.0, 10.0, 16.0, 20.0]
    assert eta_seconds([10.0], [], 0) == 0.0 and math.isnan(eta_seconds([], [1.0], 1))


def test_the_closing_table_puts_the_best_objective_first():
    import pandas as pd

    from tune_gems.sweep.console import closing_table

    t = pd.DataFrame({"trial_id": ["a", "b", "c", "d"], "status": "TERMINATED", "config_label": ["g6=wire", "x", "y", "z"],
                      "epochs_done": 4, "objective": [0.1, math.nan, 0.3, -math.inf], "val_sharpe_mean": 1.0,
                      "test_sharpe_mean": 1.0, "diverged": False})
    rows = [line.split()[0] for line in closing_table(t).splitlines()[1:]]
    assert rows == ["c", "a", "d", "b"]  # the best first, -inf (diverged) last of the scored, no objective last
    assert [line.split()[0] for line in closing_table(t, "min").splitlines()[1:]] == ["d", "a", "c", "b"]
    lines = closing_table(t).splitlines()
    assert lines[0].endswith("config_label") and lines[1].endswith("y")  # the label whole, last
    assert {line.index(label) for line, label in zip(lines[1:], ["y", "g6=wire", "z", "x"])} == {lines[0].index("config_label")}


def _event_tags(folder) -> set[str]:
    """The scalar tags of every event file under `folder` (the TFRecord framing read by hand:
    length, its CRC, the Event proto, its CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    tags = set()
    for path in folder.rglob("events.out.tfevents.*"):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("Q", data[i:i + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[i + 12:i + 12 + n])
            tags |= {v.tag for v in event.summary.value}
            i += 12 + n + 4
    return tags


def test_sweep_trials_write_the_tags_train_writes_one_run_per_trial_id(tmp_path):
    from tune_gems.sweep.progress import TrialEvents
    from tune_gems.trainer.tensorboard import EpochEvents

    metrics = {"epoch": 1, "val_sharpe_mean": 0.5, "val_sharpe_mean@proposal": 0.7, "loss": 1.0, "diverged": False}
    train = EpochEvents(tmp_path / "train")
    train.write(metrics, 1)
    train.close()
    trial = SimpleNamespace(trial_id="3f2a1b00", local_experiment_path=str(tmp_path / "exp"))
    events = TrialEvents()
    result = {**metrics, "training_iteration": 1, "time_total_s": 3.0, "timestamp": 5, "pid": 7, "trial_id": "3f2a1b00",
              "seed": 3, "config": {"a": 1}, "done": False}
    events.log_trial_result(1, trial, result)
    events.log_trial_end(trial)
    assert (tmp_path / "exp" / "tensorboard" / "3f2a1b00").is_dir()  # the run is named by the trial id
    assert _event_tags(tmp_path / "exp" / "tensorboard") == _event_tags(tmp_path / "train" / "tensorboard") == {
        "epoch", "val_sharpe_mean", "val_sharpe_mean/proposal", "loss"}


def test_without_verbose_tunes_newer_reporter_is_off_unless_the_user_chose(monkeypatch):
    from tune_gems.sweep.console import REPORTER_ENV, quiet_reporter

    monkeypatch.setenv(REPORTER_ENV, "")  # recorded, so the test leaves the variable as it found it
    monkeypatch.delenv(REPORTER_ENV)
    quiet_reporter(verbose=True)
    assert REPORTER_ENV not in __import__("os").environ
    quiet_reporter(verbose=False)
    assert __import__("os").environ[REPORTER_ENV] == "0"
    monkeypatch.setenv(REPORTER_ENV, "1")
    quiet_reporter(verbose=False)
    assert __import__("os").environ[REPORTER_ENV] == "1"


def test_train_progress_counts_iterations_not_only_epochs(tmp_path, capsys):
    cfg = load_config(None, [*TRAIN_TINY, "trainer.epochs=2", "trainer.iterations_per_epoch=5"])
    run_training(cfg, tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "10/10" in err and "epoch 2/2" in err  # 2 epochs x 5 iterations: the bar counts iterations
