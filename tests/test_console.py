"""What a run prints while it runs: the sweep console's reporter (HEALTH_DIAG per trial and
epoch, a status line per finished trial) and `train`'s iteration-level progress bar. The real
sweep's lines are counted in tests/test_sweep.py (test_smoke_sweep_end_to_end_through_the_cli)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from test_bad_input import TRAIN_TINY
from tune_gems.config.load import load_config
from tune_gems.sweep.progress import HEALTH_KEY, SweepConsole
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
    a, b, c = _trial("a", 0.5), _trial("b", math.nan), _trial("c", 0.2)
    trials = [a, b, c]
    for t in trials:
        console.on_trial_result(1, trials, t, {HEALTH_KEY: LINE})
    console.on_trial_result(1, trials, a, {"no": "line"})  # a result without a line prints nothing
    assert printed == [f"[{t.trial_id}] {without_arm_detail(LINE)}" for t in trials]
    printed.clear()
    now[0] = 10.0
    console.on_trial_complete(1, trials, a)
    a.status = "TERMINATED"
    now[0] = 20.0
    console.on_trial_error(1, trials, b)
    b.status = "ERROR"
    assert printed[0].startswith("tune-gems sweep: trial 1/3 finished: a TERMINATED after 3 epoch(s), objective m=0.500")
    assert "| best 0.500 (a) | 10s elapsed, ETA 20s" in printed[0]  # 10 s per trial, 2 left
    assert "trial 2/3 finished: b ERROR" in printed[1] and "m=nan | best 0.500 (a) | 20s elapsed, ETA 10s" in printed[1]
    verbose = SweepConsole(total=1, metric="m", mode="min", verbose=True, out=printed.append)
    verbose.on_trial_result(1, [a], a, {HEALTH_KEY: LINE})
    assert printed[-1] == f"[a] {LINE}"  # the full per-arm part with --verbose


def test_train_progress_counts_iterations_not_only_epochs(tmp_path, capsys):
    cfg = load_config(None, [*TRAIN_TINY, "trainer.epochs=2", "trainer.iterations_per_epoch=5"])
    run_training(cfg, tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "10/10" in err and "epoch 2/2" in err  # 2 epochs x 5 iterations: the bar counts iterations
