"""SIGTERM / SIGINT during `tune-gems train`: stop at the next epoch boundary with a checkpoint
(exit 128 + the signal); a second signal stops at once. Installed from the main thread only."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SIGNAL_EXIT_BASE = 128


class TrainingStopped(Exception):

    def __init__(self, signum: int, epoch: int, message: str) -> None:
        super().__init__(message)
        self.signum, self.epoch = signum, epoch

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT_BASE + self.signum


class StopSignals:

    def __init__(self, what: str = "tune-gems train") -> None:
        self.what = what
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        return self.signum is not None

    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # the second signal: stop now
        self.signum = signum
        # os.write, not print: a handler may interrupt a print to the same stream
        os.write(2, f"\n{self.what}: {signal.Signals(signum).name} received; stopping after this epoch with a checkpoint "
                    f"(send it again to stop at once)\n".encode())

    @contextmanager
    def installed(self) -> Iterator["StopSignals"]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        try:
            yield self
        finally:
            for s, handler in self._previous.items():
                signal.signal(s, handler)
