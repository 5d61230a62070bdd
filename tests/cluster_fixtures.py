"""Shared pieces of the cluster, fault-injection and job tests: polling with a deadline, the
sweep CLI as a background process, Tune's per-trial result.json rows, and an uninterrupted
in-process reference run of one trial to compare a faulted trial against, bit for bit."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from sweep_fixtures import REPO, SHARED_RAY
from tune_gems.config.schema import Config
from tune_gems.config.load import build_config
from tune_gems.config.dotted import flatten, set_dotted
from tune_gems.stats.metrics import MEMBER_IDS, MEMBER_METRICS, TIMING

POLL_S = 0.05
CONFIG_KEYS = tuple(flatten(Config().to_dict()))
"""The dotted config leaves: the config columns of trials.parquet."""


def wait_for(fn: Callable[[], Any], timeout: float, what: str, interval: float = POLL_S) -> Any:
    """Poll `fn` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a cluster of fake GPU nodes on this machine ----------------------------------------------

FAST_NODE_DEATH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}
"""A removed node is declared dead after health_check_failure_threshold missed checks; Ray's
defaults take tens of seconds, which only slows the node-removal tests down."""


@contextlib.contextmanager
def fake_gpu_cluster(workers: int, gpus_per_worker: int, cpus_per_worker: int):
    """`ray.cluster_utils.Cluster`: a head without GPUs and `workers` nodes with fake GPUs
    (Ray's logical `num_gpus`; CUDA stays unavailable, so trainers run on CPU), this process
    its driver."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "_system_config": FAST_NODE_DEATH})
    try:
        for _ in range(workers):
            c.add_node(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def module_cluster(workers: int, gpus_per_worker: int, cpus_per_worker: int):
    """A module-scoped pytest fixture (assign it to `cluster` in the test module) holding one
    `fake_gpu_cluster` for every test of the module (starting Ray costs seconds)."""
    import pytest

    @pytest.fixture(scope="module")
    def cluster():
        pytest.importorskip("ray")
        SHARED_RAY.stop()  # one Ray per process: the cluster's
        with fake_gpu_cluster(workers, gpus_per_worker, cpus_per_worker) as c:
            yield c

    return cluster


def worker_ids(c) -> set[str]:
    """The node ids of a cluster's worker nodes (those with the fake GPUs)."""
    return {n.node_id for n in c.worker_nodes}


# -- the sweep CLI as a background process -----------------------------------------------------


