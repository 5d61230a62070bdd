"""Shared pieces of the sweep tests: one Ray instance per test module, a tiny version of the
smoke sweep, and the CLI as a subprocess."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray instance for the whole module (starting Ray costs seconds)."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


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


def store_spec(folder: Path, text: bytes) -> None:
    """`folder/spec.yaml` as a sweep stores it: the spec's bytes and the marker recording their
    checksum (analyze and compare refuse a stored spec no marker vouches for, fail-closed)."""
    from tune_gems.contracts.outputs import write_marker
    from tune_gems.contracts.run_record import CHECKSUMS_KEY, checksums

    (folder / "spec.yaml").write_bytes(text)
    write_marker(folder, "sweep", **{CHECKSUMS_KEY: checksums(None, **{"spec.yaml": text})})
