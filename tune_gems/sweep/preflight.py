"""The sweep's checks before anything is written or Ray starts, each refusal one line naming the key."""

from __future__ import annotations

import os
import time
from typing import Any

from tune_gems.contracts.errors import ConfigError, OutputExistsError, ResourceError
from tune_gems.contracts.outputs import check_output_folder
from tune_gems.contracts.result_files import SPEC_FILE
from tune_gems.design.resources import check_training_fits
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import designed_config, widest_trial
from tune_gems.sweep.storage import ExperimentStore, check_storage

NODE_POLL_S = 1.0


def check_memory(spec: SweepSpec, source: str) -> None:
    """One trial's memory at the base config and at both ends of every searched parameter, widest arms."""
    widest = widest_trial(spec) if spec.design != "none" else {}
    gpu_trial = bool(spec.resources.gpu)  # its trials run on a GPU node, whatever this machine has
    check_training_fits(designed_config(spec, widest), where=f"{source}: ", gpu_trial=gpu_trial)
    for key, space in spec.search.params.items():
        if space.type == "categorical" and not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in space.ends()):
            continue
        for value in space.ends():
            cfg = designed_config(spec, {**widest, key: value})
            check_training_fits(cfg, where=f"{source}: with search.params.{key}={value!r} ", gpu_trial=gpu_trial)


def trials_on_cpu(spec: SweepSpec) -> bool:
    """Whether the trials run on the CPU (a cluster's GPUs are known only once joined)."""
    if spec.base_config().device == "cpu" or spec.resources.gpu == 0:
        return True
    if spec.resources.gpu is not None or os.environ.get("RAY_ADDRESS"):
        return False
    import torch

    return not torch.cuda.is_available()


def check_layer_kernel(spec: SweepSpec, source: str) -> None:
    """`model.layer_kernel: triton` for trials on the CPU without Triton's interpreter: refused now."""
    space = spec.search.params.get("model.layer_kernel")
    keys = [("config.model.layer_kernel", spec.base_config().model.layer_kernel)]
    keys += [("search.params.model.layer_kernel", c) for c in (space.choices or () if space is not None else ())]
    for key, kernel in keys:
        if not kernel.startswith("triton") or not trials_on_cpu(spec):
            continue
        from tune_gems.ops.triton_layers import check_runs_on  # imports triton: only for a triton sweep

        try:
            check_runs_on("cpu")
        except ConfigError as e:
            raise ConfigError(f"{source}: {key}: {str(e).removeprefix('model.layer_kernel=')}") from None


def check_plugins_dry(spec: SweepSpec, prices, source: str) -> None:
    """The plug-in gems' dry evaluation before Ray starts, on the widest trial shrunk to the CPU."""
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
    """A node must hold one trial, or Tune waits forever (`resources.wait_for_nodes_s`: wait for one)."""
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


def prepare_store(storage: str, name: str, name_field: str, resume: bool, spec: SweepSpec) -> ExperimentStore:
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
