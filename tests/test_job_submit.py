"""`ray start --head` + `ray job submit --working-dir . -- tune-gems sweep sweeps/smoke.yaml`,
end to end, as docs/cluster.md tells a user to run it: token authentication on, the dashboard
(which serves the job API) on 127.0.0.1 only.

The head is this module's own: its own temp dir, free ports and auth token file
(RAY_AUTH_TOKEN_PATH, never ~/.ray), started with `--block` in its own process group and
stopped by signalling that group, so that no other Ray instance on the machine is touched
(`ray stop` would stop them all).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from cluster_fixtures import assert_trial_matches_uninterrupted, free_port, wait_for
from sweep_fixtures import REPO, TINY_SWEEP
from tune_gems.contracts.cpu_environment import CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH_ENV

BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
DOCS = REPO / "docs" / "cluster.md"
# what the copy of the working tree leaves out (it is a copy for speed; the upload itself is
# filtered by Ray, which is what the test checks: the planted folders below are ignored ones)
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "runs", "experiments", "__pycache__", "*.egg-info", ".pytest_cache", "build", ".torch_extensions", ".devsite"
)


@dataclass
class Head:
    temp_dir: Path
    dashboard: str  # http://127.0.0.1:PORT
    port: int
    token: str
    env: dict[str, str]

    def ray(self, *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
        return subprocess.run([RAY, *args], cwd=cwd, env=env or self.env, capture_output=True, text=True, timeout=timeout)

    def http(self, path: str, *, token: str | None = None, data: dict | None = None) -> tuple[int, str]:
        req = urllib.request.Request(f"{self.dashboard}{path}", data=json.dumps(data).encode() if data else None)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")


def _dashboard_up(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/api/version", timeout=1)
    except urllib.error.HTTPError:
        return True  # answering (401 without a token): up
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def head():
    pytest.importorskip("ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="tgray", dir="/tmp"))  # short: Ray's socket paths live under it
    token_file = temp_dir / "auth_token"
    token = secrets.token_hex(32)
    token_file.write_text(token)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN_PATH": str(token_file)}
    env.pop("RAY_ADDRESS", None)
    for pinned in (CPU_BLAS_PATH_ENV, CPU_KERNEL_WIDTH_ENV):  # a head started without the CLI's CPU code-path pins:
        env.pop(pinned, None)  # its workers get them only from the trial itself (tune_gems.contracts.cpu_environment)
    port, dash = free_port(), free_port()
    args = [
        RAY, "start", "--head", "--block", "--num-cpus", "2", "--num-gpus", "0", "--port", str(port),
        "--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
        "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
        "--temp-dir", str(temp_dir), "--disable-usage-stats",
    ]
    log = temp_dir / "head.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{dash}"
    try:
        wait_for(lambda: proc.poll() is not None or _dashboard_up(url), 90, "the Ray head's dashboard")
        assert proc.poll() is None, log.read_text()[-3000:]
        yield Head(temp_dir, url, port, token, env)
    finally:
        _stop_head(proc, temp_dir)


def _stop_head(proc: subprocess.Popen, temp_dir: Path) -> None:
    """SIGINT to the head's process group (`ray start --block` then stops every process it
    started, workers included); SIGKILL the group if it lingers; then any process still naming
    this head's temp dir (only this module's head does) is killed by its id."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    left = subprocess.run(["pgrep", "-f", str(temp_dir)], capture_output=True, text=True).stdout.split()
    for pid in left:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    shutil.rmtree(temp_dir, ignore_errors=True)


def _non_loopback_ip() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


@pytest.mark.slow
def test_dashboard_listens_on_loopback_only_and_the_job_api_needs_the_token(head, tmp_path):
    assert head.http("/api/version")[0] == 401
    status, body = head.http("/api/jobs/", token=head.token)
    assert status == 200, body[:500]
    marker = tmp_path / "pwned"
    status, _ = head.http("/api/jobs/", data={"entrypoint": f"touch {marker}"})  # submit without the token
    assert status == 401
    status, _ = head.http("/api/jobs/", token="0" * 64, data={"entrypoint": f"touch {marker}"})  # a wrong one
    assert status == 403
    status, body = head.http("/api/jobs/", token=head.token)
    assert status == 200 and json.loads(body) == [], body[:500]  # nothing was submitted
    assert not marker.exists()
    ip = _non_loopback_ip()
    if ip is not None:  # the dashboard port is closed on the machine's network address
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((ip, int(head.dashboard.rsplit(":", 1)[1]))) != 0


