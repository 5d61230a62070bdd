"""CPU runs outside Ray use the CPUs the process was given (issue 31 item 1): the thread count
chosen (the command's --threads, the user's OMP_NUM_THREADS / MKL_NUM_THREADS, else the CPU
allowance: affinity capped by a cgroup quota), shown by the dry run through the real CLI, and
the same member bits at 1 and at 2 threads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sweep_fixtures import cli
from test_bad_input import TRAIN_TINY
from tune_gems.commands.cpu_threads import (
    ThreadChoice, apply_threads, cgroup_cpu_quota, choose_threads, cpu_allowance, trial_threads,
)
from tune_gems.contracts.errors import ConfigError

NO_THREAD_ENV = {"OMP_NUM_THREADS": "", "MKL_NUM_THREADS": ""}
"""Empty values: the variables count as unset (the CLI then takes the CPU allowance)."""


def test_the_command_option_then_the_users_variables_then_the_allowance():
    allowance = lambda: (3, "this process's CPU allowance: CPU affinity: 3 CPU(s)")  # noqa: E731
    assert choose_threads(2, {"OMP_NUM_THREADS": "5"}, allowance) == ThreadChoice(2, "--threads")
    assert choose_threads(None, {"OMP_NUM_THREADS": "5", "MKL_NUM_THREADS": "4"}, allowance).threads == 5
    assert choose_threads(None, {"MKL_NUM_THREADS": "4"}, allowance) == ThreadChoice(4, "MKL_NUM_THREADS as set")
    assert choose_threads(None, {"OMP_NUM_THREADS": " "}, allowance).threads == 3
    for flag, env, name in ((0, {}, "--threads"), (None, {"OMP_NUM_THREADS": "two"}, "OMP_NUM_THREADS")):
        with pytest.raises(ConfigError, match=name):
            choose_threads(flag, env, allowance)


def test_a_sweeps_dry_run_times_a_trial_with_the_threads_ray_gives_it():
    assert [trial_threads(c)[0] for c in (0.5, 1.0, 2.0, 3.7)] == [1, 1, 2, 3]
    assert choose_threads(None, {}, lambda: trial_threads(1.0)) == ThreadChoice(1, trial_threads(1.0)[1])


def test_applying_keeps_the_users_variable_and_a_flag_replaces_it():
    env = {"MKL_NUM_THREADS": "4"}
    apply_threads(ThreadChoice(4, "MKL_NUM_THREADS as set"), env)
    assert env == {"MKL_NUM_THREADS": "4", "OMP_NUM_THREADS": "4"}
    apply_threads(ThreadChoice(1, "--threads"), env)
    assert env == {"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def test_the_allowance_is_the_affinity_capped_by_a_cgroup_quota(tmp_path):
    assert cpu_allowance(lambda _pid: {0, 1, 2, 3}, lambda: None) == (4, "CPU affinity: 4 CPU(s)")
    assert cpu_allowance(lambda _pid: {0, 1, 2, 3}, lambda: 1.5) == (2, "CPU affinity: 4 CPU(s), cgroup quota 1.5 CPU(s)")
    assert cpu_allowance(lambda _pid: {0, 1}, lambda: 8.0)[0] == 2  # a quota above the affinity changes nothing
    # cgroup v2: the process's own folder (and the ones above it) hold cpu.max
    own = tmp_path / "v2" / "job" / "step"
    own.mkdir(parents=True)
    (own / "cpu.max").write_text("max 100000\n")
    (own.parent / "cpu.max").write_text("250000 100000\n")
    (tmp_path / "self").write_text("0::/job/step\n")
    assert cgroup_cpu_quota(tmp_path / "self", tmp_path / "v2") == 2.5
    # cgroup v1: the cpu controller's cfs pair; -1 means no quota
    v1 = tmp_path / "v1" / "cpu" / "box"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "self1").write_text("4:memory:/box\n1:cpu:/box\n")
    assert cgroup_cpu_quota(tmp_path / "self1", tmp_path / "v1") == 0.5
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path / "self1", tmp_path / "v1") is None
    assert cgroup_cpu_quota(tmp_path / "missing", tmp_path / "none") is None


def _dry_run_threads(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[str, str]:
    res = cli("train", "--dry-run", *TRAIN_TINY, *args, "--out", str(tmp_path / "run"), env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    threads = next(line for line in res.stdout.splitlines() if line.startswith("threads: "))
    time = next(line for line in res.stdout.splitlines() if line.startswith("time: "))
    return threads, time


@pytest.mark.slow
def test_the_dry_run_shows_the_threads_chosen_and_measures_with_them(tmp_path):
    n, how = cpu_allowance()
    threads, time = _dry_run_threads(tmp_path, env=NO_THREAD_ENV)
    assert threads == f"threads: {n} CPU thread(s) (this process's CPU allowance: {how})"
    assert f"on this machine's cpu with {n} CPU thread(s)" in time
    threads, time = _dry_run_threads(tmp_path, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "2"})
    assert threads == "threads: 1 CPU thread(s) (OMP_NUM_THREADS as set)" and "with 1 CPU thread(s)" in time
    threads, _ = _dry_run_threads(tmp_path, "--threads", "1", env={"OMP_NUM_THREADS": "2"})
    assert threads == "threads: 1 CPU thread(s) (--threads)"
    bad = cli("train", *TRAIN_TINY, "--threads", "0", "--out", str(tmp_path / "run"))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "tune-gems: error: --threads: expected a whole number of threads >= 1, got '0'")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_members_have_the_same_bits_at_one_and_two_threads(tmp_path):
    """The invariant the thread choice rests on (tune_gems.commands.cpu_threads): the pinned
    BLAS path and the learner's small reductions give every member the same numbers at any
    thread count. Arms and folds on the population axis: every split of the work is there."""
    shape = ["arms.factors={gems.g12.mode: [measure, wire]}", "data.folds.k=2", "trainer.epochs=2"]
    members = {}
    for n in (1, 2):
        res = cli("train", *TRAIN_TINY, *shape, "--threads", str(n), "--out", str(tmp_path / f"t{n}"))
        assert res.returncode == 0, res.stderr[-2000:]
        members[n] = pd.read_csv(tmp_path / f"t{n}" / "members.csv")
    assert len(members[1]) == 2 * 2 * 2 * 2  # epochs x folds x arms x seeds
    pd.testing.assert_frame_equal(members[1], members[2], check_exact=True)


def test_a_sweep_leaves_its_trials_threads_to_ray(tmp_path):
    from sweep_fixtures import SMOKE

    res = cli("sweep", str(SMOKE), "--threads", "2", "--storage", str(tmp_path), "--name", "x")
    assert res.returncode == 2 and res.stderr.strip() == (
        "tune-gems: error: --threads: a sweep's trials get their threads from resources.cpu (Ray sets one per CPU); "
        "--threads applies to --dry-run")
    assert list(tmp_path.iterdir()) == []