def start_cli(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m tune_gems ARGS` in its own session (so it can be frozen or killed as a group),
    stdout and stderr into `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tune_gems", *args],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group of a process this test started (no-op once it is gone)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    if sig == signal.SIGKILL:
        p.wait(timeout=60)


def finish(p: subprocess.Popen, log: Path, timeout: float) -> int:
    """Wait for the CLI to exit; on a time-out kill it and fail with its log's tail."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise AssertionError(f"sweep still running after {timeout:.0f}s:\n{tail(log)}") from None


def tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:] if log.is_file() else "(no log)"


# -- what Tune wrote ---------------------------------------------------------------------------


def result_rows(exp: Path) -> list[dict[str, Any]]:
    """Every result every trial reported so far, from `<exp>/<trial dir>/result.json` (JSON
    lines, appended by the driver); a line still being written is skipped."""
    rows = []
    for f in sorted(exp.glob("*/result.json")):
        try:
            text = f.read_text()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


# -- an uninterrupted reference run ------------------------------------------------------------


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v


def config_from_trial_row(row: pd.Series) -> Config:
    """Rebuild a trial's full config from the dotted config columns of trials.parquet."""
    defaults = flatten(Config().to_dict())
    tree: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        value = _plain(row[key])
        if defaults[key] is None and isinstance(value, float) and math.isnan(value):
            value = None  # an all-null column may come back as NaN
        set_dotted(tree, key, value)
    return build_config(tree, "trials.parquet row")


def reference_run(cfg: Config) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train `cfg` start to end in this process, uninterrupted: (history, member history).

    One intra-op thread, like a Ray worker of a 1-CPU trial (Ray sets OMP_NUM_THREADS to the
    trial's CPUs), so that no reduction runs in a different order than in the trial."""
    import torch

    from tune_gems.trainer.epoch_loop import train_epochs
    from tune_gems.trainer.trainer import Trainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = Trainer(cfg, log=None)
        train_epochs(trainer)
        return trainer.history, trainer.member_history
    finally:
        torch.set_num_threads(threads)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def assert_bit_identical(got: pd.DataFrame, want: list[dict[str, Any]], columns: tuple[str, ...], what: str) -> None:
    """Rows of `got` (ordered) equal `want` exactly in every column (NaN equals NaN)."""
    assert len(got) == len(want), f"{what}: {len(got)} rows, the uninterrupted run has {len(want)}"
    for i, (g, w) in enumerate(zip(got.to_dict("records"), want)):
        diff = {c: (g[c], w[c]) for c in columns if not _same(g[c], w[c])}
        assert not diff, f"{what}: row {i} differs from the uninterrupted run: {diff}"


WALL_CLOCK = ("sps", *TIMING)
"""Speed and timing columns: wall-clock, never compared."""
MEMBERS_COMPARED = (*MEMBER_IDS, *MEMBER_METRICS)


def _history_compared(got: pd.DataFrame) -> tuple[str, ...]:
    """Every metric column the trial reported (its arms' and gains' too), except wall-clock."""
    ids = ("experiment", "trial_id", "config_label")
    return tuple(c for c in got.columns if c not in ids and c not in WALL_CLOCK and got[c].notna().any())


def assert_trial_matches_uninterrupted(exp: Path, trial_id: str) -> None:
    """The trial's history and members rows equal an uninterrupted run of its config."""
    import yaml

    from tune_gems.design.arm_sets import apply_design

    trials = pd.read_parquet(exp / "trials.parquet").set_index("trial_id")
    history = pd.read_parquet(exp / "history.parquet")
    members = pd.read_parquet(exp / "members.parquet")
    spec = yaml.safe_load((exp / "spec.yaml").read_text()) or {}
    cfg = config_from_trial_row(trials.loc[trial_id])
    arms = (spec.get("config") or {}).get("arms")
    if arms is not None:  # the spec's own arms (not config columns of trials.parquet)
        cfg = build_config({**cfg.to_dict(), "arms": arms}, "spec.yaml arms")
    if spec.get("design", "none") != "none":
        cfg = apply_design(cfg, spec["design"])  # the design's arms
    want_h, want_m = reference_run(cfg)
    got_h = history[history["trial_id"] == trial_id].sort_values("epoch")
    got_m = members[members["trial_id"] == trial_id].sort_values(["epoch", "member"])
    assert_bit_identical(got_h, want_h, _history_compared(got_h), f"history of {trial_id}")
    assert_bit_identical(got_m, want_m, MEMBERS_COMPARED, f"members of {trial_id}")


# -- where and when trials ran -----------------------------------------------------------------


def make_probe(probe_dir: str, rendezvous: int, patience_s: float = 120.0):
    """The product's trainable, wrapped to log where and when each trial held its GPU.

    Each trial writes `<id>.start` when it begins, then waits (polling) until `rendezvous`
    trials have begun or `patience_s` passed, so that the first `rendezvous` trials provably run
    at the same time; then it runs the real `train_trial` and writes `<id>.json` with its
    interval, node, Ray's GPU ids and CUDA_VISIBLE_DEVICES. Defined in a factory so that
    cloudpickle ships it to the workers by value (the tests folder is not importable there)."""

    def train_trial(params, **kwargs):
        import json
        import os
        import time
        import uuid

        from tune_gems.sweep import trainable as product  # the worker's own, unwrapped module

        where = product.placement()
        token = uuid.uuid4().hex
        start = time.time()
        open(os.path.join(probe_dir, f"{token}.start"), "w").close()
        deadline = time.monotonic() + patience_s
        while sum(n.endswith(".start") for n in os.listdir(probe_dir)) < rendezvous and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            product.train_trial(params, **kwargs)
        finally:
            record = {**where, "seed": params.get("seed"), "first_seed_index": params.get("first_seed_index"), "start": start,
                      "end": time.time(), "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
            with open(os.path.join(probe_dir, f"{token}.json"), "w") as f:
                json.dump(record, f)

    return train_trial


# -- the CLI in a forked child -----------------------------------------------------------------


FORK_PRELOAD = ["cluster_fixtures", "tune_gems.commands.cli", "tune_gems.trainer.train_command", "tune_gems.sweep.driver",
                "tune_gems.analysis.analyze"]
"""What the forkserver of `forked_cli_pool` imports once, before it forks a child per command."""


def forked_cli_pool(workers: int):
    """A pool whose every task (`cli_in_child`) runs in a fresh child forked from a server that
    imported FORK_PRELOAD once: a process of its own per command, as a fresh one would be, without
    paying ~2.5 s of imports each time. Use it as a context manager."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORK_PRELOAD)
    return ProcessPoolExecutor(workers, mp_context=ctx, max_tasks_per_child=1)


def cli_forked(pool, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`tune-gems ARGS` in a fresh child of `pool` (forked_cli_pool), in `cwd` with `env` added:
    the exit status, stdout and stderr as a subprocess gives them (kept outside `cwd`)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tg-forked-") as io:
        out, err = os.path.join(io, "out"), os.path.join(io, "err")
        code = pool.submit(cli_in_child, [str(a) for a in args], str(cwd), env, out, err).result(timeout=timeout)
        return subprocess.CompletedProcess(["tune-gems", *args], code, Path(out).read_text(errors="replace"),
                                           Path(err).read_text(errors="replace"))


def cli_in_child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> int:
    """`tune-gems ARGS` as the console script runs it (tune_gems.commands.cli.main), in the calling
    process: meant for a fresh child of a multiprocessing forkserver that has the heavy modules
    imported already. Working directory, environment and the stdout/stderr file descriptors
    are the child's own; returns the exit status."""
    os.environ.update(env)
    os.chdir(cwd)
    # as `python -m tune_gems` puts the working directory first and PYTHONPATH's folders after it (plug-ins there import)
    sys.path[0:0] = [cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    sys.stdout.flush()
    sys.stderr.flush()
    for path, fd in ((out, 1), (err, 2)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    from tune_gems.commands.cli import main

    try:
        code = main(args)
    except SystemExit as e:  # argparse errors
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code
