"""`tune-gems sweep`: validate, start or join Ray, run Tune + Optuna, write the result tables.

Everything a user can get wrong (spec, search space, data, the experiment name and folder, the
storage URI, memory for one trial) is checked before Ray starts, and nothing is written until
it passes; the trial resources are checked against the cluster as soon as it is joined.

- A local run starts a private Ray on loopback that dies with the driver
  (`tune_gems.sweep.local_ray`); RAY_ADDRESS (set by the user, or by `ray job submit`) joins a
  cluster instead.
- `--resume` continues the stored run: it reads the experiment's spec.yaml and refuses
  overrides that differ from it, naming the key.
- Ctrl-C stops the sweep the way Tune does (its state saved), writes the tables with the
  unfinished trials marked `UNFINISHED`, leaves their Optuna trials to `--resume`, and exits
  130 like `train`.
- One driver per local experiment folder (a lock, tune_gems.contracts.outputs).
"""

from __future__ import annotations

import copy
import datetime as _dt
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from tune_gems.data.summary import data_lines
from tune_gems.config.yaml_io import apply_overrides, dump_yaml, yaml_mapping
from tune_gems.config.dotted import flatten
from tune_gems.config.load import format_validation_error
from tune_gems.contracts.errors import ConfigError, OutputExistsError, ResourceError
from tune_gems.contracts.outputs import MARKER_FILE, check_output_folder, marker_body, marker_state, parse_marker, write_marker
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.paths import check_name
from tune_gems.contracts.run_record import (
    CHECKSUMS_KEY, DATA_KEY, check_data_unchanged, check_stored_unchanged, checksums, data_fingerprint, require_record,
)
from tune_gems.design.resources import check_training_fits
from tune_gems.sweep.console import closing_table, quiet_driver
from tune_gems.sweep.local_ray import start_or_join
from tune_gems.sweep.results import UNFINISHED, collect_tables, write_tables
from tune_gems.sweep.search import JOURNAL_FILE, clear_stale_journal_lock, close_orphaned_trials, make_searcher, optuna_trial_numbers
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import block_grid, designed_config, import_spec_plugins, load_spec, widest_trial
from tune_gems.sweep.storage import ExperimentStore, check_storage, is_uri
from tune_gems.trainer.run_setup import load_run_prices, prepare_market

from tune_gems.contracts.result_files import SPEC_FILE  # noqa: E402
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Set by Ray for the entrypoint of `ray job submit`."""
RESUME_MAY_DIFFER = ("name", "storage", "storage_timeout_s", "description")
"""Spec keys that may differ between the stored run and the command resuming it."""
NODE_POLL_S = 1.0


@dataclass
class SweepOutcome:
    experiment: str  # folder (path or URI)
    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    interrupted: bool = False
    resume_command: str = ""


def _resolve_data_path(spec: SweepSpec, spec_path: Path) -> None:
    """Relative data paths are relative to the current directory (where the user runs the
    command); made absolute here so the driver reads the same file wherever Ray runs it."""
    data = spec.config.get("data") or {}
    path = data.get("path")
    if path and isinstance(path, str) and not Path(path).is_absolute() and "://" not in path:
        data["path"] = str(Path(path).resolve())


def _gpus_per_trial(spec: SweepSpec) -> float:
    import ray

    if spec.resources.gpu is not None:
        return spec.resources.gpu
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def _print_summary(trials: pd.DataFrame, experiment: str, mode: str = "max") -> None:
    table = closing_table(trials, mode)  # the best objective first (tune_gems.sweep.console)
    # flushed at once: a driver attached to a running cluster can exit without flushing stdout
    print(f"\n{table}\n\nresults: {experiment}/{{trials,history,members}}.parquet\nanalyze: tune-gems analyze {experiment}", flush=True)


# -- resume: the stored spec is the run ----------------------------------------------------------


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    fa, fb = flatten(a), flatten(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        if key.split(".")[0] in RESUME_MAY_DIFFER:
            continue
        if fa.get(key) != fb.get(key):
            out.append((key, fa.get(key), fb.get(key)))
    return out


def _resolved(spec: SweepSpec) -> dict[str, Any]:
    """The spec as a tree whose config is the full resolved trainer config (defaults filled in)."""
    return {**spec.model_dump(mode="json"), "config": spec.base_config().to_dict()}


RESUME_FIX = "start a new sweep under another --name"


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
    for key, old, new in _differences(_resolved(stored), _resolved(asked)):
        raise ConfigError(
            f"{key}: the sweep {store.name} was started with {key}={old!r}, this command asks {new!r}; "
            "--resume continues the stored run (drop the override, or start a new --name)"
        )
    changed = [k for k, _, _ in _differences(_resolved(stored), _resolved(given))]
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


def _write_record(store: ExperimentStore, spec_text: bytes, data_record: dict[str, str] | None) -> None:
    """The experiment's marker, recording the spec's checksum and the data file's, then the spec."""
    import json

    fields: dict[str, Any] = {CHECKSUMS_KEY: checksums(None, **{SPEC_FILE: spec_text})}
    if data_record is not None:
        fields[DATA_KEY] = data_record
    if store.disk_dir is not None:
        write_marker(store.disk_dir, "sweep", **fields)
    else:
        store.write_bytes(MARKER_FILE, (json.dumps(marker_body("sweep", **fields)) + "\n").encode())
    store.write_bytes(SPEC_FILE, spec_text)


