"""Arms in one trial against the same members as one trial per arm, side by side (issue 12).

    python benchmarks/arms_vs_trials.py [--epochs 2] [--iterations 500] [--population 64] [--out FILE.json]

The moonshot's three gem configurations (benchmarks/moonshot.yaml: every gem measured; G10
wired at 0.1; G12 wired at 0.1) x `--population` seeds, the moonshot's shapes (batch 128, 16
envs, replay 50,000 per member), trained in one process on one device two ways:
- arms: ONE trainer with the three configurations as arms (P = 3 x population, one graph);
- trials: three trainers, one per configuration (P = population each), one after another,
  as a sweep without arms ran them.
Each row: set-up seconds (building the trainer, filling replay, first capture), training
seconds (the trainer's own per-epoch `train_s`), evaluation seconds (`eval_s`) and the total;
the ratio trials / arms is measured in this one run. Evaluation per epoch against training per
epoch is issue 15's "cheap evaluation" figure (goal <= 10%) at the trials' shape.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.config.load import load_config
from tune_gems.trainer.trainer import Trainer

ARMS = [
    {"name": "measured"},
    {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1},
    {"name": "g12-wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.1},
]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_trainer(cfg) -> dict:
    t0 = time.perf_counter()
    trainer = Trainer(cfg, log=None)
    train = evals = 0.0
    first = None
    while not trainer.done:
        r = trainer.run_epoch()
        if first is None:  # the first epoch also fills replay and captures the graph
            first = time.perf_counter() - t0
        train += r.metrics["train_s"]
        evals += r.metrics["eval_s"]
    _sync()
    total = time.perf_counter() - t0
    return {"members": trainer.learner.P, "total_s": total, "train_s": train, "eval_s": evals, "setup_s": total - train - evals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--replay", type=int, default=50_000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    overrides = [
        f"device={args.device}", f"trainer.population={args.population}", f"trainer.epochs={args.epochs}",
        f"trainer.iterations_per_epoch={args.iterations}", "trainer.batch_size=128", "trainer.n_envs=16",
        f"trainer.replay_capacity={args.replay}", "trainer.learning_starts=2000", "trainer.checkpoint_every=0",
        "gems.g6.mode=measure", "gems.g10.mode=measure", "gems.g12.mode=measure",
    ]  # fmt: skip
    base = load_config(None, overrides)
    with_arms = base.model_copy(update={"arms": ArmsConfig.model_validate({"list": ARMS})})
    rows = {"arms": _time_trainer(with_arms)}
    trials = [_time_trainer(arm.config) for arm in expand_arms(with_arms)]
    rows["trials"] = {k: (trials[0][k] if k == "members" else sum(t[k] for t in trials)) for k in trials[0]}
    rows["trials"]["members"] = sum(t["members"] for t in trials)
    print(f"{'how':8s} {'members':>7s} {'setup s':>8s} {'train s':>8s} {'eval s':>7s} {'total s':>8s}")
    for how, r in rows.items():
        print(f"{how:8s} {r['members']:7d} {r['setup_s']:8.1f} {r['train_s']:8.1f} {r['eval_s']:7.2f} {r['total_s']:8.1f}")
    ratio = {k: rows["trials"][k] / rows["arms"][k] for k in ("train_s", "total_s")}
    eval_share = {how: r["eval_s"] / r["train_s"] for how, r in rows.items()}
    print(f"trials / arms: training {ratio['train_s']:.2f}x, total {ratio['total_s']:.2f}x")
    print(
        f"evaluation / training per epoch: {eval_share['trials']:.1%} at P = {args.population} (goal <= 10%), "
        f"{eval_share['arms']:.1%} at P = {rows['arms']['members']}"
    )
    if args.out:
        machine = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
        with open(args.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "machine": machine, "torch": torch.__version__, "args": vars(args),
                       "rows": rows, "trials_over_arms": ratio, "eval_over_train": eval_share}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
