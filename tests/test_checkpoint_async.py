"""Cheap checkpoints and a quiet console (docs/checkpoints.md): the background writer (order,
no buffer overwritten while written, atomic files, snapshots isolated from later training),
exact resume from a background checkpoint, the time-based schedule, SIGTERM/SIGINT on
`tune-gems train`, checkpoints in a Tune trial (held reports), and the sweep console."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from learner_fixtures import assert_same_run, tiny_config
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli as sweep_cli, ray_address  # noqa: F401 (fixture)
from tune_gems.commands import cli
from tune_gems.config.load import build_config, load_config
from tune_gems.contracts.result_files import CHECKPOINT_FILE, CHECKPOINT_HISTORY_FILE
from tune_gems.sweep import console, trainable
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.async_checkpoint import AsyncCheckpointWriter, snapshot_meta
from tune_gems.trainer.epoch_loop import CheckpointSchedule, train_epochs
from tune_gems.trainer.train_command import resume_config, run_training
from tune_gems.trainer.run_setup import load_run_prices
from tune_gems.trainer.trainer import RESUMABLE_CHANGES, Trainer

from cluster_fixtures import wait_for
from test_bad_input import TRAIN_TINY

HOLD_S = 0.3
"""How long a test lets a thread that must stay blocked run before checking it did."""


def _meta(epoch: int, history: list | None = None) -> dict:
    return {"epoch": epoch, "env_steps": 0, "updates": 0, "diverged": False, "prefilled": False,
            "history": history if history is not None else [{"epoch": e} for e in range(1, epoch + 1)], "member_history": [], "config": {}}


class GatedSave:
    """A save function that waits for `gate` before reading its tensors, and records what it wrote."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.written: list[tuple[Path, dict, dict]] = []

    def __call__(self, path, state, meta) -> None:
        self.started.set()
        assert self.gate.wait(60)
        self.written.append((Path(path), {k: v.clone() for k, v in state.items()}, copy.deepcopy(meta)))
        ckpt.save(path, state, meta)


# -- the writer ------------------------------------------------------------------------------


def test_a_snapshot_is_isolated_from_training_after_it(tmp_path):
    """Tensors and history changed after `save` returns do not reach the file being written."""
    save = GatedSave()
    live = {"w": torch.zeros(4), "n": torch.tensor(3)}
    history = [{"epoch": 1, "x": 0.5}]
    with AsyncCheckpointWriter(save=save) as writer:
        writer.save(tmp_path / "a.pt", live, _meta(1, history))
        live["w"].add_(1.0)  # training goes on while the file is written
        live["n"].fill_(7)
        history[0]["x"] = 9.0
        history.append({"epoch": 2, "x": 1.0})
        save.gate.set()
    state, meta = ckpt.load(tmp_path / "a.pt")
    assert torch.equal(state["w"], torch.zeros(4)) and int(state["n"]) == 3
    assert meta["history"] == [{"epoch": 1, "x": 0.5}]


def test_writes_happen_in_order_and_a_snapshot_waits_for_the_write_in_flight(tmp_path):
    """The host buffers are reused: the second snapshot must not fill them while the first is
    still being serialised; the files come out in the order of the calls."""
    save = GatedSave()
    live = {"w": torch.full((3,), 1.0)}
    writer = AsyncCheckpointWriter(save=save)
    try:
        writer.save(tmp_path / "1.pt", live, _meta(1))
        assert save.started.wait(60) and writer.busy
        live["w"].fill_(2.0)
        second = threading.Thread(target=writer.save, args=(tmp_path / "2.pt", live, _meta(2)))
        second.start()
        second.join(HOLD_S)
        assert second.is_alive(), "the second snapshot did not wait for the write in flight"
        save.gate.set()
        second.join(60)
        writer.wait()
    finally:
        save.gate.set()
        writer.close()
    assert [p.name for p, _, _ in save.written] == ["1.pt", "2.pt"]
    assert torch.equal(save.written[0][1]["w"], torch.full((3,), 1.0))
    assert torch.equal(save.written[1][1]["w"], torch.full((3,), 2.0))
    assert [m["epoch"] for _, _, m in save.written] == [1, 2]


