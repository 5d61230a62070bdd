"""The epoch loop (the one there is) of `tune-gems train`, of a sweep's trial and of a
confirmation, with the schedule of its checkpoints.

Why the loop has two callbacks: at an epoch's boundary some work must see the device state of
that epoch (a checkpoint's snapshot), and some work may block the host for long (Tune's
`tune.report` waits until the driver has run every callback; files). On CUDA the host only
enqueues an epoch's iterations, so the loop queues the next epoch between the two: the GPU
trains epoch e+1 while the host reports epoch e (docs/checkpoints.md, "The next epoch queued
before the report"). The snapshot of epoch e is taken before epoch e+1 is queued, so stream
order makes e+1's iterations wait for its copies; the trainer refuses a checkpoint while an
epoch is queued (`Trainer.checkpoint_payload`). On the CPU queuing an epoch runs it, so by
default nothing is queued ahead there and the loop is the plain one.
"""

from __future__ import annotations

import time
from typing import Callable

from tune_gems.trainer.epoch_row import EpochResult
from tune_gems.trainer.trainer import Trainer

EpochHook = Callable[[EpochResult, bool], None]


class CheckpointSchedule:
    """When a checkpoint is due at an epoch boundary (docs/checkpoints.md): at the first boundary
    `trainer.checkpoint_interval_s` seconds or more after the last checkpoint (or the start of
    training), every `trainer.checkpoint_every` epochs, and always at the end or when stopping.
    A zero interval or period turns that trigger off."""

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


def train_epochs(
    trainer: Trainer,
    on_epoch: EpochHook | None = None,
    stop: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    *,
    at_boundary: EpochHook | None = None,
    queue_ahead: bool | None = None,
) -> bool:
    """Run epochs until the trainer is done (its epochs reached, or diverged). After each epoch,
    with `due` = whether a checkpoint is due (CheckpointSchedule):

    1. `at_boundary(result, due)`, if given: the work that must see this epoch's device state
       (a checkpoint's snapshot), before anything else is queued;
    2. with `queue_ahead` (default `trainer.queues_ahead`: on CUDA), the next epoch is queued
       (`Trainer.begin_epoch`), unless the trainer is done or stopping;
    3. `on_epoch(result, due)`, if given: the work that may block the host (reports, files);
       the queued epoch trains meanwhile.

    `stop()` is asked at each epoch boundary: when true, that epoch's checkpoint is due, nothing
    more is queued and the loop ends after `on_epoch`. Returns whether it stopped early. If
    `on_epoch` raises (or Tune ends the trial's thread inside its report), a queued epoch is
    left unfinished: its work is discarded with the trainer, and what was reported and
    checkpointed is what a loop without queuing would have left. The trainer keeps every
    finished epoch's rows (`history`)."""
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
