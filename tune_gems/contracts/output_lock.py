"""The one-writer lock of an output folder (docs/robustness.md "Output folders")."""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import stat
from pathlib import Path

from tune_gems.contracts.errors import OutputError, OutputInUseError
from tune_gems.contracts.safe_files import entry_kind, require_regular

LOCK_FILE = ".tune-gems.lock"
"""The lock file (holds the pid, host and start time of the writer)."""
LOCK_ATTEMPTS = 5
LOCK_RETRY_S = 0.02
LOCK_INFO_MAX = 4096


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class OutputLock:
    """The one-writer lock of an output folder: a `filelock.FileLock` (an `fcntl.flock`, released by
    the kernel when the holder dies); where flock is unsupported the recorded pid decides. The file
    stays after release (removing it races with a waiting writer)."""

    def __init__(self, folder: str | Path, field: str = "--out"):
        self.folder = Path(folder)
        self.field = field
        self.path = self.folder / LOCK_FILE
        self._lock = None  # the filelock.FileLock held (None: not held, or no flock on this filesystem)

    def _info(self) -> dict:
        try:
            fd = self._open(os.O_RDONLY)
        except OutputError:
            return {}
        try:
            info = json.loads(os.pread(fd, LOCK_INFO_MAX, 0) or b"{}")
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)
        return info if isinstance(info, dict) else {}

    def _in_use(self) -> OutputInUseError:
        info = self._info()
        holder = f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}" if info else "another process"
        return OutputInUseError(f"{self.field}: {self.folder} is being written by {holder}; wait for it or choose another folder")

    def _ours(self) -> bool:
        """Whether the recorded holder is this process (a confirmation inside the search it holds)."""
        info = self._info()
        return info.get("pid") == os.getpid() and info.get("host") == socket.gethostname()

    def _open(self, flags: int) -> int:
        """The lock file's descriptor, never through a symlink; OutputError unless a regular file."""
        require_regular(self.path, self.field, "lock file")
        try:
            fd = os.open(self.path, flags | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise OutputError(f"{self.field}: {self.path}: cannot open the lock file ({e.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped in between the check and the open
            os.close(fd)
            require_regular(self.path, self.field, "lock file")
            raise OutputError(f"{self.field}: {self.path} is not a regular lock file; remove it")
        return fd

    def acquire(self) -> "OutputLock":
        from filelock import FileLock, Timeout

        os.close(self._open(os.O_RDWR | os.O_CREAT))  # created here, never through a symlink, FIFO or folder

        lock = FileLock(self.path, timeout=LOCK_ATTEMPTS * LOCK_RETRY_S, poll_interval=LOCK_RETRY_S, mode=0o644,
                        thread_local=False, fallback_to_soft=False)  # a soft lock would outlive a killed run
        try:
            lock.acquire()  # a `check_free` probe holds it for microseconds: retried until the timeout
        except Timeout:
            raise self._in_use() from None
        except OSError:  # no flock here: fall back to the recorded pid
            lock = None
            try:
                info = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                info = {}
            pid = info.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and info.get("host") == socket.gethostname() and _pid_alive(pid):
                raise self._in_use() from None
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (body + "\n").encode(), 0)
        finally:
            os.close(fd)
        self._lock = lock
        return self

    def check_free(self) -> None:
        """OutputInUseError when another live process holds the lock; takes and writes nothing."""
        if entry_kind(self.path) is None:
            return
        fd = self._open(os.O_RDONLY)
        try:
            import fcntl
        except ImportError:
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if self._ours():
                return
            raise self._in_use() from None
        except OSError:
            pass
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()  # the lock file stays: removing it races with a waiting writer
        self._lock = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
