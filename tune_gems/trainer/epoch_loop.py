"""The one epoch loop (`train`, a sweep's trial, a confirmation) and its checkpoint schedule. On
CUDA it queues epoch e+1 between its two callbacks, so the GPU trains while the host reports e
(docs/checkpoints.md "The next epoch queued before the report")."""

from __future__ import annotations

import time
from typing import Callable

from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.trainer import Trainer

EpochHook = Callable[[EpochResult, bool], None]


class CheckpointSchedule:
    """When a checkpoint is due: after `checkpoint_interval_s`, every `checkpoint_every`, at the end."""

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
    """Run epochs until done, calling `at_boundary(result, due)` before the next is queued and then
    `on_epoch(result, due)`; a true `stop()` makes the checkpoint due and ends the loop."""
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
