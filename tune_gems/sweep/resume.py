"""What `--resume` continues from: the experiment's record (marker checksums, spec.yaml), checked
before it resumes (a changed stored spec or data refused), and where each unfinished trial restarts."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gems.config.dotted import flatten
from tune_gems.config.load import format_validation_error
from tune_gems.config.yaml_io import apply_overrides, yaml_mapping
from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.outputs import MARKER_FILE, marker_body, marker_state, parse_marker, update_marker, write_marker
from tune_gems.contracts.result_files import SPEC_FILE
from tune_gems.contracts.run_record import (CHECKSUMS_KEY, DATA_KEY, check_data_unchanged, check_stored_unchanged,
                                            checksums, require_record, table_checksums)
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import import_spec_plugins
from tune_gems.sweep.storage import ExperimentStore

RESUME_MAY_DIFFER = ("name", "storage", "storage_timeout_s", "description")
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
    return {**spec.model_dump(mode="json"), "config": spec.base_config().to_dict()}


def stored_spec(store: ExperimentStore, overrides: list[str], given: SweepSpec, spec_path: Path) -> SweepSpec:
    """The stored spec.yaml, overrides that change it refused; refused fail-closed when it or the data changed."""
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
    """(the experiment's marker, None), or (None, why there is none)."""
    if store.disk_dir is not None:
        return marker_state(store.disk_dir)
    try:
        if not store.has(MARKER_FILE):
            return None, "missing"
        return parse_marker(store.read_bytes(MARKER_FILE))
    except OSError as e:
        return None, f"cannot read ({type(e).__name__})"


def write_record(store: ExperimentStore, spec_text: bytes, data_record: dict[str, str] | None) -> None:
    fields: dict[str, Any] = {CHECKSUMS_KEY: checksums(None, **{SPEC_FILE: spec_text})}
    if data_record is not None:
        fields[DATA_KEY] = data_record
    if store.disk_dir is not None:
        write_marker(store.disk_dir, "sweep", **fields)
    else:
        store.write_bytes(MARKER_FILE, (json.dumps(marker_body("sweep", **fields)) + "\n").encode())
    store.write_bytes(SPEC_FILE, spec_text)


def record_tables(store: ExperimentStore, written: dict[str, bytes]) -> None:
    """The checksums of the tables just written, in the marker: what `confirm` verifies."""
    fields = table_checksums(written)
    marker, _problem = stored_marker(store)
    if store.disk_dir is not None and marker is not None:
        update_marker(store.disk_dir, **fields)
        return
    store.write_bytes(MARKER_FILE, (json.dumps({**(marker or marker_body("sweep")), **fields}) + "\n").encode())


def resume_command(spec_path: Path, store: ExperimentStore, name: str) -> str:
    return f"tune-gems sweep {spec_path} --storage {store.storage} --name {name} --resume"


@dataclass(frozen=True)
class StoredTrial:
    """A trial in Tune's newest persisted state: status, last processed result, folder."""

    status: str
    last_result: dict[str, Any]
    folder: str


def stored_trials(store: ExperimentStore) -> dict[str, StoredTrial]:
    """{trial_id: StoredTrial} from Tune's newest persisted state (which tells interrupted from finished)."""
    import pyarrow.fs as pafs

    try:
        infos = store.fs.get_file_info(pafs.FileSelector(store.root, recursive=False))
        states = sorted(i.path for i in infos if i.base_name.startswith("experiment_state-") and i.base_name.endswith(".json"))
        if not states:
            return {}
        with store.fs.open_input_stream(states[-1]) as f:
            data = json.loads(f.read())
        out = {}
        for entry in data.get("trial_data", []):
            trial, run = json.loads(entry[0]), json.loads(entry[1])
            last = run.get("last_result") if isinstance(run, dict) else None
            out[str(trial["trial_id"])] = StoredTrial(str(trial["status"]), last if isinstance(last, dict) else {},
                                                      str(trial.get("relative_logdir") or ""))
        return out
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}


def stored_trial_statuses(store: ExperimentStore) -> dict[str, str]:
    return {trial_id: t.status for trial_id, t in stored_trials(store).items()}


FINISHED_STATUS = "TERMINATED"
NO_CHECKPOINT = "no checkpoint yet"
CHECKPOINT_KEY = "checkpoint_dir_name"
RESULTS_FILE = "result.json"


def checkpoint_epoch(store: ExperimentStore, trial: StoredTrial) -> int | None:
    """The epoch a resumed `trial` restarts after: its newest checkpoint Tune registered, or None."""
    last = trial.last_result
    if last.get(CHECKPOINT_KEY):
        return int(last["epoch"])
    if "epoch" not in last or not trial.folder:
        return None
    newest = None
    try:
        with store.fs.open_input_stream(f"{store.root}/{trial.folder}/{RESULTS_FILE}") as f:
            for line in f.read().decode(errors="replace").splitlines():
                row = json.loads(line) if line.strip() else {}
                if row.get(CHECKPOINT_KEY) and isinstance(row.get("epoch"), int) and row["epoch"] <= last["epoch"]:
                    newest = row["epoch"]
    except (OSError, ValueError):
        return None
    return newest


def restart_lines(store: ExperimentStore, spec: SweepSpec) -> list[str]:
    """What a `--resume` continues: finished trials kept, the epoch each unfinished one restarts from."""
    trials = stored_trials(store)
    if not trials:
        return [f"resuming {store.name}: Tune's stored state lists no trial yet; the sweep starts its trials"]
    kept = [t for t in trials.values() if t.status == FINISHED_STATUS]
    trainer = spec.base_config().trainer
    every = f", every {trainer.checkpoint_every} epoch(s)" if trainer.checkpoint_every else ""
    when = f"a checkpoint is written after {trainer.checkpoint_interval_s:g} s of training{every} and at the end"
    parts = []
    for trial_id, trial in trials.items():
        if trial.status == FINISHED_STATUS:
            continue
        epoch = checkpoint_epoch(store, trial)
        if epoch is None:
            parts.append(f"{trial_id} from the start ({NO_CHECKPOINT if trial.last_result else 'not started'})")
        else:
            parts.append(f"{trial_id} from its checkpoint after epoch {epoch}")
    lines = [f"resuming {store.name}: {len(kept)} finished trial(s) kept, {len(parts)} continued"
             + (f": {'; '.join(parts)}" if parts else "")]
    if any(NO_CHECKPOINT in p for p in parts):
        lines.append(f"a trial without a checkpoint trains again from its start ({when}: trainer.checkpoint_interval_s, "
                     "trainer.checkpoint_every)")
    return lines
