"""A confirmation's once-per-search records: `EXP/confirmed.json`, claimed exclusively and cleared by
the next when its writer died (`Confirmed`), and the seal's openings in the marker (`SealOpening`)."""

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

from tune_gems.commands.confirm_plan import Plan, Taken
from tune_gems.contracts.cpu_environment import cpu_record
from tune_gems.contracts.errors import ConfigError, DataError, OutputInUseError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import MARKER_FILE, clear_stale_temporaries, marker_state
from tune_gems.contracts.run_record import DATA_KEY, SEAL_KEY
from tune_gems.contracts.safe_files import entry_kind, read_regular, sha256_bytes, write_atomic

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


def _trials(plans: Iterable[Plan]) -> dict:
    """Per gem, what a confirmation re-tested on which seeds (what the next one keeps clear of)."""
    return {p.gem: {"discovery_trial": p.discovery_trial, "confirmation_trial": p.trial_id, "seed": p.seed,
                    "first_seed_index": p.first_seed_index, "population": p.population, "first_path": p.path_seed}
            for p in plans}


def _read_record(record: Path) -> dict:
    """`confirmed.json`, read only as a bounded regular file; {} where unparsable."""
    kind = entry_kind(record)
    if kind != "file":
        raise DataError(f"{record} is a {kind}, not the record tune-gems writes; remove it (confirm keeps its record there)")
    try:
        info = json.loads(read_regular(record, RECORD_MAX_BYTES, None, DataError, follow=False))
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def taken_seeds(exp: Path) -> list[Taken]:
    """The seeds of the search's confirmations so far (`confirmed.json`'s and every opening's)."""
    runs = [_read_record(exp / CONFIRMED_FILE)] if entry_kind(exp / CONFIRMED_FILE) == "file" else []
    marker, _ = marker_state(exp)
    runs += ((marker or {}).get(DATA_KEY) or {}).get(SEAL_KEY, {}).get("openings") or []
    out = []
    for t in (t for run in runs if isinstance(run, dict) for t in (run.get("trials") or {}).values()):
        try:
            out.append(Taken(int(t["seed"]), int(t["first_seed_index"]), int(t.get("population") or 0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


class Confirmed:
    """The search's one confirmation (without --final): `confirmed.json`, claimed exclusively before
    the first trial trains, completed with where, the CPU environment and each gem's seeds."""

    opens_seal, pre_registered, label = False, True, ""

    def __init__(self, exp: Path):
        self.exp, self.file = exp, exp / CONFIRMED_FILE

    def check(self) -> bool:
        """DataError when the search was or is being confirmed; True for a dead one's record, else False."""
        if entry_kind(self.file) is None:
            return False
        info = _read_record(self.file)
        where = info.get("out", "?")
        if info.get("status") == "running":
            try:
                OutputLock(self.exp, FIELD).check_free()
            except OutputInUseError:
                raise DataError(f"{self.file}: a confirmation of this search is running (into {where}); wait for it") from None
            return True
        raise DataError(f"{self.file}: this search was confirmed already (into {where}); a search is confirmed once, "
                        "and that confirmation's verdict is the final one")

    def verify(self, cfg) -> None:
        """Nothing sealed is read."""

    def claim(self, out: Path, log: Callable[[str], None]) -> None:
        if self.check():  # under the lock: a "running" record is a dead confirmation's
            clear_stale(self.exp, out, log)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            self.check()
            raise
        with os.fdopen(fd, "w") as f:
            json.dump({"out": str(out), "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
                       "started": _now()}, f)

    def complete(self, out: Path, plans: Iterable[Plan], results: dict[str, bytes]) -> None:
        text = json.dumps({"out": str(out), "status": "done", "finished": _now(), "cpu_environment": cpu_record(),
                           "trials": _trials(plans)}, indent=2)
        write_atomic(self.file, text + "\n")  # no-follow temporary file, then a rename (safe_files)

    def withdraw(self, out: Path) -> None:
        if not out.exists():  # nothing was published: the search is not confirmed
            self.file.unlink(missing_ok=True)


class SealOpening:
    """An opening of the search's seal (`confirm --final`) in its marker: the first is pre-registered,
    another only with `again`, labelled so; it counts once claimed."""

    opens_seal = True

    def __init__(self, exp: Path, again: bool):
        self.exp, self.again, self.where, self.number = exp, again, exp / MARKER_FILE, 0

    def _read(self) -> tuple[dict, dict]:
        marker, problem = marker_state(self.exp)
        seal = ((marker or {}).get(DATA_KEY) or {}).get(SEAL_KEY)
        if marker is None or not isinstance(seal, dict) or not isinstance(seal.get("sha256"), str) \
                or not isinstance(seal.get("openings"), list):
            raise ConfigError(f"{self.where}: {problem or 'records no seal'}; --final opens the rows a search sealed "
                              "(data.sealed in its spec), and its record of them is what shows they were unread")
        return marker, seal

    @property
    def pre_registered(self) -> bool:
        return self.number == 1

    @property
    def label(self) -> str:
        return f"opening {self.number} of the seal: {'pre-registered' if self.pre_registered else 'not pre-registered'}"

    def check(self) -> None:
        _, seal = self._read()
        done = seal["openings"]
        self.number = len(done) + 1
        if done and not self.again:
            last = done[-1] if isinstance(done[-1], dict) else {}
            status = {"done": "finished", "running": "stopped before it finished"}.get(last.get("status"), "failed")
            raise DataError(f"{self.where}: the seal ({seal.get('rows')} rows) was opened {len(done)} time(s) already "
                            f"(last on {last.get('opened', '?')} into {last.get('out', '?')}, {status}); another opening is "
                            "not pre-registered: pass --not-pre-registered to run it labelled so")

    def verify(self, cfg) -> None:
        """The sealed rows now are the ones sealed: DataError naming the data key otherwise."""
        from tune_gems.trainer.run_setup import load_run_prices, seal_record

        _, seal = self._read()
        now = seal_record(cfg, load_run_prices(cfg)) or {}
        if now.get("sha256") != seal["sha256"] or now.get("rows") != seal.get("rows"):
            raise DataError(f"{cfg.data.histories_key}: the sealed rows of {cfg.data.path or 'the histories'} are not the "
                            f"{seal.get('rows')} the search sealed (sha256 {seal['sha256'][:12]}..., now "
                            f"{str(now.get('sha256'))[:12]}...): the seal is broken; restore the data")

    def _write(self, **fields) -> None:
        marker, seal = self._read()
        openings = list(seal["openings"])
        if fields.get("status") == "running":
            openings.append(fields)
        else:
            openings[self.number - 1] = {**openings[self.number - 1], **fields}
        data = {**marker[DATA_KEY], SEAL_KEY: {**seal, "openings": openings}}
        write_atomic(self.where, json.dumps({**marker, DATA_KEY: data}) + "\n")

    def claim(self, out: Path, log: Callable[[str], None]) -> None:
        self.check()  # under the lock
        clear_stale_temporaries(out, KIND)  # a killed opening's (it stays counted)
        out.parent.mkdir(parents=True, exist_ok=True)
        self._write(opening=self.number, opened=_now(), by="tune-gems confirm --final" + " --not-pre-registered" * self.again,
                    out=str(out), pre_registered=self.pre_registered, status="running", host=socket.gethostname())

    def complete(self, out: Path, plans: Iterable[Plan], results: dict[str, bytes]) -> None:
        self._write(status="done", finished=_now(), trials=_trials(plans),
                    results={name: sha256_bytes(content) for name, content in sorted(results.items())})

    def withdraw(self, out: Path) -> None:
        self._write(status="failed", finished=_now())  # it was opened all the same
