"""The once-per-search record of a confirmation, `EXP/confirmed.json`: claimed exclusively,
completed on publishing, cleared by the next confirmation when its writer died (the search's lock is
free)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from tune_gems.commands.confirm_plan import Plan
from tune_gems.contracts.cpu_environment import cpu_record
from tune_gems.contracts.errors import DataError, OutputInUseError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import clear_stale_temporaries
from tune_gems.contracts.safe_files import entry_kind, read_regular, write_atomic

KIND = "confirm"
FIELD = "EXPERIMENT_DIR"
CONFIRMED_FILE = "confirmed.json"
"""In the search's folder: the record that it was confirmed (where, when, what was chosen)."""
RECORD_MAX_BYTES = 1 << 16


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def stops_raise():
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) while training: the clean-up runs as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    caught = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, stop) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def clear_stale(exp: Path, out: Path, log: Callable[[str], None]) -> None:
    """Remove a killed confirmation's "running" record and temporary folders (its lock is free)."""
    (exp / CONFIRMED_FILE).unlink(missing_ok=True)
    cleared = clear_stale_temporaries(out, KIND)
    log(f"tune-gems confirm: a confirmation of {exp} was killed before it finished (its lock is free); "
        f"cleared its record{f' and {cleared} temporary folder(s)' if cleared else ''}, starting again")


def check_not_confirmed(exp: Path) -> bool:
    """DataError when the search was or is being confirmed; True for a dead one's record, else False."""
    record = exp / CONFIRMED_FILE
    kind = entry_kind(record)
    if kind is None:
        return False
    if kind != "file":
        raise DataError(f"{record} is a {kind}, not the record tune-gems writes; remove it (confirm keeps its record there)")
    try:
        info = json.loads(read_regular(record, RECORD_MAX_BYTES, None, DataError, follow=False))
        where, status = info.get("out", "?"), info.get("status")
    except (ValueError, AttributeError):
        where, status = "?", None
    if status == "running":
        try:
            OutputLock(exp, FIELD).check_free()
        except OutputInUseError:
            raise DataError(f"{record}: a confirmation of this search is running (into {where}); wait for it") from None
        return True
    raise DataError(f"{record}: this search was confirmed already (into {where}); a search is confirmed once, "
                    "and that confirmation's verdict is the final one")


def claim_confirmation(exp: Path, out: Path) -> Path:
    """Create EXP/confirmed.json exclusively (two confirms of one search at once: one wins)."""
    record = exp / CONFIRMED_FILE
    try:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        check_not_confirmed(exp)
        raise
    with os.fdopen(fd, "w") as f:
        json.dump({"out": str(out), "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
                   "started": _now()}, f)
    return record


def write_record(record: Path, out: Path, plans: Iterable[Plan]) -> None:
    """The claim completed: where, the CPU environment, and per gem what it re-tested."""
    text = json.dumps({"out": str(out), "status": "done", "finished": _now(), "cpu_environment": cpu_record(),
                       "trials": {p.gem: {"discovery_trial": p.discovery_trial, "confirmation_trial": p.trial_id,
                                          "seed": p.seed, "first_seed_index": p.first_seed_index,
                                          "first_path": p.path_seed} for p in plans}}, indent=2)
    write_atomic(record, text + "\n")  # no-follow temporary file, then a rename (safe_files)
