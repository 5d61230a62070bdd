"""CPU runs outside Ray take one thread per process, as each of a sweep's trials, unless asked
(issue 38 item 1; issue 31 item 1 before it): the thread count chosen (the command's --threads,
the user's OMP_NUM_THREADS / MKL_NUM_THREADS, else one, whose words name the CPU allowance:
affinity capped by a cgroup quota), shown by the dry run and by `train` through the real CLI,
the same member bits at 1 and at 2 threads; and every CPU variable checked before torch is
imported (issue 39 item 3): garbage, zero, negative, absurd counts, kernel widths torch would
ignore and MKL branches MKL does not know are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sweep_fixtures import cli, cli_in_process
from test_bad_input import TRAIN_TINY
from tune_gems.commands.cpu_threads import (
    ThreadChoice, apply_threads, cgroup_cpu_quota, choose_threads, cpu_allowance, one_per_process, trial_threads,
)
from tune_gems.contracts.cpu_environment import (
    THREADS_PER_CPU_MAX, check_cpu_environment, cpu_flags, cpu_record, kernel_widths, max_threads, thread_count,
)
from tune_gems.contracts.errors import ConfigError

NO_THREAD_ENV = {"OMP_NUM_THREADS": "", "MKL_NUM_THREADS": ""}
"""Empty values: the variables count as unset (the CLI then takes the CPU allowance)."""


def test_the_command_option_then_the_users_variables_then_one_per_process():
    default = lambda: one_per_process(lambda: (3, "CPU affinity: 3 CPU(s)"))  # noqa: E731
    assert choose_threads(2, {"OMP_NUM_THREADS": "5"}, default) == ThreadChoice(2, "--threads")
    assert choose_threads(None, {"OMP_NUM_THREADS": "5", "MKL_NUM_THREADS": "4"}, default).threads == 5
    assert choose_threads(None, {"MKL_NUM_THREADS": "4"}, default) == ThreadChoice(4, "MKL_NUM_THREADS as set")
    assert choose_threads(None, {"OMP_NUM_THREADS": " "}, default) == ThreadChoice(
        1, "one per process, as each of a sweep's trials; this process may use 3 CPU(s): --threads 3 or OMP_NUM_THREADS=3 "
           "to use them")
    assert one_per_process(lambda: (1, "CPU affinity: 1 CPU(s)")) == (1, "one per process, as each of a sweep's trials")
    for flag, env, name in ((0, {}, "--threads"), (None, {"OMP_NUM_THREADS": "two"}, "OMP_NUM_THREADS")):
        with pytest.raises(ConfigError, match=name):
            choose_threads(flag, env, default)


THREAD_GARBAGE = ["abc", "0", "-1", "1.5", "2^70", "3_000", "0x10", "\u0663", "4,2", str(2 ** 70), "1000000000", "9" * 5000]
"""Counts that are not one whole number of threads in ASCII digits, or absurd (issue 39: 2^70
overflowed torch.set_num_threads, 1000000000 made libgomp abort allocating 216 GB)."""


@pytest.mark.parametrize("value", THREAD_GARBAGE)
def test_a_thread_count_that_is_garbage_or_absurd_is_one_line_naming_the_variable(value):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        with pytest.raises(ConfigError) as e:
            check_cpu_environment({name: value}, widths=lambda: ("default",), cpus=lambda: 2)
        assert str(e.value).startswith(f"{name}: ") and "\n" not in str(e.value) and len(str(e.value)) < 300
    with pytest.raises(ConfigError, match="^--threads: "):
        thread_count(value, "--threads", cpus=lambda: 2)


def test_the_thread_bound_is_the_machines_cpus_times_a_small_factor():
    assert max_threads(lambda: 2) == 2 * THREADS_PER_CPU_MAX
    assert thread_count(" 8 ", "OMP_NUM_THREADS", cpus=lambda: 2) == 8
    with pytest.raises(ConfigError, match="more than this machine's 2 CPU"):
        thread_count("9", "OMP_NUM_THREADS", cpus=lambda: 2)
    check_cpu_environment({"OMP_NUM_THREADS": "", "MKL_NUM_THREADS": "3"}, widths=lambda: ("default",), cpus=lambda: 2)


def test_a_kernel_width_torch_would_ignore_or_the_cpu_cannot_run_is_refused():
    """torch ignores an ATEN_CPU_CAPABILITY it does not know (compared as written: `AVX2` too),
    and the AVX2 pin is then lost; one the CPU lacks would crash it."""
    x86_avx2 = frozenset({"sse2", "avx", "avx2", "fma"})
    assert kernel_widths(x86_avx2, "x86_64") == ("default", "avx2")
    assert kernel_widths(x86_avx2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, "x86_64") == ("default", "avx2", "avx512")
    assert kernel_widths(frozenset({"asimd", "sve"}), "aarch64") == ("default", "sve256")
    assert kernel_widths(x86_avx2, "ppc64le") == ("default",)
    widths = lambda: ("default", "avx2")  # noqa: E731
    for value in ("default", "avx2"):
        check_cpu_environment({"ATEN_CPU_CAPABILITY": value}, widths=widths)
    for value, hint in (("garbage", ""), ("AVX2", "as written: 'avx2'"), ("avx512", ""), ("", "")):
        with pytest.raises(ConfigError, match="^ATEN_CPU_CAPABILITY: ") as e:
            check_cpu_environment({"ATEN_CPU_CAPABILITY": value}, widths=widths)
        assert hint in str(e.value) and "give one of default, avx2" in str(e.value)
    assert cpu_flags(lambda: "processor : 0\nflags : fpu avx2\n") == {"fpu", "avx2"}
    assert cpu_flags(lambda: (_ for _ in ()).throw(OSError("unreadable"))) == frozenset()


def test_an_mkl_branch_mkl_does_not_know_is_refused():
    for value in ("AVX2,STRICT", "BRANCH=AVX2,STRICT", "COMPATIBLE", "AUTO", "AVX512_E1"):
        check_cpu_environment({"MKL_CBWR": value})
    for value in ("garbage", "avx2", "AVX2,strict", "AVX2,STRICT,STRICT", "AVX2,FAST", "", "BRANCH="):
        with pytest.raises(ConfigError, match="^MKL_CBWR: "):
            check_cpu_environment({"MKL_CBWR": value})


def test_the_record_is_the_four_values_in_force():
    env = {"OMP_NUM_THREADS": "1", "MKL_CBWR": "AVX2,STRICT", "PATH": "/bin"}
    assert cpu_record(env) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": None, "MKL_CBWR": "AVX2,STRICT",
                               "ATEN_CPU_CAPABILITY": None}


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
    res = cli_in_process("train", "--dry-run", *TRAIN_TINY, *args, "--out", str(tmp_path / "run"), env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    threads = next(line for line in res.stdout.splitlines() if line.startswith("threads: "))
    time = next(line for line in res.stdout.splitlines() if line.startswith("time: "))
    return threads, time


@pytest.mark.slow
def test_the_dry_run_shows_the_threads_chosen_and_measures_with_them(tmp_path):
    threads, time = _dry_run_threads(tmp_path, env=NO_THREAD_ENV)
    assert threads == f"threads: 1 CPU thread(s) ({one_per_process()[1]})"
    assert "on this machine's cpu with 1 CPU thread(s)" in time
    threads, time = _dry_run_threads(tmp_path, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "2"})
    assert threads == "threads: 1 CPU thread(s) (OMP_NUM_THREADS as set)" and "with 1 CPU thread(s)" in time
    threads, _ = _dry_run_threads(tmp_path, "--threads", "1", env={"OMP_NUM_THREADS": "2"})
    assert threads == "threads: 1 CPU thread(s) (--threads)"
    bad = cli_in_process("train", *TRAIN_TINY, "--threads", "0", "--out", str(tmp_path / "run"))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "tune-gems: error: --threads: expected a whole number of threads >= 1, got '0'")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_members_have_the_same_bits_at_one_and_two_threads(tmp_path):
    """The invariant the thread choice rests on (tune_gems.commands.cpu_threads): the pinned
    BLAS path and the learner's small reductions give every member the same numbers at any
    thread count. Arms and folds on the population axis: every split of the work is there. In
    this process: `--threads` sets torch's (and through it OpenMP's and MKL's) count at run time,
    as it does in a fresh one."""
    shape = ["arms.factors={gems.g12.mode: [measure, wire]}", "data.folds.k=2", "trainer.epochs=2"]
    members = {}
    for n in (1, 2):
        res = cli_in_process("train", *TRAIN_TINY, *shape, "--threads", str(n), "--out", str(tmp_path / f"t{n}"))
        assert res.returncode == 0, res.stderr[-2000:]
        members[n] = pd.read_csv(tmp_path / f"t{n}" / "members.csv")
    assert len(members[1]) == 2 * 2 * 2 * 2  # epochs x folds x arms x seeds
    pd.testing.assert_frame_equal(members[1], members[2], check_exact=True)


def test_a_sweep_leaves_its_trials_threads_to_ray(tmp_path):
    from sweep_fixtures import SMOKE

    res = cli_in_process("sweep", str(SMOKE), "--threads", "2", "--storage", str(tmp_path), "--name", "x")
    assert res.returncode == 2 and res.stderr.strip() == (
        "tune-gems: error: --threads: a sweep's trials get their threads from resources.cpu (Ray sets one per CPU); "
        "--threads applies to --dry-run")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_checks_the_cpu_variables_before_torch_is_imported(tmp_path):
    """Importing the CLI loads no torch, and a value that would abort libgomp or overflow
    torch.set_num_threads is one line, exit 2, in a fresh process (issue 39: with 1000000000
    libgomp aborted allocating 216 GB and nothing was printed). `main` checks the variables
    once, before it dispatches to any command: every variable with every command goes through
    `main` in this process; fresh processes cover every variable and every command once each,
    plus the pair that crashed: `train` (which loads torch and OpenMP at once) with
    OMP_NUM_THREADS=1000000000."""
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", "import sys, tune_gems.commands.cli; print('torch' in sys.modules)"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "False", probe.stderr[-2000:]
    cases = [("OMP_NUM_THREADS", "1000000000"), ("MKL_NUM_THREADS", str(2 ** 70)), ("ATEN_CPU_CAPABILITY", "AVX2"),
             ("MKL_CBWR", "garbage")]
    commands = [["train", *TRAIN_TINY, "--out", str(tmp_path / "run")], ["sweep", "spec.yaml"], ["plan", "exp"],
                ["confirm", "exp"], ["compare", "a", "b"]]
    fresh = {(i % len(cases), i) for i in range(len(commands))} | {(0, 0)}  # each variable and each command once; train x OMP
    for v, (name, value) in enumerate(cases):
        for c, command in enumerate(commands):
            run = cli if (v, c) in fresh else cli_in_process
            res = run(*command, env={**NO_THREAD_ENV, name: value})
            assert res.returncode == 2 and res.stderr.startswith(f"tune-gems: error: {name}: "), (command, res.stderr[-2000:])
            assert res.stderr.count("\n") == 1 and res.stdout == "", res.stderr
    assert not (tmp_path / "run").exists()
    res = cli_in_process("train", *TRAIN_TINY, "--threads", "1000000", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and res.stderr.startswith("tune-gems: error: --threads: 1000000 threads is more than")


@pytest.mark.slow
def test_train_prints_the_threads_it_uses_among_its_first_lines(tmp_path):
    """Issue 38 item 1: `train` takes one thread unless asked, and says so in the dry runs' words."""
    res = cli_in_process("train", *TRAIN_TINY, "trainer.epochs=1", "--out", str(tmp_path / "run"), env=NO_THREAD_ENV)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines[1] == f"tune-gems train: threads: 1 CPU thread(s) ({one_per_process()[1]})", lines[:3]
    marker = json.loads((tmp_path / "run" / ".tune-gems-output.json").read_text())
    assert marker["cpu_environment"][-1]["OMP_NUM_THREADS"] == "1"
    res = cli_in_process("train", *TRAIN_TINY, "trainer.epochs=2", "--out", str(tmp_path / "run"), "--resume",
              env={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": ""})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "tune-gems train: threads: 2 CPU thread(s) (OMP_NUM_THREADS as set)" in res.stdout.splitlines()[:3]
    marker = json.loads((tmp_path / "run" / ".tune-gems-output.json").read_text())
    assert [e["OMP_NUM_THREADS"] for e in marker["cpu_environment"]] == ["1", "2"]


def test_the_trials_own_pin_checks_its_workers_variables():
    """A sweep trial pins the CPU code path again in its Ray worker (tune_gems.sweep.trainable),
    whose environment is the cluster's, not the driver's: the pin checks every CPU variable
    there, so a worker's bad value fails the trial with the variable named, never runs."""
    from tune_gems.contracts.cpu_environment import pin_cpu_code_path

    for env in ({"OMP_NUM_THREADS": "0"}, {"MKL_NUM_THREADS": "1000000000"}, {"ATEN_CPU_CAPABILITY": "AVX2"},
                {"MKL_CBWR": "garbage"}):
        with pytest.raises(ConfigError, match=f"^{next(iter(env))}: "):
            pin_cpu_code_path(dict(env), has_avx2=lambda: True)
    env = {"OMP_NUM_THREADS": "1"}
    assert pin_cpu_code_path(env, has_avx2=lambda: True) == "AVX2,STRICT" and env["ATEN_CPU_CAPABILITY"] == "avx2"


def test_a_trial_uses_one_thread_per_cpu_of_its_resources_whatever_the_environment_says(monkeypatch):
    """Ray exports OMP_NUM_THREADS to a worker only where it is unset: a sweep started with
    OMP_NUM_THREADS=2 would hand 2 to each trial (two such trials on 2 cores ran ~10x slower)."""
    import torch
    from ray.tune.execution.placement_groups import PlacementGroupFactory

    from tune_gems.sweep.trainable import use_trial_cpus

    class Trial:
        def __init__(self, cpu):
            self.cpu = cpu

        def get_trial_resources(self):
            return PlacementGroupFactory([{"CPU": self.cpu}])

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    before = torch.get_num_threads()
    try:
        assert [use_trial_cpus(Trial(c)) for c in (1, 0.5, 2, 3.5)] == [1, 1, 2, 3]
    finally:
        torch.set_num_threads(before)
