"""A multi-node Ray cluster on one machine (`ray.cluster_utils.Cluster`): a head node without
GPUs and two worker nodes with two fake GPUs each (Ray's logical `num_gpus`; CUDA stays
unavailable, so the trainer runs on CPU). What a real cluster relies on, proven here:

- more trials than GPUs: every trial gets exactly one GPU, two trials never hold the same GPU
  of a node at the same time, at most as many trials run as there are GPUs (although the CPUs
  would allow twice as many), and trials spread over both nodes;
- half a GPU per trial: two trials share a GPU at once, never three;
- a worker node removed mid-sweep: its trial is rescheduled on another node from its last
  checkpoint, and ends bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest

from cluster_fixtures import (
    assert_trial_matches_uninterrupted, finish, kill_group, make_probe, module_cluster, result_rows, start_cli, tail, wait_for,
    worker_ids,
)
from sweep_fixtures import SMOKE, TINY_SWEEP

pytestmark = pytest.mark.slow

WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER = 2, 2, 4
TOTAL_GPUS = WORKERS * GPUS_PER_WORKER


cluster = module_cluster(WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER)


# -- scheduling --------------------------------------------------------------------------------


def _probed_sweep(cluster, tmp_path, monkeypatch, name: str, n: int, rendezvous: int, *overrides: str):
    """A sweep of n trials through run_sweep (this process is the driver), every trial probed;
    returns (trials table, probe records), after checking what holds for any GPU request."""
    from tune_gems.sweep import trainable
    from tune_gems.sweep.driver import run_sweep

    probe_dir = tmp_path / f"probe-{name}"
    probe_dir.mkdir()
    monkeypatch.setattr(trainable, "train_trial", make_probe(str(probe_dir), rendezvous=rendezvous))
    # max_concurrent_trials above what fits, so that only resources hold trials back
    out = run_sweep(SMOKE, [*TINY_SWEEP, f"num_samples={n}", f"max_concurrent_trials={n}", *overrides], storage=str(tmp_path), name=name)
    trials = out.trials
    assert len(trials) == n and set(trials["status"]) == {"TERMINATED"}, trials[["trial_id", "status", "error"]]
    workers = worker_ids(cluster)
    gpu_names = {str(g) for g in range(GPUS_PER_WORKER)}
    assert set(trials["node_id"]) <= workers  # never on the GPU-less head
    assert set(trials["gpu_ids"]) <= gpu_names, trials["gpu_ids"]  # one id each: no "0,1", no ""

    probes = [json.loads(f.read_text()) for f in sorted(probe_dir.glob("*.json"))]
    assert len(probes) == n
    for p in probes:
        assert p["gpu_ids"] in gpu_names and p["node_id"] in workers, p
        assert p["cuda_visible_devices"] == p["gpu_ids"], p  # a CUDA process would see its GPU only
    by_seed = trials.set_index("seed")  # the table's placement is the trial's own
    for p in probes:
        assert (by_seed.loc[p["seed"], "node_id"], by_seed.loc[p["seed"], "gpu_ids"]) == (p["node_id"], p["gpu_ids"])
    return trials, probes


def _peak(probes) -> int:
    """Most trials running at the same moment."""
    events = sorted([(p["start"], 1) for p in probes] + [(p["end"], -1) for p in probes], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _per_gpu(probes) -> dict:
    key = lambda p: (p["node_id"], p["gpu_ids"])  # noqa: E731
    return {k: list(g) for k, g in itertools.groupby(sorted(probes, key=key), key=key)}


def test_more_trials_than_gpus_one_gpu_each_never_shared_spread_over_nodes(cluster, tmp_path, monkeypatch):
    """resources.gpu unset: 1 GPU per trial because the cluster has GPUs."""
    n = TOTAL_GPUS + 1  # one trial more than GPUs: it waits for a GPU although CPUs are free
    _, probes = _probed_sweep(cluster, tmp_path, monkeypatch, "whole", n, rendezvous=TOTAL_GPUS)
    for gpu, ps in _per_gpu(probes).items():
        assert _peak(ps) == 1, f"two trials held GPU {gpu} at once: {ps}"
    # as many trials at once as GPUs (the rendezvous), never more although the CPUs allow 2x
    assert _peak(probes) == TOTAL_GPUS
    # spread: every GPU of every worker node was used
    workers = worker_ids(cluster)
    assert set(_per_gpu(probes)) == {(w, str(g)) for w in workers for g in range(GPUS_PER_WORKER)}


def test_half_a_gpu_per_trial_puts_two_trials_on_each_gpu_never_three(cluster, tmp_path, monkeypatch):
    """resources.gpu=0.5: 5 trials on 4 GPUs all run at once (so some GPU holds two), two to a GPU at most."""
    n = TOTAL_GPUS + 1
    _, probes = _probed_sweep(cluster, tmp_path, monkeypatch, "half", n, n, "resources.gpu=0.5", "resources.cpu=0.5")
    assert _peak(probes) == n  # more trials at once than GPUs
    peaks = {gpu: _peak(ps) for gpu, ps in _per_gpu(probes).items()}
    assert max(peaks.values()) == 2 and all(v <= 2 for v in peaks.values()), peaks


# -- a worker node removed mid-sweep -----------------------------------------------------------


def test_removed_worker_node_has_its_trial_rescheduled_from_its_checkpoint(cluster, tmp_path):
    """The sweep runs as its own driver process joined to the cluster (RAY_ADDRESS); once its
    trial has reported an epoch, the worker node running it is removed (all its processes
    killed, no graceful shutdown). Tune retries the trial on the other worker from the last
    checkpoint in shared storage; nothing is lost or repeated."""
    exp, log = tmp_path / "rm", tmp_path / "rm.log"
    epochs = 5
    p = start_cli(
        ["sweep", str(SMOKE), "--storage", str(tmp_path), "--name", "rm", *TINY_SWEEP, "num_samples=1",
         f"config.trainer.epochs={epochs}", "config.trainer.iterations_per_epoch=150", "config.trainer.checkpoint_every=1",
         "failure.max_failures=2"],
        log, env={"RAY_ADDRESS": cluster.address},
    )
    try:
        first = wait_for(lambda: [r for r in result_rows(exp) if r["epoch"] >= 1], 480, "the trial's first epoch")[0]
        assert not first["done"], "the trial finished before its node could be removed; make its epochs longer"
        victim = next(nd for nd in cluster.worker_nodes if nd.node_id == first["node_id"])
        cluster.remove_node(victim, allow_graceful=False)
        assert finish(p, log, 180) == 0, tail(log)
    finally:
        kill_group(p)

    rows = result_rows(exp)
    nodes = list(dict.fromkeys(r["node_id"] for r in rows))
    assert len(nodes) == 2 and nodes[0] == victim.node_id, f"expected a move to another node, got {nodes}"
    assert nodes[1] in worker_ids(cluster)
    after = [r["epoch"] for r in rows if r["node_id"] == nodes[1]]
    assert after[0] > 1 and after[-1] == epochs, f"epochs after the move: {after} (1 = restarted from scratch)"

    trials = pd.read_parquet(exp / "trials.parquet")
    history = pd.read_parquet(exp / "history.parquet")
    assert len(trials) == 1 and trials.loc[0, "status"] == "TERMINATED" and trials.loc[0, "node_id"] == nodes[1]
    assert history["epoch"].tolist() == list(range(1, epochs + 1))
    assert_trial_matches_uninterrupted(exp, trials.loc[0, "trial_id"])
