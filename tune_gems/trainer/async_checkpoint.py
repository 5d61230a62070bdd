"""Checkpoints written in the background (docs/checkpoints.md): `save` snapshots at the boundary (on CUDA into pinned
buffers on a side stream), one thread serialises in order; an error is raised at the next `save`, `wait` or `close`."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from tune_gems.trainer import checkpoint as ckpt

SaveFn = Callable[[Path, dict[str, Tensor], dict[str, Any]], None]
AfterFn = Callable[[dict[str, Any]], None]


def snapshot_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of a checkpoint's metadata later training cannot change."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if isinstance(value, list):
            out[key] = [dict(row) if isinstance(row, dict) else row for row in value]
        elif isinstance(value, dict):
            out[key] = _deep_copy(value)
        else:
            out[key] = value
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    if isinstance(value, Tensor):  # small host tensors in the metadata (e.g. kept evaluations)
        return value.detach().to("cpu", copy=True)
    return value


@dataclass
class HostBuffers:
    """Host tensors shaped like the state, allocated once (pinned for CUDA state), refilled per snapshot."""

    buffers: dict[str, Tensor] = field(default_factory=dict)
    _streams: dict[torch.device, Any] = field(default_factory=dict)

    def _buffer(self, name: str, src: Tensor) -> Tensor:
        buf = self.buffers.get(name)
        if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
            buf = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=src.is_cuda)
            self.buffers[name] = buf
        return buf

    def _side_stream(self, device: torch.device):
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device=device)
        return self._streams[device]

    def fill(self, state: dict[str, Tensor]) -> Callable[[], None]:
        """Copy `state` into the buffers; returns what the writer calls before reading them."""
        for name in set(self.buffers) - set(state):
            del self.buffers[name]
        events = []
        by_device: dict[torch.device, list[tuple[str, Tensor]]] = {}
        with torch.no_grad():
            for name, src in state.items():
                src = src.detach()
                if src.is_cuda:
                    by_device.setdefault(src.device, []).append((name, src))
                else:
                    self._buffer(name, src).copy_(src)
            for device, items in by_device.items():
                training = torch.cuda.current_stream(device)
                side = self._side_stream(device)
                side.wait_stream(training)  # copy what the queued training work leaves behind
                with torch.cuda.stream(side):
                    for name, src in items:
                        self._buffer(name, src).copy_(src, non_blocking=True)
                        src.record_stream(side)  # a temporary freed meanwhile is not reused early
                copied = torch.cuda.Event()
                copied.record(side)
                training.wait_event(copied)  # the next iteration may change these tensors
                events.append(copied)

        def ready() -> None:
            for event in events:
                event.synchronize()

        return ready

    def view(self) -> dict[str, Tensor]:
        return dict(self.buffers)


class AsyncCheckpointWriter:
    """One background thread writing checkpoints from snapshots; `close()` waits for it."""

    def __init__(self, save: SaveFn = ckpt.save) -> None:
        self._save = save
        self._buffers = HostBuffers()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending: Future | None = None
        self._lock = threading.Lock()  # save() from two threads: one snapshot at a time

    def save(self, path: str | Path | None, state: dict[str, Tensor], meta: dict[str, Any],
            after: AfterFn | None = None) -> Future:
        """Snapshot `state` and `meta` now and write them to `path` in the background; `after(meta)`
        runs in the writer once the file is in place (with `path` None, alone: a final checkpoint)."""
        with self._lock:
            self.wait()
            ready = self._buffers.fill(state)
            meta_copy = snapshot_meta(meta)
            tensors = self._buffers.view()
            target = None if path is None else Path(path)
            self._pending = self._pool.submit(self._write, target, tensors, meta_copy, ready, after)
            return self._pending

    def _write(self, path: Path | None, tensors: dict[str, Tensor], meta: dict[str, Any], ready: Callable[[], None],
            after: AfterFn | None) -> None:
        ready()
        if path is not None:
            self._save(path, tensors, meta)
        if after is not None:
            after(meta)

    @property
    def busy(self) -> bool:
        return self._pending is not None and not self._pending.done()

    def wait(self) -> None:
        """Until the write in flight is done; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "AsyncCheckpointWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
