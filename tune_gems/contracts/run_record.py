"""The SHA-256 a run recorded of its config or spec, data and final tables, which a command relying
on them checks, failing closed (`require_record`; docs/robustness.md "Records that do not lie")."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.safe_files import entry_kind, read_regular, sha256_bytes, sha256_regular

CHECKSUMS_KEY = "checksums"
"""Marker field: {stored file name: SHA-256 of its bytes as the command wrote them}."""
DATA_KEY = "data"
"""Marker field: {"path": the data file as given, "sha256": of its bytes} (file data only)."""
TABLES_KEY = "tables"
"""Marker field: {table: SHA-256} of the tables a sweep or confirmation wrote last."""
SEAL_KEY = "seal"
"""Data record field: the seal (`segments.seal_digest`: its rows, their SHA-256, its `openings`)."""
STORED_MAX_BYTES = 1 << 20
"""Largest stored config or spec read to verify it (the bound of a config file)."""
READ_FIX = ("the run's records were changed or are gone, so its results cannot be shown to be its own: restore them, "
            "or run it again")


def _data_files(data: Any) -> dict[str, str]:
    """{path: its config key} of every file a `DataConfig` reads, each once."""
    entries = getattr(data, "histories", None) or ()
    files = [(h.path or data.path, f"data.histories.{i}.path" if h.path else "data.path") for i, h in enumerate(entries)]
    out: dict[str, str] = {}
    for path, key in files or [(data.path, "data.path")]:
        out.setdefault(path, key)
    return out


def records_data(data: Any) -> bool:
    """Whether a run on `data` records its data files' checksum: local files only."""
    if getattr(data, "source", None) != "file":
        return False
    paths = list(_data_files(data))
    return all(paths) and not any("://" in str(p) for p in paths)


def data_fingerprint(data: Any, seal: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The record of a run's data files (None for synthetic data), each file's under its key
    (`files`), and the seal of its last rows, if any (`SEAL_KEY`)."""
    if not records_data(data):
        return None
    files = _data_files(data)
    digests = [sha256_regular(path, key, DataError) for path, key in files.items()]
    sealed = {SEAL_KEY: seal} if seal else {}
    if len(files) == 1:
        return {"path": str(next(iter(files))), "sha256": digests[0], **sealed}
    return {"path": ", ".join(map(str, files)), "sha256": sha256_bytes(" ".join(digests).encode()), **sealed,
            "files": [{"key": key, "path": str(path), "sha256": d} for (path, key), d in zip(files.items(), digests)]}


def require_record(marker: dict[str, Any] | None, problem: str | None, marker_path: str, *, files: Iterable[str],
                   data: Any = None, fix: str) -> dict[str, Any]:
    """The marker a command relies on, fail-closed: ConfigError naming `marker_path` and `fix` when
    it is missing (`problem`) or lacks the checksum of one of `files` or of `data`'s file."""
    if marker is None:
        raise ConfigError(f"{marker_path}: {problem or 'missing'}; it holds the checksums that show the run's stored files "
                          f"and data are what the run used, so nothing can be verified without it: {fix}")
    recorded = marker.get(CHECKSUMS_KEY)
    for name in files:
        if not isinstance(recorded, dict) or not isinstance(recorded.get(name), str):
            raise ConfigError(f"{marker_path}: records no checksum of {name} (written before tune-gems recorded them, "
                              f"or edited), so {name} cannot be verified: {fix}")
    if data is not None and records_data(data):
        rec = marker.get(DATA_KEY)
        if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str):
            raise ConfigError(f"{marker_path}: records no checksum of the data file {', '.join(map(str, _data_files(data)))}, so it cannot be "
                              f"verified: {fix}")
    return marker


