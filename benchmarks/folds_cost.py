"""What folds cost (issues 20 and 30): P, iteration time and memory per member for folds x
arms x seeds in one graph, against the same arms and seeds without folds.

    python benchmarks/folds_cost.py [--folds 4] [--scheme walk_forward|purged] [--embargo 0]
                                    [--arms 3] [--seeds 64] [--out FILE.json]
    bash benchmarks/gpu_session.sh folds      # the issue's shape on the GPU: 4 x 3 x 64

`--scheme purged` times purged cross-validation (`data.folds.scheme=purged`: `--folds` groups,
each fold training on up to two runs of rows, so its episode starts map one offset onto two
runs) instead of walk-forward windows; the 1-fold case is the plain split either way.

The moonshot's shapes (benchmarks/moonshot.yaml: batch 128, 16 envs, replay 50,000 per member,
every gem measured; arms: measured, G10 wired, G12 wired, the first `--arms` of them) on the
default synthetic series (6,000 rows: 4 validation windows of 900 rows before the test
segment). Two cases, one after another on one device: 1 fold (P = arms x seeds) and `--folds`
folds (P = folds x arms x seeds). Per case: P, microseconds per iteration (graph replays,
median of `--rounds` rounds of `--reps`), microseconds per member-iteration, seed-steps per
second, peak device memory and memory per member (CUDA only), one validation evaluation in
milliseconds, and the set-up seconds (trainer, replay fill, capture). The last line: the
folds case over the 1-fold case, per iteration and per member-iteration.

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


def time_iterations(trainer: Trainer, warmup: int, reps: int, rounds: int) -> float:
    """Median microseconds per iteration over `rounds` rounds of `reps` (after `warmup`, which
    on CUDA includes the graph capture)."""
    for _ in range(warmup):
        trainer.runner()
    _sync(trainer.device)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            trainer.runner()
        _sync(trainer.device)
        times.append((time.perf_counter() - t0) * 1e6 / reps)
    return statistics.median(times)


def run_case(overrides: list[str], arms: list[dict], args) -> dict:
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
    us = time_iterations(trainer, args.warmup, args.reps, args.rounds)
    setup_s = time.perf_counter() - t0 - us * 1e-6 * args.reps * args.rounds
    _sync(device)
    e0 = time.perf_counter()
    trainer.evaluator.evaluate("val")
    _sync(device)
    eval_ms = (time.perf_counter() - e0) * 1e3
    P = trainer.learner.P
    row = {
        "folds": trainer.market.n_folds, "arms": len(arms), "seeds": cfg.trainer.population, "P": P,
        "iter_us": round(us, 1), "us_per_member_iter": round(us / P, 3),
        "seed_steps_per_s": round(P * cfg.trainer.n_envs / (us * 1e-6)),
        "eval_ms": round(eval_ms, 1), "setup_s": round(setup_s, 1),
        "peak_mem_mb": None, "mem_per_member_mb": None,
    }  # fmt: skip
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base_mem
        row.update(peak_mem_mb=round(peak / 2**20, 1), mem_per_member_mb=round(peak / P / 2**20, 2))
    del trainer
    return row


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
    rows = []
    folds_keys = [f"data.folds.scheme={args.scheme}", *([f"data.folds.embargo={args.embargo}"] if args.scheme == "purged" else [])]
    print(f"{'folds':>5} {'arms':>4} {'seeds':>5} {'P':>5} {'iter_us':>9} {'us/member':>9} {'seed-steps/s':>13} "
          f"{'MB peak':>8} {'MB/member':>9} {'eval ms':>8} {'setup s':>7}")  # fmt: skip
    for folds in (1, args.folds):
        r = run_case([*base, f"data.folds.k={folds}", *(folds_keys if folds > 1 else [])], arms, args)
        r["scheme"] = args.scheme if folds > 1 else "walk_forward"
        rows.append(r)
        mem = f"{r['peak_mem_mb']:>8.1f} {r['mem_per_member_mb']:>9.2f}" if r["peak_mem_mb"] is not None else f"{'-':>8} {'-':>9}"
        print(f"{r['folds']:>5} {r['arms']:>4} {r['seeds']:>5} {r['P']:>5} {r['iter_us']:>9.1f} {r['us_per_member_iter']:>9.3f} "
              f"{r['seed_steps_per_s']:>13,} {mem} {r['eval_ms']:>8.1f} {r['setup_s']:>7.1f}", flush=True)  # fmt: skip
    one, many = rows
    ratio = {"iteration": round(many["iter_us"] / one["iter_us"], 2), "per_member": round(many["us_per_member_iter"] / one["us_per_member_iter"], 3)}
    print(f"{args.folds} folds ({args.scheme}) / 1 fold: iteration {ratio['iteration']:.2f}x for {many['P'] // one['P']}x the members, "
          f"per member-iteration {ratio['per_member']:.3f}x")  # fmt: skip
    if args.out:
        machine = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "benchmark": "folds_cost", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine, "torch": torch.__version__, "command": "python " + " ".join(shlex.quote(x) for x in sys.argv),
            "config": base, "folds_config": folds_keys, "arms": arms, "rows": rows, "folds_over_one": ratio,
        }, indent=1))  # fmt: skip
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