@pytest.mark.slow
def test_ray_job_submit_runs_the_smoke_sweep_end_to_end(head, tmp_path):
    """Its trials give the bits of an in-process run of their configs although the head was
    started without the CPU code-path pins. The CI checkout has its virtualenv inside the repo (.ci/run makes `.venv`): the upload
    must leave it out (.gitignore), and .git too, or every job ships a gigabyte of torch."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=COPY_IGNORE)
    for planted in (".venv/lib/python3.11/site-packages/torch/big.bin", ".git/objects/pack/big.pack",
                    "experiments/old/trials.parquet", "runs/train-1/checkpoint.pt"):
        (src / planted).parent.mkdir(parents=True, exist_ok=True)
        (src / planted).write_bytes(os.urandom(2 << 20))
    storage = tmp_path / "shared"  # an absolute path every node sees (docs/cluster.md)
    job_id = f"tune-gems-smoke-{secrets.token_hex(4)}"
    small = [*TINY_SWEEP, "num_samples=2", "config.trainer.epochs=1"]
    res = head.ray(
        "job", "submit", "--address", head.dashboard, "--submission-id", job_id, "--working-dir", ".", "--",
        "tune-gems", "sweep", "sweeps/smoke.yaml", f"storage={storage}", "name=job", *small, cwd=src,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]

    status = head.ray("job", "status", "--address", head.dashboard, job_id)
    assert status.returncode == 0 and f"Job '{job_id}' succeeded" in status.stdout + status.stderr, status.stdout + status.stderr
    code, body = head.http(f"/api/jobs/{job_id}", token=head.token)
    assert code == 200 and json.loads(body)["status"] == "SUCCEEDED", body[:1000]

    exp = storage / "job"
    for name in ("spec.yaml", "optuna_journal.log", "trials.parquet", "history.parquet", "members.parquet"):
        assert (exp / name).is_file(), f"{name} missing from {exp}: {sorted(p.name for p in exp.iterdir())}"
    trials = pd.read_parquet(exp / "trials.parquet")
    assert len(trials) == 2 and set(trials["status"]) == {"TERMINATED"}
    assert f"results: {exp}" in res.stdout  # the job's own log, streamed back by `ray job submit`
    # the head's workers lack the CPU code-path pins the CLI and this test process have: each trial
    # pins them itself, so its bits equal an in-process run's here (on an AVX-512 machine ATen's
    # own choice would round differently)
    for trial_id in trials["trial_id"]:
        assert_trial_matches_uninterrupted(exp, trial_id)

    pkgs = [p for p in head.temp_dir.glob("session_2*/runtime_resources/working_dir_files/_ray_pkg_*") if p.is_dir()]
    assert len(pkgs) == 1, pkgs
    shipped = {p.name for p in pkgs[0].iterdir()}
    assert {"tune_gems", "sweeps", "pyproject.toml"} <= shipped
    assert not shipped & {".venv", ".git", "experiments", "runs"}, shipped
    size = sum(f.stat().st_size for f in pkgs[0].rglob("*") if f.is_file())
    assert size < 8 << 20, f"uploaded working dir is {size / 2**20:.1f} MiB"


def test_docs_keep_the_dashboard_on_loopback_and_explain_token_auth():
    text = DOCS.read_text()
    for needed in ("--dashboard-host 127.0.0.1", "RAY_AUTH_MODE=token", "ray job submit", "ssh -N -L 8265:127.0.0.1:8265", "--storage", "--resume"):
        assert needed in text, f"docs/cluster.md does not mention {needed!r}"
    for doc in [*REPO.glob("*.md"), *(REPO / "docs").glob("*.md")]:
        for bad in ("--dashboard-host 0.0.0.0", "--dashboard-host=0.0.0.0", "RAY_AUTH_MODE=disabled"):
            for line in doc.read_text().splitlines():
                assert bad not in line or "never" in line.lower() or "do not" in line.lower(), f"{doc.name}: {line}"
