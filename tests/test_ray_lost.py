"""A sweep whose Ray dies under it says so in one line with the `--resume` command and exits at
once (issue 31 item 5), and `--resume` finishes it; Ray's start-up notices and Tune's reporter
box (its TensorBoard hint into Ray's temporary folder) are not shown without --verbose. Through
the real CLI, on a private local Ray (no RAY_ADDRESS); the resume joins the test process's Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli, ray_address  # noqa: F401 (fixture)
from tune_gems.sweep.local_ray import EXIT_RAY_LOST

pytestmark = pytest.mark.slow

QUIET = ("To visualize your results with TensorBoard", "Configuration for experiment", "View detailed results here",
         "Token authentication is enabled")


def _wait_for(predicate, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def test_a_sweep_whose_ray_dies_says_so_and_resumes(tmp_path, ray_address):
    # one trial, its second epoch long enough that the sweep is still training when its Ray is killed
    # after the first (at 6 iterations a quiet machine finished both trials within the watch's poll after
    # the first epoch: exit 0); --resume trains it again from the start (no checkpoint yet)
    args = ["sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "lost", *TINY_SWEEP, "num_samples=1",
            "config.trainer.epochs=2", "config.trainer.iterations_per_epoch=200"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as fo, open(err, "w") as fe:
        driver = subprocess.Popen([sys.executable, "-m", "tune_gems", *args], cwd=REPO, env=env, stdout=fo, stderr=fe)
        try:
            assert _wait_for(lambda: "HEALTH_DIAG" in out.read_text() or driver.poll() is not None, 600), out.read_text()
            assert driver.poll() is None, err.read_text()[-2000:]
            gcs = [p for p in psutil.Process(driver.pid).children() if p.name().startswith("gcs_server")]
            assert len(gcs) == 1
            killed = time.monotonic()
            gcs[0].kill()  # the sweep's own Ray, started by this driver
            rc = driver.wait(timeout=120)
            took = time.monotonic() - killed
        finally:
            if driver.poll() is None:
                driver.kill()
    lines = err.read_text().strip().splitlines()
    assert rc == EXIT_RAY_LOST and took < 30, (rc, took, lines[-5:])
    assert lines[-1].startswith("tune-gems sweep: Ray stopped under the sweep (its gcs_server process, pid ")
    assert lines[-1].endswith(f"continue with: tune-gems sweep {SMOKE} --storage {tmp_path} --name lost --resume")
    shown = out.read_text() + err.read_text()
    assert not [q for q in QUIET if q in shown], shown[-3000:]

    res = cli(*args, "--resume", env={"RAY_ADDRESS": ray_address})  # on the test process's Ray: the records are the point
    assert res.returncode == 0, res.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "lost" / "trials.parquet")
    assert len(trials) == 1 and set(trials["status"]) == {"TERMINATED"}
    assert sorted(p.name for p in (tmp_path / "lost" / "tensorboard").iterdir()) == sorted(trials["trial_id"])
