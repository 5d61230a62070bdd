"""Seed blocks on a cluster of fake GPU nodes (`ray.cluster_utils.Cluster`: a head without GPUs,
two workers with two fake GPUs each; the trainers run on CPU). One design, `sweeps/seed_blocks.yaml`
shrunk, split into 4 blocks of 2 seeds per arm:

- every block runs once, all four at the same time on four distinct GPUs, each seeing only its
  own (`CUDA_VISIBLE_DEVICES`), and the blocks pool to the pairs and verdict of one trial with
  all 8 seeds;
- the driver killed (SIGKILL) mid-run and `--resume`d: every block once, every epoch once, each
  block's members bit-identical to an uninterrupted run of that block;
- a worker node removed mid-run: its blocks are rescheduled on the other node from their
  checkpoints and give the same bits as uninterrupted runs (the moved blocks are compared; the
  others never left their node).

The kill and the node removal split the design into 2 blocks (`FAULT_BLOCKS`): what they claim
holds per block, and each block costs a trial process's start-up twice and a reference run.
"""

from __future__ import annotations

import json
import signal

import pandas as pd
import pytest

from cluster_fixtures import (
    assert_trial_matches_uninterrupted, finish, kill_group, make_probe, module_cluster, result_rows, start_cli, tail, worker_ids,
    wait_for,
)
from sweep_fixtures import REPO, TINY_SWEEP

pytestmark = pytest.mark.slow

BLOCKS = REPO / "sweeps" / "seed_blocks.yaml"
WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER = 2, 2, 2
N_BLOCKS, SEEDS = 4, 2  # seeds per arm and block (TINY_SWEEP's population)
FAULT_BLOCKS = 2  # blocks of the killed driver's and the removed node's sweeps: one to a worker node when spread
SHRUNK = [o for o in TINY_SWEEP if not o.startswith(("num_samples=", "seeds="))]
TIMEOUT = 900  # a bound on polls (a loaded 2-core CI machine runs these sweeps 3-4x slower), never a sleep


cluster = module_cluster(WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER)


def _cli_args(tmp_path, name: str, *overrides: str) -> list[str]:
    return ["sweep", str(BLOCKS), "--storage", str(tmp_path), "--name", name, *SHRUNK, f"blocks.seed_blocks={FAULT_BLOCKS}",
            *overrides]


def _assert_every_block_once(exp, epochs: int, n_blocks: int) -> pd.DataFrame:
    """Each of the `n_blocks` blocks' trials once, finished, with every epoch once and each member
    row once; each block's members carry its own seed indices. Returns trials.parquet."""
    trials = pd.read_parquet(exp / "trials.parquet")
    history = pd.read_parquet(exp / "history.parquet")
    members = pd.read_parquet(exp / "members.parquet")
    assert sorted(trials["first_seed_index"]) == [b * SEEDS for b in range(n_blocks)], trials[["trial_id", "first_seed_index"]]
    assert set(trials["status"]) == {"TERMINATED"} and set(trials["epochs_done"]) == {epochs}
    assert history.groupby("trial_id")["epoch"].apply(list).map(lambda e: e == list(range(1, epochs + 1))).all()
    assert not members.duplicated(["trial_id", "epoch", "member"]).any()
    first = trials.set_index("trial_id")["first_seed_index"]
    own = members.groupby("trial_id")["seed_index"].agg(lambda s: sorted(set(s)))
    for tid, idx in own.items():
        assert idx == list(range(first[tid], first[tid] + SEEDS)), (tid, idx)
    return trials


def test_every_block_runs_once_on_its_own_gpu_and_the_blocks_pool_like_one_trial(cluster, tmp_path, monkeypatch):
    from tune_gems.analysis.analyze import analyze
    from tune_gems.sweep import trainable
    from tune_gems.sweep.driver import run_sweep

    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    # all four blocks must have begun before any trains: they hold four GPUs at once
    monkeypatch.setattr(trainable, "train_trial", make_probe(str(probe_dir), rendezvous=N_BLOCKS))
    out = run_sweep(BLOCKS, [*SHRUNK, f"blocks.seed_blocks={N_BLOCKS}"], storage=str(tmp_path), name="blocks")
    trials = _assert_every_block_once(tmp_path / "blocks", epochs=2, n_blocks=N_BLOCKS)
    probes = [json.loads(f.read_text()) for f in sorted(probe_dir.glob("*.json"))]
    assert sorted(p["first_seed_index"] for p in probes) == [b * SEEDS for b in range(N_BLOCKS)]  # each once
    held = {(p["node_id"], p["gpu_ids"]) for p in probes}
    assert len(held) == N_BLOCKS and {n for n, _ in held} == worker_ids(cluster), probes  # four distinct GPUs
    for p in probes:
        assert p["cuda_visible_devices"] == p["gpu_ids"] and p["gpu_ids"] in {"0", "1"}, p
    reported = result_rows(tmp_path / "blocks")  # Tune's result.json: what benchmarks/seed_blocks.py reads
    assert reported and all(r["cuda_visible_devices"] == r["gpu_ids"] for r in reported)
    placed = trials.set_index("first_seed_index")
    for p in probes:  # trials.parquet records where each block ran
        assert (placed.loc[p["first_seed_index"], "node_id"], placed.loc[p["first_seed_index"], "gpu_ids"]) == (p["node_id"], p["gpu_ids"])

    one = run_sweep(BLOCKS, [*SHRUNK, "blocks.seed_blocks=1", f"config.trainer.population={N_BLOCKS * SEEDS}"],
                    storage=str(tmp_path), name="one")
    key = ["arm", "seed_index", "seed", "epoch"]
    assert sorted(map(tuple, out.members[key].to_numpy().tolist())) == sorted(map(tuple, one.members[key].to_numpy().tolist()))
    a = analyze(tmp_path / "blocks", n_boot=50).verdicts.set_index("gem")
    b = analyze(tmp_path / "one", n_boot=50).verdicts.set_index("gem")
    for gem in ("g10", "g12"):  # wired in one arm each, paired with the measured arm
        assert a.loc[gem, "n_seeds"] == b.loc[gem, "n_seeds"] == N_BLOCKS * SEEDS
        assert a.loc[gem, "n_pairs"] == b.loc[gem, "n_pairs"] and a.loc[gem, "verdict"] == b.loc[gem, "verdict"]
        assert f"in {N_BLOCKS} trial(s)" in a.loc[gem, "design"] and "units: 8 seed(s), each on its own market path" in a.loc[gem, "design"]