# -- up-front checks -----------------------------------------------------------------------------


def _check_memory(spec: SweepSpec, source: str) -> None:
    """One trial's memory on this machine, at the base config and at both ends of every
    searched parameter (a trial may land on either end), with the design's arms (the widest
    proposal: every searched gem wired)."""
    widest = widest_trial(spec) if spec.design != "none" else {}
    check_training_fits(designed_config(spec, widest), where=f"{source}: ")
    for key, space in spec.search.params.items():
        if space.type == "categorical" and not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in space.ends()):
            continue
        for value in space.ends():
            cfg = designed_config(spec, {**widest, key: value})
            check_training_fits(cfg, where=f"{source}: with search.params.{key}={value!r} ")


def check_plugins_dry(spec: SweepSpec, prices, source: str) -> None:
    """The plug-in gems' dry evaluation (tune_gems.trainer.member_gems.MemberGems.check), run here before Ray
    starts, as a trial would run it: on the widest trial (every searched gem wired), every
    plug-in gem at least measured, shrunk to one seed per arm and a minimal replay on the CPU
    (the check needs the shapes, not the size)."""
    from tune_gems.config.load import build_config
    from tune_gems.gems import run_gems
    from tune_gems.trainer.trainer import Trainer

    plugins = list((spec.config or {}).get("plugins") or [])
    if not plugins:
        return
    tree = designed_config(spec, widest_trial(spec)).to_dict()
    for gem in run_gems(plugins):
        if not gem.builtin and tree["gems"][gem.name]["mode"] == "off":
            tree["gems"][gem.name]["mode"] = "measure"
    tc = tree["trainer"]
    tc.update(population=1, learning_starts=0, replay_capacity=max(64, tc["n_envs"] * (tc["n_step"] + 1)))
    tree.update(device="cpu", kernels="reference")
    try:
        Trainer(build_config(tree, "config"), prices=prices, log=lambda _line: None)
    except ConfigError as e:
        raise ConfigError(f"{source}: config.{e}") from None


def _fits(node: dict[str, Any], cpu: float, gpu: float) -> bool:
    res = node.get("Resources", {})
    return res.get("CPU", 0.0) >= cpu and res.get("GPU", 0.0) >= gpu


