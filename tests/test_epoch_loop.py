"""The epoch loop's order (tune_gems.trainer.epoch_loop): the next epoch queued before the
report, the snapshot before the queue, and the same reports, checkpoints and bits whether an
epoch is queued ahead or not (on the CPU, where queuing an epoch runs it, forced on)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from learner_fixtures import WALL_CLOCK, bits_equal, canon, tiny_config
from test_checkpoint_async import FakeTune
from tune_gems.contracts.result_files import CHECKPOINT_FILE, CHECKPOINT_HISTORY_FILE
from tune_gems.sweep import trainable
from tune_gems.trainer import checkpoint as ckpt
from tune_gems.trainer.epoch_loop import train_epochs
from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.run_setup import load_run_prices
from tune_gems.trainer.train_command import run_training
from tune_gems.trainer.trainer import Trainer


class RecordingTrainer:
    """A trainer stand-in whose epochs are queued and finished apart; records every call and
    refuses a checkpoint while an epoch is queued, as Trainer does."""

    def __init__(self, epochs: int, queues_ahead: bool) -> None:
        self.cfg = tiny_config(f"trainer.epochs={epochs}", "trainer.checkpoint_every=2", "trainer.checkpoint_interval_s=0")
        self.epoch, self.queues_ahead, self.calls = 0, queues_ahead, []
        self._queued: int | None = None

    @property
    def done(self) -> bool:
        return self.epoch >= self.cfg.trainer.epochs

    @property
    def epoch_queued(self) -> bool:
        return self._queued is not None

    def begin_epoch(self) -> None:
        assert self._queued is None and not self.done
        self._queued = self.epoch + 1
        self.calls.append(("begin", self._queued))

    def finish_epoch(self) -> EpochResult:
        self.epoch, self._queued = self._queued, None
        self.calls.append(("finish", self.epoch))
        return EpochResult({"epoch": self.epoch})

    def run_epoch(self) -> EpochResult:
        self.begin_epoch()
        return self.finish_epoch()

    def checkpoint_payload(self) -> int:
        if self._queued is not None:
            raise RuntimeError("checkpoint while an epoch is queued")
        return self.epoch


def _hooks(t: RecordingTrainer):
    def at_boundary(result: EpochResult, due: bool) -> None:
        t.calls.append(("snapshot" if due else "boundary", result.metrics["epoch"], t.checkpoint_payload() if due else None))

    def on_epoch(result: EpochResult, due: bool) -> None:
        t.calls.append(("report", result.metrics["epoch"], due))

    return at_boundary, on_epoch


def test_the_next_epoch_is_queued_after_the_snapshot_and_before_the_report():
    t = RecordingTrainer(3, queues_ahead=True)
    at_boundary, on_epoch = _hooks(t)
    assert train_epochs(t, on_epoch, at_boundary=at_boundary) is False
    assert t.calls == [
        ("begin", 1), ("finish", 1), ("boundary", 1, None), ("begin", 2), ("report", 1, False),
        ("finish", 2), ("snapshot", 2, 2), ("begin", 3), ("report", 2, True),
        ("finish", 3), ("snapshot", 3, 3), ("report", 3, True),  # done: nothing queued after the last
    ]


def test_without_queuing_ahead_each_epoch_is_reported_before_the_next_starts():
    t = RecordingTrainer(3, queues_ahead=True)
    at_boundary, on_epoch = _hooks(t)
    train_epochs(t, on_epoch, at_boundary=at_boundary, queue_ahead=False)
    assert [c[:2] for c in t.calls] == [
        ("begin", 1), ("finish", 1), ("boundary", 1), ("report", 1),
        ("begin", 2), ("finish", 2), ("snapshot", 2), ("report", 2),
        ("begin", 3), ("finish", 3), ("snapshot", 3), ("report", 3),
    ]
    plain = RecordingTrainer(3, queues_ahead=False)  # the trainer's own default (the CPU's)
    boundary, report = _hooks(plain)
    train_epochs(plain, report, at_boundary=boundary)
    assert [c[:2] for c in plain.calls] == [c[:2] for c in t.calls]


def test_a_stop_queues_nothing_more_and_checkpoints_its_epoch():
    t = RecordingTrainer(5, queues_ahead=True)
    at_boundary, on_epoch = _hooks(t)
    assert train_epochs(t, on_epoch, stop=lambda: t.epoch == 1, at_boundary=at_boundary) is True
    assert t.calls == [("begin", 1), ("finish", 1), ("snapshot", 1, 1), ("report", 1, True)]


def test_a_report_that_raises_leaves_the_queued_epoch_unfinished():
    """Tune ends a stopped trial's thread inside its report (SystemExit): the loop ends there,
    the queued epoch is never finished, nothing after it is reported."""
    t = RecordingTrainer(5, queues_ahead=True)
    at_boundary, _ = _hooks(t)

    def on_epoch(result: EpochResult, due: bool) -> None:
        t.calls.append(("report", result.metrics["epoch"], due))
        if result.metrics["epoch"] == 2:
            raise SystemExit(0)

    with pytest.raises(SystemExit):
        train_epochs(t, on_epoch, at_boundary=at_boundary)
    assert t.calls[-2:] == [("begin", 3), ("report", 2, True)] and t.epoch_queued and t.epoch == 2


def test_the_trainer_refuses_a_checkpoint_while_an_epoch_is_queued():
    t = Trainer(tiny_config("trainer.epochs=2"), log=None)
    t.begin_epoch()
    with pytest.raises(RuntimeError, match="queued"):
        t.checkpoint_payload()
    with pytest.raises(RuntimeError, match="already queued"):
        t.begin_epoch()
    t.finish_epoch()
    assert t.epoch == 1 and t.checkpoint_payload()[1]["epoch"] == 1


# -- the real trainer with queuing forced on (CPU): the same reports, checkpoints and bits --------------


@pytest.fixture
def queue_ahead(monkeypatch):
    def force(on: bool) -> None:
        monkeypatch.setattr(Trainer, "queues_ahead", property(lambda self: on))

    return force


class StoppingTune(FakeTune):
    """Tune stopping the trial after the report of `stop_epoch` (as ASHA does): that report is
    recorded, then the trial's thread ends inside it (SystemExit, as Ray's session does)."""

    def __init__(self, store: Path, stop_epoch: int) -> None:
        super().__init__(store)
        self.stop_epoch = stop_epoch

    def report(self, metrics: dict, checkpoint=None) -> None:
        super().report(metrics, checkpoint)
        if metrics["epoch"] == self.stop_epoch:
            raise SystemExit(0)


def _trial(monkeypatch, folder: Path, fake: FakeTune, base: dict) -> list[tuple[dict, dict | None]]:
    """Run train_trial against `fake`; each report's metrics (wall clock aside) with its
    checkpoint's contents (state tensors, history, files) or None."""
    monkeypatch.setattr(trainable, "tune", fake)
    monkeypatch.setattr(trainable, "placement", lambda: {})
    try:
        trainable.train_trial({}, base=base, prices=load_run_prices(tiny_config()), objective="val_sharpe_mean")
    except SystemExit:
        pass
    out = []
    for metrics, kept in fake.reports:
        seen = {k: v for k, v in metrics.items() if k not in (*WALL_CLOCK, "health_diag")}
        files = None
        if kept is not None:
            saved = json.loads((kept / CHECKPOINT_HISTORY_FILE).read_text())
            files = {"history": canon(saved["history"]), "members": canon(saved["members"]),
                     "names": sorted(p.name for p in kept.iterdir())}
            if (kept / CHECKPOINT_FILE).is_file():
                state, meta = ckpt.load(kept / CHECKPOINT_FILE)
                files["state"], files["epoch"] = state, meta["epoch"]
        out.append((seen, files))
    members = sorted(p.name for p in (fake.trial_folder / "members").iterdir())
    return out + [({"member files": members}, None)]


