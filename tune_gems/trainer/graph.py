"""Runs the training iteration eagerly or as one CUDA graph replayed in place; the state is restored
after capture's warm-up so a resumed run is bit-identical."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


class SplitStep:
    """A step whose device part a graph captures, advancing `counter()`, and whose host part `host(n)`
    runs after (the count read once per capture)."""

    def __init__(self, device: Callable[[], None], host: Callable[[int], None], counter: Callable[[], Tensor]):
        self.device, self.host, self._counter = device, host, counter
        self._count: int | None = None

    def __call__(self) -> None:
        self.device()
        counter = self._counter()
        self._count = int(counter) if self._count is None or not counter.is_cuda else self._count + 1
        self.host(self._count)

    def recount(self) -> None:
        self._count = int(self._counter())

    def replayed(self) -> None:
        self._count += 1
        self.host(self._count)

    def forget(self) -> None:
        self._count = None


class StepRunner:
    def __init__(self, step: Callable[[], None], state: Callable[[], dict[str, Tensor]], use_graph: bool,
            warmup: int = 3, steps: int = 1):
        """`steps`: calls of `step` per call, captured together (the evaluation's many small steps)."""
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
        """Drop the captured graph (state replaced or loaded): the next call captures again."""
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
