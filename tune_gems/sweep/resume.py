"""What `--resume` continues from: the experiment's record (the marker with the spec's and the data
file's checksums, then spec.yaml) that a first run writes, read back and checked by the run that
resumes it. The stored spec is the run: an override that changes it is refused, naming the key."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tune_gems.config.dotted import flatten
from tune_gems.config.load import format_validation_error
from tune_gems.config.yaml_io import apply_overrides, yaml_mapping
from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.outputs import MARKER_FILE, marker_body, marker_state, parse_marker, write_marker
from tune_gems.contracts.result_files import SPEC_FILE
from tune_gems.contracts.run_record import (
    CHECKSUMS_KEY, DATA_KEY, check_data_unchanged, check_stored_unchanged, checksums, require_record,
)
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import import_spec_plugins
from tune_gems.sweep.storage import ExperimentStore

RESUME_MAY_DIFFER = ("name", "storage", "storage_timeout_s", "description")
"""Spec keys that may differ between the stored run and the command resuming it."""
RESUME_FIX = "start a new sweep under another --name"


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    fa, fb = flatten(a), flatten(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        if key.split(".")[0] in RESUME_MAY_DIFFER:
            continue
        if fa.get(key) != fb.get(key):
            out.append((key, fa.get(key), fb.get(key)))
    return out


def resolved_spec(spec: SweepSpec) -> dict[str, Any]:
    """The spec as a tree whose config is the full resolved trainer config (defaults filled in)."""
    return {**spec.model_dump(mode="json"), "config": spec.base_config().to_dict()}


def stored_spec(store: ExperimentStore, overrides: list[str], given: SweepSpec, spec_path: Path) -> SweepSpec:
    """The spec a `--resume` continues with: the experiment's stored spec.yaml. Overrides are
    applied to it and any that changes it is refused, naming the key; a SPEC file that differs
    from the stored one is noted (the stored one runs). A stored spec edited since the sweep
    wrote it, or a data file changed since it read it, is refused, and so is an experiment whose
    marker is missing, unreadable or records no checksums (fail-closed,
    tune_gems.contracts.run_record)."""
    from pydantic import ValidationError

    where = f"{store.uri}/{SPEC_FILE}"
    try:
        raw = store.read_bytes(SPEC_FILE)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the stored spec ({type(e).__name__})") from None
    marker, problem = stored_marker(store)
    require_record(marker, problem, f"{store.uri}/{MARKER_FILE}", files=[SPEC_FILE], fix=RESUME_FIX)
    check_stored_unchanged(marker, SPEC_FILE, raw, where)
    try:
        tree = yaml_mapping(raw, where)
        import_spec_plugins(tree, where)
        stored = SweepSpec.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(f"{where}: {format_validation_error(e)}") from None
    require_record(marker, problem, f"{store.uri}/{MARKER_FILE}", files=[SPEC_FILE], data=stored.base_config().data,
                   fix=RESUME_FIX)
    check_data_unchanged(marker, stored.base_config().data, store.uri)  # the run's data, as it read it
    asked_tree = apply_overrides(copy.deepcopy(stored.model_dump(mode="json")), list(overrides))
    try:
        asked = SweepSpec.model_validate(asked_tree)
    except ValidationError as e:
        raise ConfigError(f"{spec_path}: {format_validation_error(e)}") from None
    for key, old, new in _differences(resolved_spec(stored), resolved_spec(asked)):
        raise ConfigError(
            f"{key}: the sweep {store.name} was started with {key}={old!r}, this command asks {new!r}; "
            "--resume continues the stored run (drop the override, or start a new --name)"
        )
    changed = [k for k, _, _ in _differences(resolved_spec(stored), resolved_spec(given))]
    if changed:
        print(
            f"tune-gems sweep: note: {spec_path} differs from the stored spec in {', '.join(changed[:3])}"
            f"{' ...' if len(changed) > 3 else ''}; resuming with the stored spec ({where})",
            flush=True,
        )
    return stored


def stored_marker(store: ExperimentStore) -> tuple[dict[str, Any] | None, str | None]:
    """The experiment's marker (what it recorded: the spec's checksum, the data file's) and None,
    or None and why there is none (tune_gems.contracts.outputs.marker_state)."""
    if store.disk_dir is not None:
        return marker_state(store.disk_dir)
    try:
        if not store.has(MARKER_FILE):
            return None, "missing"
        return parse_marker(store.read_bytes(MARKER_FILE))
    except OSError as e:
        return None, f"cannot read ({type(e).__name__})"


def write_record(store: ExperimentStore, spec_text: bytes, data_record: dict[str, str] | None) -> None:
    """The experiment's marker, recording the spec's checksum and the data file's, then the spec."""
    fields: dict[str, Any] = {CHECKSUMS_KEY: checksums(None, **{SPEC_FILE: spec_text})}
    if data_record is not None:
        fields[DATA_KEY] = data_record
    if store.disk_dir is not None:
        write_marker(store.disk_dir, "sweep", **fields)
    else:
        store.write_bytes(MARKER_FILE, (json.dumps(marker_body("sweep", **fields)) + "\n").encode())
    store.write_bytes(SPEC_FILE, spec_text)


def resume_command(spec_path: Path, store: ExperimentStore, name: str) -> str:
    """The command that continues this sweep."""
    return f"tune-gems sweep {spec_path} --storage {store.storage} --name {name} --resume"
