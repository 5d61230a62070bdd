"""What a run recorded about its inputs, so a resume never rewrites what the run did.

Why: a `--resume` continues a run from what it stored (train: config.yaml; sweep: spec.yaml)
on the data it read. A stored file edited by hand, or a price file changed in place, would make
the resumed run's tables claim settings or data that the earlier epochs never had. So when a
command writes its stored config/spec it records the file's SHA-256, and when it starts it
records the SHA-256 of the data file's bytes, both in the folder's marker
(tune_gems.contracts.outputs, fields `CHECKSUMS_KEY` and `DATA_KEY`); a resume recomputes both and refuses
a mismatch in one line naming the file. A marker without these fields (a run written before
they existed) is not checked.
"""

from __future__ import annotations

from typing import Any

from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.safe_files import sha256_bytes, sha256_file

CHECKSUMS_KEY = "checksums"
"""Marker field: {stored file name: SHA-256 of its bytes as the command wrote them}."""
DATA_KEY = "data"
"""Marker field: {"path": the data file as given, "sha256": of its bytes} (file data only)."""


def data_fingerprint(data: Any) -> dict[str, str] | None:
    """The record of a run's data file (a `DataConfig`), or None for synthetic data."""
    if getattr(data, "source", None) != "file" or not data.path or "://" in str(data.path):
        return None
    try:
        digest = sha256_file(data.path)
    except OSError as e:
        raise DataError(f"data.path: {data.path}: cannot read ({e.strerror or type(e).__name__})") from None
    return {"path": str(data.path), "sha256": digest}


def check_data_unchanged(marker: dict[str, Any] | None, data: Any, where: str) -> None:
    """DataError naming the data file when it differs from the one the run in `where` read."""
    recorded = (marker or {}).get(DATA_KEY)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        return
    now = data_fingerprint(data)
    if now is None or now["sha256"] != recorded["sha256"]:
        raise DataError(
            f"data.path: {getattr(data, 'path', None) or recorded.get('path')} changed since the run in {where} read it "
            f"(sha256 {recorded['sha256'][:12]}..., now {(now or {}).get('sha256', 'none')[:12]}...); --resume continues "
            "on the data the run started on: restore that file, or start a new run"
        )


def check_stored_unchanged(marker: dict[str, Any] | None, name: str, content: bytes, where: str) -> None:
    """ConfigError naming `where` (the stored file) when its bytes differ from what the command
    wrote there."""
    recorded = ((marker or {}).get(CHECKSUMS_KEY) or {}).get(name)
    if isinstance(recorded, str) and recorded != sha256_bytes(content):
        raise ConfigError(
            f"{where}: edited since tune-gems wrote it (sha256 differs from the one recorded in the folder's marker); "
            "--resume continues what the run recorded: restore the file, or start a new run with the edited settings"
        )


def checksums(marker: dict[str, Any] | None, **files: bytes) -> dict[str, str]:
    """The marker's checksums with `files` ({name: content}) recorded."""
    out = dict((marker or {}).get(CHECKSUMS_KEY) or {})
    out.update({name: sha256_bytes(content) for name, content in files.items()})
    return out
