"""`tune-gems train` against a user's bad luck: a run killed before its first checkpoint
restarts with `--resume` (no overrides repeated) and ends identical to an uninterrupted run; two
writers on one `--out` are refused while the first lives, and a SIGKILLed writer's lock is no
obstacle; checkpoints are validated by schema; the CLI's last line of defence writes the
traceback to a file and prints one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from cluster_fixtures import kill_group, wait_for
from sweep_fixtures import REPO
from test_bad_input import TRAIN_TINY
from tune_gems.commands import cli
from tune_gems.config.load import load_config
from tune_gems.contracts.errors import CheckpointError
from tune_gems.contracts.output_lock import LOCK_FILE
from tune_gems.contracts.outputs import MARKER_FILE
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.train_command import run_training

EPOCHS = 3
LONG = [*TRAIN_TINY, f"trainer.epochs={EPOCHS}", "trainer.iterations_per_epoch=20"]


def _cli(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "tune_gems", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _members(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "members.csv")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pd.DataFrame:
    """members.csv of an uninterrupted run of LONG (in-process)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    run_training(load_config(None, LONG), out, progress=False)
    return _members(out)


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_restarts_with_resume_alone(tmp_path, reference):
    """SIGKILL once config.yaml exists but no checkpoint does; then `train --out DIR --resume`
    with no overrides: it reads the stored config, starts again from epoch 0 and ends with the
    same member rows as an uninterrupted run (every column but sps-free ones compared)."""
    out = tmp_path / "run"
    p = _cli("train", *LONG, "--out", str(out), cwd=tmp_path)
    try:
        wait_for(lambda: (out / "config.yaml").is_file() or p.poll() is not None, 120, "config.yaml")
        assert p.poll() is None and not (out / "checkpoint.pt").exists(), "the run got past its first checkpoint"
        kill_group(p)
    finally:
        kill_group(p)
    assert (out / MARKER_FILE).is_file() and not (out / "checkpoint.pt").exists()

    code = cli.main(["train", "--out", str(out), "--resume"])
    assert code == 0
    got = _members(out)
    assert got["epoch"].max() == EPOCHS
    pd.testing.assert_frame_equal(got, reference)


def test_without_resume_a_stopped_run_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / MARKER_FILE).write_text('{"tool": "tune-gems", "kind": "train", "version": 1}')
    (out / "config.yaml").write_text("seed: 0\n")
    assert cli.main(["train", *TRAIN_TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume" in err and "already holds a train run" in err


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_killed_writers_lock_is_not_an_obstacle(tmp_path):
    out = tmp_path / "run"
    first = _cli("train", *LONG, "trainer.epochs=50", "--out", str(out), cwd=tmp_path)
    try:
        wait_for(lambda: (out / "history.csv").is_file() or first.poll() is not None, 120, "the first epoch")
        assert first.poll() is None
        for extra in ([*LONG], ["--resume"]):
            second = _cli("train", *extra, "--out", str(out), cwd=tmp_path)
            _, err = second.communicate(timeout=120)
            assert second.returncode == 2, err[-2000:]
            assert err.count("\n") == 1 and f"pid {first.pid}" in err and "being written" in err, err
        kill_group(first, signal.SIGKILL)
    finally:
        kill_group(first)
    assert (out / LOCK_FILE).is_file()  # left behind by the killed writer
    code = cli.main(["train", "--out", str(out), "--resume", "trainer.epochs=2"])  # a resumable key may change
    assert code == 0 and _members(out)["epoch"].max() >= 2


# -- checkpoints by schema ---------------------------------------------------------------------


def _payload(tmp_path: Path) -> dict:
    return {
        "format": ckpt.FORMAT, "version": ckpt.VERSION,
        "meta": {"epoch": 1, "env_steps": 10, "updates": 5, "diverged": False, "prefilled": True,
                 "history": [{"epoch": 1}], "member_history": [], "config": {}},
        "state": {"x": torch.zeros(2)},
    }


@pytest.mark.parametrize(
    "damage,fragment",
    [
        (lambda p: p.pop("state"), "state"),
        (lambda p: p.__setitem__("state", [1, 2]), "state"),
        (lambda p: p["state"].__setitem__("x", 3), "state.x"),
        (lambda p: p.pop("meta"), "meta"),
        (lambda p: p["meta"].pop("epoch"), "meta.epoch is missing"),
        (lambda p: p["meta"].__setitem__("epoch", "3"), "meta.epoch is str"),
        (lambda p: p["meta"].__setitem__("epoch", True), "meta.epoch is bool"),
        (lambda p: p["meta"].__setitem__("updates", -1), "meta.updates is -1"),
        (lambda p: p["meta"].__setitem__("diverged", 0), "meta.diverged is int"),
        (lambda p: p["meta"].__setitem__("history", [1]), "meta.history"),
        (lambda p: p["meta"].__setitem__("config", None), "meta.config"),
        (lambda p: p.__setitem__("version", 99), "version 99"),
        (lambda p: p.__setitem__("version", "1"), "version '1'"),
        (lambda p: p.__setitem__("format", "other"), "not a tune-gems checkpoint"),
    ],
)
def test_a_checkpoint_breaking_the_schema_is_one_named_error(tmp_path, damage, fragment):
    payload = _payload(tmp_path)
    damage(payload)
    path = tmp_path / "checkpoint.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as e:
        ckpt.load(path)
    assert fragment in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_valid_checkpoint_loads_and_an_old_one_without_version_too(tmp_path):
    payload = _payload(tmp_path)
    path = tmp_path / "checkpoint.pt"
    torch.save(payload, path)
    state, meta = ckpt.load(path)
    assert meta["epoch"] == 1 and set(state) == {"x"}
    payload.pop("version")  # written before the field existed
    torch.save(payload, path)
    assert ckpt.load(path)[1]["updates"] == 5


# -- the last line of defence ------------------------------------------------------------------


def test_an_unexpected_exception_is_one_line_with_a_traceback_file(tmp_path, capsys, monkeypatch):
    def boom(args):
        raise ZeroDivisionError("planted bug")

    monkeypatch.setattr(cli, "_cmd_analyze", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert cli.main(["analyze", "x"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "ZeroDivisionError: planted bug" in err
    log = Path(err.rsplit("full traceback in ", 1)[1].split()[0].rstrip(";"))
    assert log.parent == tmp_path and "Traceback" in log.read_text() and "planted bug" in log.read_text()

    assert cli.main(["analyze", "x", "--debug"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("tune-gems: internal error")