def test_the_checkpoint_file_is_replaced_atomically(tmp_path, monkeypatch):
    """While a new checkpoint is being written, the path holds the previous one, whole."""
    path = tmp_path / "checkpoint.pt"
    ckpt.save(path, {"w": torch.zeros(2)}, _meta(1))
    real_save, gate, in_tmp = torch.save, threading.Event(), threading.Event()

    def slow_save(obj, f, *a, **k):
        real_save(obj, f, *a, **k)
        in_tmp.set()
        assert gate.wait(60)

    monkeypatch.setattr(torch, "save", slow_save)
    with AsyncCheckpointWriter() as writer:
        writer.save(path, {"w": torch.ones(2)}, _meta(2))
        assert in_tmp.wait(60)
        assert path.with_name(path.name + ".tmp").is_file()
        assert ckpt.load(path)[1]["epoch"] == 1  # the old one, complete
        gate.set()
    state, meta = ckpt.load(path)
    assert meta["epoch"] == 2 and torch.equal(state["w"], torch.ones(2))
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_failed_write_raises_at_the_next_call(tmp_path):
    def broken(path, state, meta):
        raise OSError("disk full")

    writer = AsyncCheckpointWriter(save=broken)
    writer.save(tmp_path / "a.pt", {"w": torch.zeros(1)}, _meta(1))
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    writer.close()


def test_snapshot_meta_copies_rows_and_nested_mappings():
    meta = {"history": [{"a": 1}], "config": {"trainer": {"lr": 0.1}}, "epoch": 3}
    snap = snapshot_meta(meta)
    meta["history"][0]["a"] = 2
    meta["history"].append({"a": 3})
    meta["config"]["trainer"]["lr"] = 1.0
    assert snap == {"history": [{"a": 1}], "config": {"trainer": {"lr": 0.1}}, "epoch": 3}


# -- the schedule ----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    "interval_s, every, steps, want",
    [
        # (seconds elapsed before each epoch boundary), whether a checkpoint is due there
        (10.0, 0, [4, 4, 4, 4, 12], [False, False, True, False, True]),  # timed from the last checkpoint
        (0.0, 2, [50, 50, 50, 50], [False, True, False, True]),  # epochs only
        (10.0, 3, [1, 1, 1, 20], [False, False, True, True]),  # either trigger
        (0.0, 0, [1000, 1000, 1000], [False, False, False]),  # only at the end
    ],
)
def test_checkpoint_schedule(interval_s, every, steps, want):
    clock = FakeClock()
    schedule = CheckpointSchedule(interval_s, every, clock)
    got = []
    for epoch, dt in enumerate(steps, start=1):
        clock.t += dt
        got.append(schedule.due(epoch, final=False))
    assert got == want
    assert schedule.due(len(steps) + 1, final=True)


def test_train_epochs_checkpoints_on_the_clock_and_at_the_end():
    """The epoch loop with a trainer stand-in whose epochs take 6 s of a fake clock."""
    clock, due = FakeClock(), []
    trainer = types.SimpleNamespace(epoch=0, cfg=tiny_config("trainer.epochs=4", "trainer.checkpoint_interval_s=10"),
                                    queues_ahead=False, epoch_queued=False)
    trainer.done = False

    def run_epoch():
        clock.t += 6.0
        trainer.epoch += 1
        trainer.done = trainer.epoch >= 4

    trainer.run_epoch = run_epoch
    assert train_epochs(trainer, lambda _r, d: due.append(d), clock=clock) is False
    assert due == [False, True, False, True]  # 12 s after the start (>= 10), then the end

    trainer.epoch, trainer.done, due[:] = 0, False, []
    assert train_epochs(trainer, lambda _r, d: due.append(d), stop=lambda: trainer.epoch == 2, clock=clock) is True
    assert due == [False, True]  # a stop request: a checkpoint at that boundary, then the loop ends


# -- exact resume from a background checkpoint ----------------------------------------------