def _same_reports(a, b) -> None:
    assert len(a) == len(b)
    for (ma, fa), (mb, fb) in zip(a, b):
        assert json.dumps(ma, sort_keys=True) == json.dumps(mb, sort_keys=True)
        assert (fa is None) == (fb is None)
        if fa is not None:
            assert {k: v for k, v in fa.items() if k != "state"} == {k: v for k, v in fb.items() if k != "state"}
            assert ("state" in fa) == ("state" in fb)
            for k, v in fa.get("state", {}).items():
                assert bits_equal(v, fb["state"][k]), k


BASE = ("trainer.epochs=5", "trainer.iterations_per_epoch=3", "trainer.checkpoint_every=2", "trainer.checkpoint_interval_s=0")


@pytest.mark.parametrize("stop_epoch", [None, 3])
def test_a_trial_queuing_ahead_reports_and_checkpoints_what_a_plain_one_does(tmp_path, monkeypatch, queue_ahead, stop_epoch):
    """Epochs queued ahead (forced on here) against the plain loop: the same reports in the same
    order, the same checkpoints (state tensors bit for bit, history, files), the same member files;
    with Tune stopping the trial after epoch 3's report, what was reported and checkpointed up to
    it is the plain loop's (the queued epoch 4 is discarded)."""
    base = tiny_config(*BASE).to_dict()
    runs, begun = {}, []
    real_begin = Trainer.begin_epoch

    def begin(self):
        begun.append(self.epoch + 1)
        real_begin(self)

    monkeypatch.setattr(Trainer, "begin_epoch", begin)
    for ahead in (False, True):
        queue_ahead(ahead)
        folder = tmp_path / str(ahead)
        folder.mkdir()
        fake = FakeTune(folder) if stop_epoch is None else StoppingTune(folder, stop_epoch)
        begun.clear()
        runs[ahead] = _trial(monkeypatch, folder, fake, base)
        # queued ahead, epoch 4 was started before Tune stopped the trial at epoch 3's report
        assert begun == ([1, 2, 3, 4, 5] if stop_epoch is None else [1, 2, 3, 4] if ahead else [1, 2, 3])
    _same_reports(runs[False], runs[True])
    epochs = [m["epoch"] for m, _ in runs[True][:-1]]
    assert epochs == ([1, 2, 3, 4, 5] if stop_epoch is None else [1, 2, 3])


def test_train_queuing_ahead_writes_the_plain_runs_tables_and_checkpoint(tmp_path, queue_ahead):
    cfg = tiny_config(*BASE)
    outs = {}
    for ahead in (False, True):
        queue_ahead(ahead)
        outs[ahead] = tmp_path / str(ahead)
        run_training(cfg, outs[ahead], progress=False)
    history = [pd.read_csv(outs[x] / "history.csv").drop(columns=list(WALL_CLOCK)) for x in (False, True)]
    pd.testing.assert_frame_equal(*history)
    assert (outs[False] / "members.csv").read_bytes() == (outs[True] / "members.csv").read_bytes()
    (sa, ma), (sb, mb) = (ckpt.load(outs[x] / CHECKPOINT_FILE) for x in (False, True))
    assert ma["epoch"] == mb["epoch"] == 5 and canon(ma["history"]) == canon(mb["history"])
    assert sa.keys() == sb.keys() and all(bits_equal(v, sb[k]) for k, v in sa.items())