def _snapshot(exp) -> list[str]:
    """Trial statuses in Tune's newest persisted experiment state ([] while none is readable)."""
    files = sorted(exp.glob("experiment_state-*.json"))
    try:
        return [json.loads(t[0])["status"] for t in json.loads(files[-1].read_text())["trial_data"]] if files else []
    except (json.JSONDecodeError, KeyError, IndexError, FileNotFoundError):
        return []


def test_a_killed_driver_resumes_with_every_block_once_and_the_same_bits(cluster, tmp_path):
    exp, epochs = tmp_path / "drv", 3
    args = _cli_args(tmp_path, "drv", f"config.trainer.epochs={epochs}", "config.trainer.iterations_per_epoch=40",
                     "config.trainer.checkpoint_every=1")
    env = {"RAY_ADDRESS": cluster.address}
    p = start_cli(args, tmp_path / "run.log", env)
    try:
        def mid_run() -> bool:  # Tune's saved state holds every block, some still running, one epoch reported
            assert p.poll() is None, "the sweep finished before it could be killed: " + tail(tmp_path / "run.log")
            snap = _snapshot(exp)
            return len(snap) == FAULT_BLOCKS and "RUNNING" in snap and any(r["epoch"] >= 1 for r in result_rows(exp))

        wait_for(mid_run, TIMEOUT, "a snapshot of the blocks mid-run")
        kill_group(p, signal.SIGKILL)  # no handler runs, nothing is flushed
    finally:
        kill_group(p)
    assert not (exp / "trials.parquet").exists()  # it really died mid-run
    p = start_cli([*args, "--resume"], tmp_path / "resume.log", env)
    try:
        assert finish(p, tmp_path / "resume.log", TIMEOUT) == 0, tail(tmp_path / "resume.log")
    finally:
        kill_group(p)
    trials = _assert_every_block_once(exp, epochs, FAULT_BLOCKS)
    for tid in trials["trial_id"]:
        assert_trial_matches_uninterrupted(exp, tid)


def test_blocks_of_a_removed_node_are_rescheduled_and_give_the_same_bits(cluster, tmp_path):
    """Last in the module: it takes a worker node away."""
    exp, epochs = tmp_path / "rm", 4
    p = start_cli(
        _cli_args(tmp_path, "rm", f"config.trainer.epochs={epochs}", "config.trainer.iterations_per_epoch=40",
                  "config.trainer.checkpoint_every=1"),
        tmp_path / "rm.log", env={"RAY_ADDRESS": cluster.address},
    )
    try:
        first = wait_for(lambda: [r for r in result_rows(exp) if r["epoch"] >= 1 and not r["done"]], TIMEOUT, "a block's first epoch")[0]
        victim = next(nd for nd in cluster.worker_nodes if nd.node_id == first["node_id"])
        cluster.remove_node(victim, allow_graceful=False)
        assert finish(p, tmp_path / "rm.log", TIMEOUT) == 0, tail(tmp_path / "rm.log")
    finally:
        kill_group(p)
    trials = _assert_every_block_once(exp, epochs, FAULT_BLOCKS)
    rows = result_rows(exp)
    moved = {r["trial_id"] for r in rows if r["node_id"] == victim.node_id} & {r["trial_id"] for r in rows if r["node_id"] != victim.node_id}
    assert first["trial_id"] in moved, f"the victim's block did not move: {moved}"
    assert victim.node_id not in set(trials["node_id"])  # every block ended on the surviving worker
    for tid in moved:
        resumed = [r["epoch"] for r in rows if r["trial_id"] == tid and r["node_id"] != victim.node_id]
        assert resumed[0] > 1, f"block {tid} restarted from scratch ({resumed}), not from its checkpoint"
        assert_trial_matches_uninterrupted(exp, tid)
