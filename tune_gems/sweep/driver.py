"""`tune-gems sweep`: validate everything before Ray starts, start a private loopback Ray or join
RAY_ADDRESS, run Tune + Optuna, write the tables; Ctrl-C saves Tune's state and exits 130 for
`--resume`. The steps live in `preflight`, `resume`, `tune_run` and `outcome`."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import torch

from tune_gems.config.yaml_io import dump_yaml
from tune_gems.contracts.errors import ConfigError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import update_marker
from tune_gems.contracts.paths import check_name
from tune_gems.contracts.result_files import JOURNAL_FILE
from tune_gems.contracts.run_record import data_fingerprint
from tune_gems.data.summary import data_lines
from tune_gems.sweep.console import quiet_driver
from tune_gems.sweep.local_ray import check_ray_address, probe_cluster, start_or_join
from tune_gems.sweep.outcome import SweepOutcome, finish_sweep
from tune_gems.sweep.preflight import check_layer_kernel, check_memory, check_plugins_dry, check_trial_resources, prepare_store
from tune_gems.sweep.resume import resolved_spec, restart_lines, resume_command, stored_spec, write_record
from tune_gems.sweep.search import clear_stale_journal_lock
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import designed_config, load_spec, widest_trial
from tune_gems.sweep.storage import is_uri
from tune_gems.sweep.tune_run import fit_tuner
from tune_gems.trainer.run_setup import load_run_prices, prepare_market, seal_record

RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _resolve_data_path(spec: SweepSpec, spec_path: Path) -> None:
    """Relative data paths made absolute here, wherever Ray runs the driver."""
    data = spec.config.get("data") or {}
    entries = data.get("histories") if isinstance(data.get("histories"), list) else []
    for where in (data, *(h for h in entries if isinstance(h, dict))):  # data.path and every history's own
        path = where.get("path")
        if path and isinstance(path, str) and not Path(path).is_absolute() and "://" not in path:
            where["path"] = str(Path(path).resolve())


def _gpus_per_trial(spec: SweepSpec) -> float:
    import ray

    if spec.resources.gpu is not None:
        return spec.resources.gpu
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def run_sweep(spec_path: str | Path, overrides: list[str] | None = None, storage: str | None = None,
        name: str | None = None, resume: bool = False, verbose: bool = False,
        dry_run: bool = False) -> SweepOutcome | None:
    """Run (or with `resume`, finish) the sweep; `dry_run`: every check, then the plan, returning None."""
    check_ray_address()  # a RAY_ADDRESS Ray cannot take, refused before anything else
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
    store = prepare_store(storage, name, name_field, resume, spec)
    if resume:
        spec = stored_spec(store, overrides, spec, spec_path)
    base_cfg = spec.base_config()
    check_memory(spec, str(spec_path))
    check_layer_kernel(spec, str(spec_path))  # trials on the CPU without Triton's interpreter: refused before Ray
    prices = load_run_prices(base_cfg)
    # validates splits and segment lengths now, on the series' one path: every path has its length and
    # dates, and the trials build their own markets (their P paths) where they run
    market = prepare_market(base_cfg, torch.device("cpu"), prices, n_seed_indices=1)
    check_plugins_dry(spec, prices, str(spec_path))  # before anything is printed: a refusal is one line
    data_record = None if resume else data_fingerprint(base_cfg.data, seal_record(base_cfg, prices))  # the bytes just read
    if not dry_run:
        probe_cluster()  # RAY_ADDRESS answers, or one line now, before any output (Ray's client would wait minutes)
    for line in [*data_lines(base_cfg.data, market), *(restart_lines(store, spec) if resume else [])]:
        print(f"tune-gems sweep: {line}", flush=True)
    if dry_run:
        from tune_gems.trainer.dry_run import sweep_plan

        widest = designed_config(spec, widest_trial(spec)) if spec.design != "none" else base_cfg
        print("\n".join(sweep_plan(spec, resolved_spec(spec), widest, prices)), flush=True)
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
            write_record(store, dump_yaml(spec.model_dump(mode="json")).encode(), data_record)
        else:
            if store.disk_dir is not None:  # a resume under other CPU values adds them to the record
                update_marker(store.disk_dir)
            store.pull_journal(JOURNAL_FILE)
            clear_stale_journal_lock(store.journal_path(JOURNAL_FILE))  # a killed driver's (the lock above is ours)
        with quiet_driver(verbose):
            return finish_sweep(fit_tuner(spec, store, name, prices, resources, resume, verbose), spec, store, name, spec_path)
    finally:
        if lock is not None:
            lock.release()
        session.stop()
