"""Runs the training iteration eagerly, or as one captured CUDA graph replayed in place.

Capture needs a few warm-up iterations first (cuBLAS handles, autograd's buffers). Warm-up
iterations would advance the training state, so the state is snapshotted before them and
restored after: every real iteration runs through the graph, whether capture happened at the
start of a run or after resuming from a checkpoint. That is what makes a resumed run
bit-identical to an uninterrupted one.

Capture and replay happen in the calling thread (a Ray Tune function trainable runs in a
worker thread); the graph uses a side stream of its own, as torch.cuda.graph requires.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


class StepRunner:
    def __init__(
        self, step: Callable[[], None], state: Callable[[], dict[str, Tensor]], use_graph: bool, warmup: int = 3, steps: int = 1
    ):
        """`steps`: how many calls of `step` one call (one replay) runs, captured together in
        one graph: fewer replays for a loop of many small steps (evaluation)."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self._state, self.use_graph, self.warmup, self.steps = state, use_graph, warmup, steps
        self._step = step if steps == 1 else (lambda: [step() for _ in range(steps)] and None)
        self._graph: torch.cuda.CUDAGraph | None = None

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def __call__(self) -> None:
        if not self.use_graph:
            self._step()
            return
        if self._graph is None:
            self._capture()
        self._graph.replay()

    def invalidate(self) -> None:
        """Drop the captured graph (after state tensors were replaced rather than copied into)."""
        self._graph = None

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
