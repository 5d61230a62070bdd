"""Shared pieces of the sweep tests: one Ray instance per test module, a tiny version of the
smoke sweep, and the CLI as a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "sweeps" / "smoke.yaml"

TINY_SWEEP = [
    "num_samples=4",
    "seeds=per_trial",
    "config.trainer.population=2",
    "config.trainer.epochs=2",
    "config.trainer.iterations_per_epoch=6",
    "config.trainer.batch_size=16",
    "config.trainer.n_envs=2",
    "config.trainer.replay_capacity=512",
    "config.trainer.learning_starts=32",
    "config.env.window=8",
    "config.env.episode_length=32",
    "config.model.hidden=16",
    "config.model.stream_hidden=8",
    "config.model.atoms=11",
    "config.model.predictor_hidden=16",
    "config.data.synthetic.n=900",
    "config.device=cpu",
]


TUNE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"
"""Ray Tune's switch for its SIGINT handler (ray.tune.tune: 1 leaves Ctrl-C a KeyboardInterrupt)."""


class SharedRay:
    """One local Ray instance per test process, started by the first module that asks for it and
    kept for the modules after it (starting one costs 5-10 s on 2 busy cores, and a worker runs
    up to eight such modules); a module that needs another Ray in this process (a fake cluster)
    stops it first, and the session's end stops it. Its processes share the test run's process
    group, so a Ctrl-C reaches them too: the raylet dies at once and its agents, which ignore
    SIGINT, would outlive the run by a minute; whatever `ray.shutdown` leaves of the processes it
    started is killed."""

    def __init__(self) -> None:
        self.address: str | None = None
        self.started: list = []

    def start(self) -> str:
        import psutil
        import ray

        if self.address is None:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            self.started = psutil.Process().children(recursive=True)
            self.address = ray.get_runtime_context().gcs_address
        return self.address

    def stop(self) -> None:
        if self.address is None:
            return
        import psutil
        import ray

        ray.shutdown()
        for proc in self.started:
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil refuses a pid that now names another process
        self.address, self.started = None, []


SHARED_RAY = SharedRay()


@pytest.fixture(scope="module")
def ray_address():
    """The address of this test process's shared local Ray instance (`SharedRay`)."""
    pytest.importorskip("ray")
    return SHARED_RAY.start()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tune_gems", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_in_process(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`tune-gems ARGS` through `tune_gems.commands.cli.main` (what the console script runs) in
    this process, in `cwd` with `env` added: the exit status, stdout and stderr as `cli` gives
    them, without a fresh interpreter's imports (about 2 s a call on 2 quiet cores). For tests of
    what a command does; a test of the process itself (a signal, a fresh interpreter, a plug-in
    found through PYTHONPATH, Ray's workers' console lines) uses `cli`. The environment (the
    CLI's thread choice writes to it), torch's thread count and the working directory are
    restored afterwards. A Ctrl-C the command answered with exit 130 is raised again
    (KeyboardInterrupt): the test run stops, rather than failing this test and going on to the next;
    Tune's own Ctrl-C handler, which lets the trials finish their step and saves the experiment
    first (5 s and more), is off (`TUNE_SIGINT_ENV`)."""
    import io

    from tune_gems.commands.cli import EXIT_INTERRUPTED, main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    torch = sys.modules.get("torch")
    saved_threads = torch.get_num_threads() if torch is not None else None
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update({TUNE_SIGINT_ENV: "1", **(env or {})})
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's own errors
                code = e.code if isinstance(e.code, int) else 1
        if code == EXIT_INTERRUPTED:  # the user's Ctrl-C, which the command turned into its exit status: stop the run
            raise KeyboardInterrupt(err.getvalue().strip())
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        if saved_threads is not None and torch.get_num_threads() != saved_threads:
            torch.set_num_threads(saved_threads)
    return subprocess.CompletedProcess(["tune-gems", *args], code, out.getvalue(), err.getvalue())


def store_spec(folder: Path, text: bytes) -> None:
    """`folder/spec.yaml` as a sweep stores it: the spec's bytes and the marker recording their
    checksum (analyze and compare refuse a stored spec no marker vouches for, fail-closed) and
    the tables' (confirm refuses tables no marker vouches for): call it after the tables are
    final."""
    from tune_gems.contracts.outputs import write_marker
    from tune_gems.contracts.result_files import TABLE_FILES
    from tune_gems.contracts.run_record import CHECKSUMS_KEY, checksums, table_checksums

    (folder / "spec.yaml").write_bytes(text)
    tables = table_checksums({n: (folder / n).read_bytes() for n in TABLE_FILES if (folder / n).is_file()})
    write_marker(folder, "sweep", **{CHECKSUMS_KEY: checksums(None, **{"spec.yaml": text})}, **tables)
