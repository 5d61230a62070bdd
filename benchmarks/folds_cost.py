"""What folds cost (issues 20 and 30): P, iteration time and memory per member for folds x
arms x seeds in one graph, against the same arms and seeds without folds.

    python benchmarks/folds_cost.py [--folds 4] [--scheme walk_forward|purged] [--embargo 0]
                                    [--arms 3] [--seeds 64] [--out FILE.json]
    bash benchmarks/gpu_session.sh folds      # the issue's shape on the GPU: 4 x 3 x 64

The moonshot's shapes (benchmarks/moonshot.yaml: batch 128, 16 envs, replay 50,000 per member,
every gem measured; arms: measured, G10 wired, G12 wired, the first `--arms` of them) on the
default synthetic series (6,000 rows: 4 validation windows of 900 rows before the test
segment). The cases, built one after another on one device and then timed in interleaved
rounds (round r of every case, then round r + 1: load that drifts during the run hits every
case alike): 1 fold (P = arms x seeds), `--folds` walk-forward folds (P = folds x arms x
seeds) and, with `--scheme purged`, `--folds` purged folds (`data.folds.scheme=purged`: each
fold training on up to two runs of rows, its episode starts mapping one offset onto two runs;
the walk-forward case then has windows of half a purged group, since K windows of a whole
group leave fold 0 nothing to train on: the same training shapes, so the ratio of their
iterations is the scheme's own cost, while a validation pass walks half the steps). Per case:
P, microseconds per iteration (graph replays, median of `--rounds` rounds of `--reps`),
microseconds per member-iteration, seed-steps per second, peak device memory and memory per
member (CUDA only), one validation evaluation in milliseconds, and the set-up seconds
(trainer, replay fill, warm-up and capture). The last lines: the folds case over the 1-fold
case, per iteration and per member-iteration, and purged over walk-forward.

`--device cpu --small` runs tiny shapes on a CPU (a check of the script, not a figure).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from tune_gems.design.arms import ArmsConfig
from tune_gems.config.load import load_config
from tune_gems.trainer.trainer import Trainer

ARMS = [
    {"name": "measured"},
    {"name": "g10-wired", "gems.g10.mode": "wire", "gems.g10.weight": 0.1},
    {"name": "g12-wired", "gems.g12.mode": "wire", "gems.g12.weight": 0.1},
]
SHAPES = [
    "trainer.batch_size=128", "trainer.n_envs=16", "trainer.replay_capacity=50000", "trainer.learning_starts=2000",
    "trainer.checkpoint_every=0", "trainer.checkpoint_interval_s=0",
    "gems.g6.mode=measure", "gems.g10.mode=measure", "gems.g12.mode=measure",
]  # fmt: skip
SMALL = [
    "trainer.batch_size=16", "trainer.n_envs=2", "trainer.replay_capacity=512", "trainer.learning_starts=32",
    "env.window=8", "env.episode_length=32", "model.hidden=16", "model.stream_hidden=8", "model.atoms=11",
    "model.predictor_hidden=16", "data.synthetic.n=1200", "kernels=reference",
]  # fmt: skip


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_round(trainer: Trainer, reps: int) -> float:
    """Microseconds per iteration over `reps` iterations (graph replays on CUDA)."""
    _sync(trainer.device)
    t0 = time.perf_counter()
    for _ in range(reps):
        trainer.runner()
    _sync(trainer.device)
    return (time.perf_counter() - t0) * 1e6 / reps


def build_case(overrides: list[str], arms: list[dict], args) -> tuple[Trainer, dict]:
    """A trainer of the case, prefilled and warmed up (on CUDA the warm-up includes the graph
    capture), and what building it cost: set-up seconds and the peak device memory it added."""
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
    cfg = load_config(None, overrides)
    cfg = cfg.model_copy(update={"arms": ArmsConfig.model_validate({"list": arms})})
    t0 = time.perf_counter()
    trainer = Trainer(cfg, log=None)
    trainer._prefill()
    for _ in range(args.warmup):
        trainer.runner()
    _sync(device)
    P = trainer.learner.P
    folds = cfg.data.folds
    row = {
        "folds": trainer.market.n_folds, "scheme": folds.scheme, "arms": len(arms), "seeds": cfg.trainer.population, "P": P,
        "setup_s": round(time.perf_counter() - t0, 1), "peak_mem_mb": None, "mem_per_member_mb": None,
    }  # fmt: skip
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base_mem
        row.update(peak_mem_mb=round(peak / 2**20, 1), mem_per_member_mb=round(peak / P / 2**20, 2))
    return trainer, row


def finish_case(trainer: Trainer, row: dict, times: list[float]) -> dict:
    """The case's row: the median of its rounds, per member-iteration, and one validation pass."""
    us = statistics.median(times)
    _sync(trainer.device)
    e0 = time.perf_counter()
    trainer.evaluator.evaluate("val")
    _sync(trainer.device)
    P = row["P"]
    return {
        **row, "iter_us": round(us, 1), "us_per_member_iter": round(us / P, 3),
        "seed_steps_per_s": round(P * trainer.cfg.trainer.n_envs / (us * 1e-6)),
        "eval_ms": round((time.perf_counter() - e0) * 1e3, 1), "rounds_us": [round(t, 1) for t in times],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--scheme", choices=("walk_forward", "purged"), default="walk_forward")
    ap.add_argument("--embargo", type=int, default=0, help="rows of embargo after each group (purged only)")
    ap.add_argument("--arms", type=int, default=3, choices=range(1, len(ARMS) + 1))
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a CPU check of the script)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    base = [f"device={args.device}", f"trainer.population={args.seeds}", *(SMALL if args.small else SHAPES)]
    arms = ARMS[: args.arms]
    k = f"data.folds.k={args.folds}"
    built = [build_case([*base, "data.folds.k=1"], arms, args)]
    if args.scheme == "purged":
        purged = build_case([*base, k, "data.folds.scheme=purged", f"data.folds.embargo={args.embargo}"], arms, args)
        lo, hi = purged[0].market.bounds[0].val
        built += [build_case([*base, k, f"data.folds.val_length={(hi - lo) // 2}"], arms, args), purged]
    else:
        built.append(build_case([*base, k], arms, args))
    times: list[list[float]] = [[] for _ in built]
    for _ in range(args.rounds):  # the cases' rounds interleaved: load that drifts hits them alike
        for i, (trainer, _row) in enumerate(built):
            times[i].append(time_round(trainer, args.reps))
    rows = [finish_case(trainer, row, t) for (trainer, row), t in zip(built, times)]
    del built
    print(f"{'folds':>5} {'scheme':>12} {'arms':>4} {'seeds':>5} {'P':>5} {'iter_us':>9} {'us/member':>9} {'seed-steps/s':>13} "
          f"{'MB peak':>8} {'MB/member':>9} {'eval ms':>8} {'setup s':>7}")  # fmt: skip
    for r in rows:
        mem = f"{r['peak_mem_mb']:>8.1f} {r['mem_per_member_mb']:>9.2f}" if r["peak_mem_mb"] is not None else f"{'-':>8} {'-':>9}"
        print(f"{r['folds']:>5} {r['scheme']:>12} {r['arms']:>4} {r['seeds']:>5} {r['P']:>5} {r['iter_us']:>9.1f} "
              f"{r['us_per_member_iter']:>9.3f} {r['seed_steps_per_s']:>13,} {mem} {r['eval_ms']:>8.1f} {r['setup_s']:>7.1f}")  # fmt: skip
    one, many = rows[0], rows[1]
    ratio = {"iteration": round(many["iter_us"] / one["iter_us"], 2), "per_member": round(many["us_per_member_iter"] / one["us_per_member_iter"], 3)}
    print(f"{args.folds} folds / 1 fold: iteration {ratio['iteration']:.2f}x for {many['P'] // one['P']}x the members, "
          f"per member-iteration {ratio['per_member']:.3f}x")  # fmt: skip
    if args.scheme == "purged":
        purged = rows[2]
        ratio["purged_over_walk_forward"] = round(purged["iter_us"] / many["iter_us"], 3)
        print(f"{args.folds} purged / {args.folds} walk-forward folds (the same shapes): iteration {ratio['purged_over_walk_forward']:.3f}x")
    if args.out:
        machine = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "benchmark": "folds_cost", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine, "torch": torch.__version__, "command": "python " + " ".join(shlex.quote(x) for x in sys.argv),
            "config": base, "arms": arms, "rows": rows, "folds_over_one": ratio,
        }, indent=1))  # fmt: skip
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
