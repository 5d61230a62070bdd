"""Background checkpoints on CUDA (tune_gems.trainer.async_checkpoint): the pinned-buffer
snapshot on a side stream holds the device state at snapshot time while the device keeps
changing it, the host is never blocked by it, buffers are reused, and a graph-captured run
resumed from a background checkpoint (taken in a worker thread, as in a Tune trial; or by a
SIGTERM'd `tune-gems train`) ends bit-identical to an uninterrupted one.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_checkpoint_gpu.py -q` (skipped without CUDA).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from tune_gems.config.load import load_config
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.trainer import Trainer
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.async_checkpoint import AsyncCheckpointWriter
from tune_gems.trainer.train_command import run_training

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

REPO = Path(__file__).resolve().parents[2]
BIG = 64 * 2**20
"""Elements of the test tensor (256 MiB of float32): its device-to-host copy takes milliseconds,
long enough for a missing stream dependency to show as a torn snapshot."""
SLEEP_CYCLES = 2_000_000_000
"""torch.cuda._sleep cycles: about a second of queued device work."""

SMALL = [
    "device=cuda",
    "kernels=cuda",
    "trainer.population=4",
    "trainer.epochs=3",
    "trainer.iterations_per_epoch=40",
    "trainer.batch_size=64",
    "trainer.n_envs=8",
    "trainer.replay_capacity=4096",
    "trainer.learning_starts=256",
    "trainer.target_update=16",
    "data.synthetic.n=2000",
    "gems.g6.mode=wire",
    "gems.g10.mode=wire",
    "gems.g12.mode=wire",
]


def _meta(epoch: int) -> dict:
    """A consistent checkpoint's meta (tune_gems.trainer.checkpoint.check_consistent: one history
    row per epoch 1..epoch)."""
    return {"epoch": epoch, "env_steps": 0, "updates": 0, "diverged": False, "prefilled": False,
            "history": [{"epoch": e} for e in range(1, epoch + 1)], "member_history": [], "config": {}}


def _canon(rows):
    return json.dumps([{k: v for k, v in r.items() if k not in ("sps", "train_s", "eval_s")} for r in rows], sort_keys=True)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.cpu(), b.cpu()
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def test_snapshot_holds_the_state_at_snapshot_time_while_the_device_changes_it(tmp_path):
    """Work queued before `save` is in the snapshot (the side stream waits for it), work queued
    after it is not (the training stream waits for the copy); `save` returns while the device
    is still busy (the host never waits for the copy)."""
    x = torch.zeros(BIG, device="cuda")
    n = torch.zeros((), dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    with AsyncCheckpointWriter() as writer:
        writer.save(tmp_path / "warm.pt", {"x": x, "n": n}, _meta(0))  # allocates the pinned buffers
        writer.wait()
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)  # the copy must wait for this and what follows
        x.fill_(1.0)
        n.fill_(1)
        writer.save(tmp_path / "a.pt", {"x": x, "n": n}, _meta(1))
        assert not torch.cuda.current_stream().query(), "save() waited for the device"
        x.fill_(2.0)  # training goes on at once, on the training stream
        n.fill_(2)
    state, meta = ckpt.load(tmp_path / "a.pt")
    assert meta["epoch"] == 1 and int(state["n"]) == 1
    assert bool((state["x"] == 1.0).all()), "the snapshot saw work queued before or after it wrongly"
    assert bool((x == 2.0).all()) and int(n) == 2


def test_pinned_buffers_are_reused_between_checkpoints(tmp_path):
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    with AsyncCheckpointWriter() as writer:
        writer.save(tmp_path / "1.pt", {"x": x}, _meta(1))
        buf = writer._buffers.buffers["x"]
        assert buf.is_pinned()
        x.add_(1)
        writer.save(tmp_path / "2.pt", {"x": x}, _meta(2))
        assert writer._buffers.buffers["x"].data_ptr() == buf.data_ptr()
    assert torch.equal(ckpt.load(tmp_path / "1.pt")[0]["x"], torch.arange(1000, dtype=torch.float32))
    assert torch.equal(ckpt.load(tmp_path / "2.pt")[0]["x"], torch.arange(1000, dtype=torch.float32) + 1)


def test_background_checkpoint_in_a_worker_thread_equals_a_synchronous_one_and_resumes_exactly(tmp_path):
    """As in a Tune trial: the trainer runs (graph captured) in a worker thread; after epoch 1
    a background checkpoint is taken and training goes straight on. The file equals a
    synchronous checkpoint taken at the same point, and a trainer resumed from it ends
    bit-identical to the run that never stopped."""
    cfg = load_config(None, SMALL)
    box: dict = {}

    def work() -> None:
        full = Trainer(cfg, log=None)
        full.run_epoch()
        with AsyncCheckpointWriter() as writer:
            writer.save(tmp_path / "async.pt", *full.checkpoint_payload())
            full.save_checkpoint(tmp_path / "sync.pt")  # reads the same state (it waits for the copy)
            train_epochs(full)  # the write overlaps with training
        box["full"] = full

    t = threading.Thread(target=work)
    t.start()
    t.join()
    full = box["full"]
    assert full.runner.captured
    a, am = ckpt.load(tmp_path / "async.pt")
    s, sm = ckpt.load(tmp_path / "sync.pt")
    assert am["epoch"] == sm["epoch"] == 1 and _canon(am["history"]) == _canon(sm["history"])
    assert set(a) == set(s) and all(_same(a[k], s[k]) for k in a), [k for k in a if not _same(a[k], s[k])]

    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "async.pt")
    train_epochs(resumed)
    assert _canon(resumed.history) == _canon(full.history)
    assert _canon(resumed.member_history) == _canon(full.member_history)
    live = {k: v.detach().clone() for k, v in full.learner.state_tensors().items()}
    for k, v in resumed.learner.state_tensors().items():
        assert _same(v, live[k]), k


def test_sigterm_on_train_on_cuda_then_resume_equals_uninterrupted(tmp_path):
    """`tune-gems train` on CUDA, SIGTERM during the first epoch: exit 143 with a checkpoint at
    an epoch boundary; `--resume` ends with the member rows of an uninterrupted run."""
    ref = tmp_path / "ref"
    run_training(load_config(None, SMALL), ref, progress=False)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "tune_gems", "train", *SMALL, "--out", str(out)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "config.yaml").is_file() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, "the run ended before it could be signalled"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert 1 <= ckpt.load(out / "checkpoint.pt")[1]["epoch"] < 3
    resumed = subprocess.run([sys.executable, "-m", "tune_gems", "train", "--out", str(out), "--resume"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    pd.testing.assert_frame_equal(pd.read_csv(out / "members.csv"), pd.read_csv(ref / "members.csv"))