def check_data_unchanged(marker: dict[str, Any] | None, data: Any, where: str) -> None:
    """DataError naming the data file's key when it differs from what the run in `where` read."""
    recorded = (marker or {}).get(DATA_KEY)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        return
    now = data_fingerprint(data) or {}
    if now.get("sha256") == recorded["sha256"]:
        return
    files = _data_files(data)
    was = {f.get("key"): f.get("sha256") for f in recorded.get("files") or () if isinstance(f, dict)}
    changed = [f for f in now.get("files") or () if f["key"] in was and was[f["key"]] != f["sha256"]]
    key, path, before, after = ((changed[0]["key"], changed[0]["path"], was[changed[0]["key"]], changed[0]["sha256"])
                                if changed else
                                (next(iter(files.values())) if len(files) == 1 else "data.histories",
                                 now.get("path", recorded.get("path")), recorded["sha256"], now.get("sha256", "none")))
    raise DataError(f"{key}: {path} changed since the run in {where} read it (sha256 {str(before)[:12]}..., now "
                    f"{str(after)[:12]}...); the run's records hold the data it started on: restore that file, or start a "
                    "new run")


def check_stored_unchanged(marker: dict[str, Any] | None, name: str, content: bytes, where: str) -> None:
    """ConfigError naming `where` when the stored file's bytes differ from what the command wrote."""
    recorded = ((marker or {}).get(CHECKSUMS_KEY) or {}).get(name)
    if isinstance(recorded, str) and recorded != sha256_bytes(content):
        raise ConfigError(
            f"{where}: edited since tune-gems wrote it (sha256 differs from the one recorded in the folder's marker); "
            "a recorded run is continued or confirmed only as recorded: restore the file, or start a new run with the "
            "edited settings"
        )


def checksums(marker: dict[str, Any] | None, **files: bytes) -> dict[str, str]:
    out = dict((marker or {}).get(CHECKSUMS_KEY) or {})
    out.update({name: sha256_bytes(content) for name, content in files.items()})
    return out


def check_recorded_files(folder: str | Path, names: Iterable[str], fix: str = READ_FIX) -> None:
    """Each of `names` that `folder` holds must be recorded in its marker and match it."""
    from tune_gems.contracts.outputs import MARKER_FILE, marker_state

    folder = Path(folder)
    present = [n for n in names if entry_kind(folder / n) is not None]
    if not present:
        return
    marker, problem = marker_state(folder)
    require_record(marker, problem, str(folder / MARKER_FILE), files=present, fix=fix)
    for name in present:
        content = read_regular(folder / name, STORED_MAX_BYTES, None, ConfigError, follow=False)
        check_stored_unchanged(marker, name, content, str(folder / name))


def check_recorded_run(folder: str | Path, stored: Iterable[str]) -> None:
    """What `analyze` and `compare` check of a run folder: regular files, stored files as recorded."""
    import os
    import stat

    from tune_gems.contracts.result_files import READ_FILES

    folder = Path(folder)
    if not folder.is_dir():
        return  # not a run folder at all: the loader names it
    for name in READ_FILES:
        path = folder / name
        if entry_kind(path) is None:
            continue
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError as e:
            raise DataError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
        if not regular:
            raise DataError(f"{path} is not a regular file (a FIFO, a device or a folder); give the run's own file")
    check_recorded_files(folder, stored)


def table_checksums(written: dict[str, bytes]) -> dict[str, dict[str, str]]:
    return {TABLES_KEY: {name: sha256_bytes(content) for name, content in sorted(written.items())}}


def check_tables_unchanged(folder: str | Path, marker: dict[str, Any], names: Iterable[str], fix: str) -> None:
    """DataError naming the table unless `folder`'s tables are exactly those recorded (`TABLES_KEY`)."""
    from tune_gems.contracts.outputs import MARKER_FILE

    folder = Path(folder)
    recorded = marker.get(TABLES_KEY)
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise ConfigError(f"{folder / MARKER_FILE}: records no checksum of the result tables (written before tune-gems "
                          f"recorded them, or edited), so they cannot be verified: {fix}")
    for name in sorted(set(names) | set(recorded)):
        path = folder / name
        if name not in recorded:
            if entry_kind(path) is not None:
                raise DataError(f"{path}: not written by the run (its marker records no such table); remove it: {fix}")
            continue
        if entry_kind(path) is None:
            raise DataError(f"{path}: deleted since tune-gems wrote it (its marker records its checksum): {fix}")
        if sha256_regular(path, None, DataError) != recorded[name]:
            raise DataError(f"{path}: edited since tune-gems wrote it (cut, changed or replaced: its sha256 differs from "
                            f"the one in the folder's marker): {fix}")