def check_trial_resources(cpu: float, gpu: float, wait_s: float) -> None:
    """A node of the cluster must be able to hold one trial, or Tune waits forever. With an
    autoscaling cluster (`resources.wait_for_nodes_s` > 0) warn and wait that long for one."""
    import ray

    def nodes() -> list[dict[str, Any]]:
        return [n for n in ray.nodes() if n.get("Alive")]

    if any(_fits(n, cpu, gpu) for n in nodes()):
        return
    alive = nodes()
    best_cpu = max((n.get("Resources", {}).get("CPU", 0.0) for n in alive), default=0.0)
    best_gpu = max((n.get("Resources", {}).get("GPU", 0.0) for n in alive), default=0.0)
    key = "resources.gpu" if gpu > best_gpu else "resources.cpu"
    msg = (
        f"{key}: one trial asks {cpu:g} CPU and {gpu:g} GPU, but no node of the cluster has that "
        f"(largest: {best_cpu:g} CPU, {best_gpu:g} GPU on {len(alive)} node(s))"
    )
    if wait_s <= 0:
        raise ResourceError(f"{msg}; lower it, or set resources.wait_for_nodes_s to wait for an autoscaler")
    print(f"tune-gems sweep: warning: {msg}; waiting up to {wait_s:g}s for a node that fits (resources.wait_for_nodes_s)", flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(NODE_POLL_S)
        if any(_fits(n, cpu, gpu) for n in nodes()):
            return
    raise ResourceError(f"{msg}, and none came within resources.wait_for_nodes_s={wait_s:g}s")


def _prepare_store(storage: str, name: str, name_field: str, resume: bool, spec: SweepSpec) -> ExperimentStore:
    """Storage reachable and writable, the experiment folder fresh (or, resuming, a sweep's)."""
    check_storage(storage, timeout_s=spec.storage_timeout_s)
    store = ExperimentStore(storage, name)
    if resume:
        if not store.has(SPEC_FILE):
            raise ConfigError(f"{store.uri}: no sweep to resume there")
    elif store.exists():
        raise OutputExistsError(f"{store.uri}: experiment already exists; use --resume to finish it or another --name")
    if store.disk_dir is not None:
        data_path = (spec.config.get("data") or {}).get("path")
        check_output_folder(store.disk_dir, kind="sweep", field=name_field, resume=resume,
                            inputs=[data_path] if isinstance(data_path, str) else [])
    return store


# -- the sweep -----------------------------------------------------------------------------------


def run_sweep(
    spec_path: str | Path,
    overrides: list[str] | None = None,
    storage: str | None = None,
    name: str | None = None,
    resume: bool = False,
    verbose: bool = False,
    dry_run: bool = False,
) -> SweepOutcome | None:
    """Run (or, with `resume`, finish) the sweep; `verbose` shows Ray's per-checkpoint lines and
    experiment-snapshot warnings (tune_gems.sweep.console), hidden by default. `dry_run`: every
    check, then the plan (tune_gems.trainer.dry_run) instead of the sweep; nothing written, returns None."""
    spec_path = Path(spec_path)
    overrides = list(overrides or [])
    spec = load_spec(spec_path, overrides)
    _resolve_data_path(spec, spec_path)

    if name is not None:
        check_name(name, "--name")  # an empty --name is refused, not replaced by a default
    if resume and not (name or spec.name):
        raise ConfigError("--resume needs --name: the experiment to finish")
    name_field = "--name" if name else "name"
    name = name or spec.name or f"{spec_path.stem}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    storage = storage or spec.storage
    if os.environ.get(RAY_JOB_ENV) and not is_uri(storage) and not Path(storage).is_absolute():
        raise ConfigError(
            f"storage: {storage!r} is relative; inside a Ray job it would land in the job's temporary working "
            "directory: pass --storage with an absolute path on shared storage or a URI"
        )
    check_name(name, name_field, root=None if is_uri(storage) and not storage.startswith("file://") else storage.removeprefix("file://"))
    store = _prepare_store(storage, name, name_field, resume, spec)
    if resume:
        spec = stored_spec(store, overrides, spec, spec_path)
    base_cfg = spec.base_config()
    _check_memory(spec, str(spec_path))
    prices = load_run_prices(base_cfg)
    market = prepare_market(base_cfg, torch.device("cpu"), prices)  # validates splits and segment lengths now
    check_plugins_dry(spec, prices, str(spec_path))  # before anything is printed: a refusal is one line
    data_record = None if resume else data_fingerprint(base_cfg.data)  # the bytes just read
    for line in data_lines(base_cfg.data, market):
        print(f"tune-gems sweep: {line}", flush=True)
    if dry_run:
        from tune_gems.trainer.dry_run import sweep_plan

        widest = designed_config(spec, widest_trial(spec)) if spec.design != "none" else base_cfg
        print("\n".join(sweep_plan(spec, _resolved(spec), widest, prices)), flush=True)
        return None

    with quiet_driver(verbose):  # Ray's start-up warnings only with --verbose (tune_gems.sweep.console)
        session = start_or_join(lost_hint=f"its state is saved; continue with: {resume_command(spec_path, store, name)}")
    lock = None
    try:
        resources = {"cpu": spec.resources.cpu, "gpu": _gpus_per_trial(spec)}
        check_trial_resources(resources["cpu"], resources["gpu"], spec.resources.wait_for_nodes_s)
        store.make()
        if store.disk_dir is not None:
            lock = OutputLock(store.disk_dir, field=name_field).acquire()
        if not resume:
            _write_record(store, dump_yaml(spec.model_dump(mode="json")).encode(), data_record)
        else:
            store.pull_journal(JOURNAL_FILE)
            clear_stale_journal_lock(store.journal_path(JOURNAL_FILE))  # a killed driver's (the lock above is ours)
        with quiet_driver(verbose):
            return _fit(spec, store, name, prices, resources, resume, spec_path, verbose)
    finally:
        if lock is not None:
            lock.release()
        session.stop()


def _fit(
    spec: SweepSpec, store: ExperimentStore, name: str, prices, resources: dict, resume: bool, spec_path: Path, verbose: bool = False
) -> SweepOutcome:
    from ray import tune

    from tune_gems.sweep.progress import SweepConsole, TrialEvents, ray_verbosity
    from tune_gems.sweep.tracking import tracking_callbacks
    from tune_gems.sweep.trainable import train_trial

    trainable = tune.with_parameters(
        train_trial, base=spec.config, prices=prices, objective=spec.objective.metric, design=spec.design, verbose=verbose
    )
    trainable = tune.with_resources(trainable, resources)
    mirror = (store.storage, name) if store.local_dir is None else None
    if resume:
        tuner = tune.Tuner.restore(store.uri, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        blocks = block_grid(spec)
        tuner = tune.Tuner(
            trainable,
            # blocks: Tune's grid, one trial per block, each run exactly once (it is part of Tune's
            # saved state, so a resumed driver neither repeats nor skips a block); nothing to search
            param_space={key: tune.grid_search(values) for key, values in blocks.items()},
            tune_config=tune.TuneConfig(
                search_alg=None if blocks else make_searcher(spec, name, store.journal_path(JOURNAL_FILE), mirror),
                scheduler=_scheduler(spec),
                num_samples=1 if blocks else spec.num_samples,
                max_concurrent_trials=spec.max_concurrent_trials,
                # one actor runs trial after trial: its process, imports, CUDA context, loaded
                # extension and markets stay (issue 33; what a trial may leave: trainable.py)
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=store.storage,
                failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures, fail_fast=spec.failure.fail_fast),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.checkpoints_to_keep),
                callbacks=[
                    SweepConsole(spec.num_samples, spec.objective.metric, spec.objective.mode, verbose),
                    TrialEvents(),  # TensorBoard: train's tags, one run per trial id (in place of Tune's logger)
                    *tracking_callbacks(spec.tracking),
                ],
                verbose=ray_verbosity(verbose),
            ),
        )
    results = tuner.fit()
    statuses = stored_trial_statuses(store)
    interrupted = any(s not in ("TERMINATED", "ERROR") for s in statuses.values())
    journal = store.journal_path(JOURNAL_FILE)
    if journal.is_file() and not interrupted:  # unfinished trials are still Tune's: --resume finishes them
        closed = close_orphaned_trials(name, journal)
        if closed:
            print(f"tune-gems sweep: marked {closed} orphaned Optuna trial(s) FAIL (asked before a driver restart)", flush=True)
    tables = collect_tables(results, spec.config, name, statuses, spec.design)
    if journal.is_file() and len(tables.trials):  # the join key to the Optuna study
        numbers = optuna_trial_numbers(name, journal)
        tables.trials["optuna_trial"] = tables.trials["trial_id"].map(numbers).astype("Int64")
    write_tables(store, tables)
    trials, history, members = tables.trials, tables.history, tables.members
    store.push_journal(JOURNAL_FILE)
    _print_summary(trials, store.uri, spec.objective.mode)
    command = resume_command(spec_path, store, name)
    if interrupted:
        n = int((trials["status"] == UNFINISHED).sum()) if len(trials) else 0
        print(f"tune-gems sweep: interrupted with {n} trial(s) unfinished; continue with: {command}", flush=True)
    return SweepOutcome(store.uri, trials, history, members, interrupted, command)


def resume_command(spec_path: Path, store: ExperimentStore, name: str) -> str:
    """The command that continues this sweep."""
    return f"tune-gems sweep {spec_path} --storage {store.storage} --name {name} --resume"


def stored_trial_statuses(store: ExperimentStore) -> dict[str, str]:
    """{trial_id: status} from Tune's newest persisted experiment state (what `--resume` will
    read). Tune writes it one last time when a sweep is interrupted, with the unfinished trials
    RUNNING or PENDING, then marks its in-memory trials TERMINATED while cleaning up: so the
    file, not the ResultGrid, tells an interrupted trial from a finished one."""
    import json

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
            trial = json.loads(entry[0])
            out[str(trial["trial_id"])] = str(trial["status"])
        return out
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}


def _scheduler(spec: SweepSpec):
    if spec.scheduler.type == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        metric="objective",
        mode=spec.objective.mode,
        time_attr="training_iteration",
        max_t=spec.base_config().trainer.epochs,
        grace_period=spec.scheduler.grace_period,
        reduction_factor=spec.scheduler.reduction_factor,
    )