def test_resume_from_a_background_checkpoint_equals_the_uninterrupted_run(tmp_path):
    """The checkpoint is written while the same trainer trains on to the end (the reference):
    a trainer resumed from it ends bit-identical."""
    cfg = tiny_config("gems.g10.mode=wire", "trainer.epochs=2")
    full = Trainer(cfg, log=None)
    full.run_epoch()
    save = GatedSave()
    with AsyncCheckpointWriter(save=save) as writer:
        writer.save(tmp_path / "ck.pt", *full.checkpoint_payload())
        full.run_epoch()  # the write is held back until training moved on (to the end)
        save.gate.set()

    resumed = Trainer(cfg, log=None)
    resumed.load_checkpoint(tmp_path / "ck.pt")
    assert resumed.epoch == 1
    train_epochs(resumed)
    assert_same_run(resumed, full)


# -- tune-gems train: SIGTERM / SIGINT, config ------------------------------------------------

EPOCHS = 3
LONG = [*TRAIN_TINY, f"trainer.epochs={EPOCHS}", "trainer.iterations_per_epoch=20"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pd.DataFrame:
    """members.csv of an uninterrupted run of LONG (in-process)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    run_training(load_config(None, LONG), out, progress=False)
    return pd.read_csv(out / "members.csv")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_train_at_an_epoch_boundary_and_resume_equals_uninterrupted(tmp_path, reference, sig):
    """The signal arrives during the first epoch: that epoch ends, its checkpoint is written
    synchronously, the command exits 128 + signal; `--resume` ends identical to a run that was
    never stopped."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "tune_gems", "train", *LONG, "--out", str(out)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: (out / "config.yaml").is_file() or p.poll() is not None, 120, "config.yaml")
        assert p.poll() is None, "the run ended before it could be signalled"
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + sig, err[-2000:]
    assert f"stopped by {signal.Signals(sig).name} after epoch" in err and "--resume" in err, err[-2000:]
    _, meta = ckpt.load(out / "checkpoint.pt")
    assert 1 <= meta["epoch"] < EPOCHS and not (out / "summary.json").exists()
    assert pd.read_csv(out / "members.csv")["epoch"].max() == meta["epoch"]

    assert cli.main(["train", "--out", str(out), "--resume"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "members.csv"), reference)
    assert ckpt.load(out / "checkpoint.pt")[1]["epoch"] == EPOCHS  # always one at the end


@pytest.mark.parametrize("value, fragment", [("-1", "greater than or equal to 0"), (".nan", "finite"), ("soon", "valid number")])
def test_a_bad_checkpoint_interval_is_one_line_naming_the_field(tmp_path, capsys, value, fragment):
    code = cli.main(["train", *TRAIN_TINY, f"trainer.checkpoint_interval_s={value}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "trainer.checkpoint_interval_s" in err and fragment in err, err
    assert not (tmp_path / "run").exists()


def test_resume_may_change_the_checkpoint_interval(tmp_path):
    out = tmp_path / "run"
    run_training(load_config(None, TRAIN_TINY), out, progress=False)
    cfg = resume_config(out, None, ["trainer.checkpoint_interval_s=5", "trainer.checkpoint_every=2"])
    assert cfg.trainer.checkpoint_interval_s == 5 and cfg.trainer.checkpoint_every == 2


@pytest.mark.skipif("trainer.checkpoint_interval_s" not in RESUMABLE_CHANGES,
                    reason="needs trainer.checkpoint_interval_s in trainer.RESUMABLE_CHANGES (checkpoint compatibility)")
def test_a_checkpoint_loads_under_another_checkpoint_interval(tmp_path):
    out = tmp_path / "run"
    run_training(load_config(None, [*TRAIN_TINY, "trainer.epochs=2"]), out, progress=False)
    assert cli.main(["train", "--out", str(out), "--resume", "trainer.epochs=3", "trainer.checkpoint_interval_s=1"]) == 0
    assert ckpt.load(out / "checkpoint.pt")[1]["epoch"] == 3


# -- a Tune trial's checkpoints (held reports), without Ray -----------------------------------


class FakeTune:
    """What train_trial uses of `ray.tune`: reports are recorded, a reported checkpoint's files
    copied at report time (as Tune persists them), `get_checkpoint` returns `restore_from`."""

    def __init__(self, store: Path, restore_from: Path | None = None) -> None:
        self.store, self.restore_from, self.reports = store, restore_from, []
        self.trial_folder = store / "trial"

    def get_context(self):
        """The trial's storage (its folder on the local filesystem: tune_gems.sweep.trial_files) and resources."""
        import pyarrow.fs as pafs
        from ray.tune.execution.placement_groups import PlacementGroupFactory

        storage = types.SimpleNamespace(storage_filesystem=pafs.LocalFileSystem(), trial_fs_path=str(self.trial_folder))
        return types.SimpleNamespace(get_storage=lambda: storage, get_trial_resources=lambda: PlacementGroupFactory([{"CPU": 1}]))

    class Checkpoint:
        def __init__(self, path: str) -> None:
            self.path = path

        @classmethod
        def from_directory(cls, path: str) -> "FakeTune.Checkpoint":
            return cls(path)

        def as_directory(self):
            import contextlib

            return contextlib.nullcontext(self.path)

    def report(self, metrics: dict, checkpoint=None) -> None:
        kept = None
        if checkpoint is not None:
            kept = self.store / f"checkpoint_{len(self.reports):06d}"
            shutil.copytree(checkpoint.path, kept)
        self.reports.append((metrics, kept))

    def get_checkpoint(self):
        return None if self.restore_from is None else self.Checkpoint(str(self.restore_from))


def _run_trial(monkeypatch, tmp_path: Path, base: dict, restore_from: Path | None = None) -> FakeTune:
    fake = FakeTune(tmp_path, restore_from)
    monkeypatch.setattr(trainable, "tune", fake)
    monkeypatch.setattr(trainable, "placement", lambda: {"node_id": "n", "gpu_ids": ""})
    (tmp_path.parent / "tmp").mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path.parent / "tmp"))
    prices = load_run_prices(build_config(base))
    trainable.train_trial({}, base=base, prices=prices, objective="val_sharpe_mean")
    return fake


def test_a_trial_reports_in_epoch_order_with_each_checkpoint_on_its_own_epoch(tmp_path, monkeypatch):
    """checkpoint_every=2 of 5 epochs: checkpoints at epochs 2, 4 and 5 (the end), each attached
    to the report of the epoch it holds, with the history up to it; a retry from the epoch-2
    checkpoint reports epochs 3..5 identical to the first run."""
    base = tiny_config("trainer.epochs=5", "trainer.iterations_per_epoch=3", "trainer.checkpoint_every=2",
                       "trainer.checkpoint_interval_s=0").to_dict()
    (tmp_path / "a").mkdir()
    first = _run_trial(monkeypatch, tmp_path / "a", base)
    assert [m["epoch"] for m, _ in first.reports] == [1, 2, 3, 4, 5]
    with_ckpt = [(m["epoch"], d) for m, d in first.reports if d is not None]
    assert [e for e, _ in with_ckpt] == [2, 4, 5]
    for epoch, d in with_ckpt:
        saved = json.loads((d / CHECKPOINT_HISTORY_FILE).read_text())
        assert [h["epoch"] for h in saved["history"]] == list(range(1, epoch + 1))
        if epoch < 5:
            assert ckpt.load(d / CHECKPOINT_FILE)[1]["epoch"] == epoch and not trainable.finished_checkpoint(d)
        else:  # the final checkpoint: nothing resumes from it, so no training state
            assert not (d / CHECKPOINT_FILE).exists() and trainable.finished_checkpoint(d)
    # the member rows went to the trial's own files, one per epoch, not into the reports
    members_dir = tmp_path / "a" / "trial" / "members"
    assert sorted(p.name for p in members_dir.iterdir()) == [f"epoch-{e:06d}.json" for e in range(1, 6)]
    assert not any("members_json" in m or "baselines_json" in m for m, _ in first.reports)
    # the temporary checkpoint folders are gone (torch may keep its own compile cache, torchinductor_<user>, under TMPDIR)
    assert not [p for p in (tmp_path / "tmp").iterdir() if not p.name.startswith("torchinductor_")]

    (tmp_path / "b").mkdir()
    retry = _run_trial(monkeypatch, tmp_path / "b", base, restore_from=with_ckpt[0][1])
    assert [m["epoch"] for m, _ in retry.reports] == [3, 4, 5]
    wall = {"sps", "train_s", "eval_s", "health_diag"}  # the HEALTH_DIAG line prints sps

    def same(m):
        return {k: v for k, v in m.items() if k not in wall and k not in ("baselines_json", "folds_json", "histories_json")}  # sent with a process's first report

    for a, b in zip(first.reports[2:], retry.reports):
        assert json.dumps(same(a[0]), sort_keys=True) == json.dumps(same(b[0]), sort_keys=True)


def test_a_trial_that_fails_still_hands_its_last_checkpoint_to_tune(tmp_path, monkeypatch):
    """An epoch that raises after a checkpoint epoch: the held report and its checkpoint reach
    Tune before the error, so the retry starts there."""
    base = tiny_config("trainer.epochs=3", "trainer.iterations_per_epoch=3", "trainer.checkpoint_every=1",
                       "trainer.checkpoint_interval_s=0").to_dict()
    real = Trainer.run_epoch

    def failing(self):
        if self.epoch == 2:
            raise RuntimeError("node lost")
        return real(self)

    monkeypatch.setattr(Trainer, "run_epoch", failing)
    fake = FakeTune(tmp_path)
    monkeypatch.setattr(trainable, "tune", fake)
    monkeypatch.setattr(trainable, "placement", lambda: {})
    prices = load_run_prices(tiny_config())
    with pytest.raises(RuntimeError, match="node lost"):
        trainable.train_trial({}, base=base, prices=prices, objective="val_sharpe_mean")
    assert [(m["epoch"], d is not None) for m, d in fake.reports] == [(1, True), (2, True)]


# -- the quiet console ------------------------------------------------------------------------


def test_quiet_loggers_and_verbose():
    lg = logging.getLogger(console.DRIVER_LOGGERS[0])
    before = lg.level
    with console.quiet_driver(verbose=False):
        assert not lg.isEnabledFor(logging.WARNING) and lg.isEnabledFor(logging.ERROR)
        # the "both result.json and progress.csv were not found" warning after a resume
        assert not logging.getLogger("ray.tune.analysis.experiment_analysis").isEnabledFor(logging.WARNING)
    assert lg.level == before
    with console.quiet_driver(verbose=True):
        assert lg.level == before
    trial = logging.getLogger(console.TRIAL_LOGGERS[0])
    keep = trial.level
    try:
        console.quiet_trial(verbose=True)
        assert trial.level == keep
        console.quiet_trial(verbose=False)
        assert not trial.isEnabledFor(logging.INFO) and trial.isEnabledFor(logging.WARNING)
    finally:
        trial.setLevel(keep)
    args = cli.build_parser().parse_args(["sweep", "spec.yaml", "--verbose"])
    assert args.verbose and not cli.build_parser().parse_args(["sweep", "spec.yaml"]).verbose


@pytest.mark.slow
def test_sweep_console_is_quiet_by_default(tmp_path, ray_address):
    """One small sweep through the CLI, a checkpoint every epoch: no per-checkpoint lines, no
    experiment-snapshot warnings, no Tune status tables or result dumps; HEALTH_DIAG lines
    (prefixed with the trial id) and tune-gems' status line per finished trial stay."""
    res = sweep_cli("sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "quiet", *TINY_SWEEP,
                    "num_samples=1", "design=none", "objective.metric=val_sharpe_mean", "config.trainer.epochs=3",
                    "config.trainer.checkpoint_every=1", env={"RAY_ADDRESS": ray_address})
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-3000:]
    assert "] HEALTH_DIAG epoch=3" in text and "tune-gems sweep: trial 1/1 finished: " in text
    assert "Trial status" not in text and "completed after" not in text
    assert "Checkpoint successfully created" not in text
    assert "Experiment state snapshotting" not in text and "Saving the experiment state" not in text
    history = pd.read_parquet(tmp_path / "quiet" / "history.parquet")
    assert history["epoch"].tolist() == [1, 2, 3]
