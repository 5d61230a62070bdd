"""Runs the training iteration eagerly, or as one captured CUDA graph replayed in place.

Capture needs a few warm-up iterations first (cuBLAS handles, autograd's buffers). Warm-up
iterations would advance the training state, so the state is snapshotted before them and
restored after: every real iteration runs through the graph, whether capture happened at the
start of a run or after resuming from a checkpoint. That is what makes a resumed run
bit-identical to an uninterrupted one.

Capture and replay happen in the calling thread (a Ray Tune function trainable runs in a
worker thread); the graph uses a side stream of its own, as torch.cuda.graph requires.

A step may come in two parts (`SplitStep`): what the graph captures, and work the host schedules
between replays from its own count of them (the hard target update, due every
`trainer.target_update` iterations: a copy on the iterations where it is due instead of a lerp
over every parameter in every replay). The count is the step's device counter, read once when
the graph is captured (and after every `invalidate`), then counted on the host: neither a replay
nor an eager CUDA step waits for the device.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


class SplitStep:
    """A step whose device part a CUDA graph captures and whose host part runs after it.

    `device()`: the capturable part; it advances a 0-dim integer device counter (`counter()`,
    part of the state) by one per call. `host(n)`: what runs after the device part of the call
    that brought the counter to n; it may launch device work but must not read the device.

    The host knows n without reading the device: the count is read once (a sync on CUDA) when
    unknown, after a capture (`recount`) or the first eager call, then counted on the host;
    `forget` (StepRunner.invalidate: the state was loaded or replaced) makes it read again.
    Off CUDA the counter is read in every eager call (free there), so a CPU learner whose state
    was copied in by hand still schedules right."""

    def __init__(self, device: Callable[[], None], host: Callable[[int], None], counter: Callable[[], Tensor]):
        self.device, self.host, self._counter = device, host, counter
        self._count: int | None = None

    def __call__(self) -> None:
        """One eager step: the device part, then the host part."""
        self.device()
        counter = self._counter()
        self._count = int(counter) if self._count is None or not counter.is_cuda else self._count + 1
        self.host(self._count)

    def recount(self) -> None:
        """Read the counter (after a capture restored the state)."""
        self._count = int(self._counter())

    def replayed(self) -> None:
        """The host part after one replay of the captured device part."""
        self._count += 1
        self.host(self._count)

    def forget(self) -> None:
        self._count = None


class StepRunner:
    def __init__(
        self, step: Callable[[], None], state: Callable[[], dict[str, Tensor]], use_graph: bool, warmup: int = 3, steps: int = 1
    ):
        """`steps`: how many calls of `step` one call (one replay) runs, captured together in
        one graph: fewer replays for a loop of many small steps (evaluation)."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if isinstance(step, SplitStep) and steps != 1:
            raise ValueError("a SplitStep runs one step per replay (steps=1)")
        self._state, self.use_graph, self.warmup, self.steps = state, use_graph, warmup, steps
        self._split = step if isinstance(step, SplitStep) else None
        captured = step.device if isinstance(step, SplitStep) else step
        self._step = captured if steps == 1 else (lambda: [captured() for _ in range(steps)] and None)
        self._graph: torch.cuda.CUDAGraph | None = None

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def __call__(self) -> None:
        if not self.use_graph:
            if self._split is not None:
                self._split()
            else:
                self._step()
            return
        if self._graph is None:
            self._capture()
        self._graph.replay()
        if self._split is not None:
            self._split.replayed()

    def invalidate(self) -> None:
        """Drop the captured graph (after state tensors were replaced rather than copied into, or
        loaded from a checkpoint): the next call captures again and re-reads the step's counter."""
        self._graph = None
        if self._split is not None:
            self._split.forget()

    def _capture(self) -> None:
        state = self._state()
        snapshot = {k: v.detach().clone() for k, v in state.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for k, v in state.items():
                v.copy_(snapshot[k])
        del snapshot
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self._graph = graph
        if self._split is not None:
            self._split.recount()  # the restored state's: capture itself runs nothing
