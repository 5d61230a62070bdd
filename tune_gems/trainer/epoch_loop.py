"""The one epoch loop of `tune-gems train`, a sweep's trial and a confirmation, with its checkpoint
schedule. Two callbacks, because on CUDA the loop queues the next epoch between them: the snapshot
of epoch e (`at_boundary`) is taken before e+1 is queued, then the GPU trains e+1 while the host
reports e (`on_epoch`; docs/checkpoints.md "The next epoch queued before the report"). On the CPU
queuing runs the epoch, so nothing is queued ahead there."""

from __future__ import annotations

import time
from typing import Callable

from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.trainer import Trainer

EpochHook = Callable[[EpochResult, bool], None]


class CheckpointSchedule:
    """When a checkpoint is due at an epoch boundary: `checkpoint_interval_s` after the last one,
    every `checkpoint_every` epochs, and at the end or when stopping (0 turns a trigger off)."""

    def __init__(self, interval_s: float, every: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self.every, self._clock = interval_s, every, clock
        self._last = clock()

    def due(self, epoch: int, final: bool) -> bool:
        now = self._clock()
        timed = self.interval_s > 0 and now - self._last >= self.interval_s
        periodic = self.every > 0 and epoch % self.every == 0
        if final or timed or periodic:
            self._last = now
            return True
        return False


def train_epochs(trainer: Trainer, on_epoch: EpochHook | None = None, stop: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic, *, at_boundary: EpochHook | None = None,
        queue_ahead: bool | None = None) -> bool:
    """Run epochs until the trainer is done. After each: `at_boundary(result, due)` (work that must
    see this epoch's device state), then with `queue_ahead` (default `trainer.queues_ahead`) the
    next epoch is queued, then `on_epoch(result, due)` (work that may block the host). `stop()` is
    asked at each boundary: then the checkpoint is due, nothing is queued and the loop ends. Returns
    whether it stopped early. If `on_epoch` raises, a queued epoch is discarded with the trainer."""
    tc = trainer.cfg.trainer
    ahead = trainer.queues_ahead if queue_ahead is None else queue_ahead
    schedule = CheckpointSchedule(tc.checkpoint_interval_s, tc.checkpoint_every, clock)
    while not trainer.done:
        result = trainer.finish_epoch() if trainer.epoch_queued else trainer.run_epoch()
        stopping = stop is not None and stop() and not trainer.done
        due = schedule.due(trainer.epoch, final=trainer.done or stopping)
        if at_boundary is not None:
            at_boundary(result, due)
        if ahead and not trainer.done and not stopping:
            trainer.begin_epoch()
        if on_epoch is not None:
            on_epoch(result, due)
        if stopping:
            return True
    return False
