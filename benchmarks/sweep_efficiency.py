"""How much of a sweep's wall time the device spends training (issue 15 deliver 5).

    python benchmarks/sweep_efficiency.py EXPERIMENT_DIR [--sweep-wall SECONDS] [--out FILE.json]

Reads Tune's per-trial `result.json` (every reported epoch with its timestamp and
`time_this_iter_s`) and the trainer's own per-epoch `train_s` / `eval_s` metrics, then prints
one row per trial: training seconds, evaluation seconds, trial wall seconds (first report's
start to last report) and training / wall; and for the sweep: its wall time (from the first
trial's start to the last trial's end, or `--sweep-wall` measured around the command) against
the sum of training seconds. The goal of issue 15 is sweep wall <= 1.25 x training time when
trials run one after another on one GPU; with several trials at once (packing) the ratio is
wall against the training of the busiest stretch, so it is reported as measured, not judged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def trial_rows(exp: Path) -> list[dict]:
    rows = []
    for result in sorted(exp.glob("*/result.json")):
        lines = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if not lines:
            continue
        by_epoch = {}
        for r in lines:  # a resumed trial may report an epoch twice: the last report wins
            if "epoch" in r:
                by_epoch[int(r["epoch"])] = r
        reports = [by_epoch[e] for e in sorted(by_epoch)]
        if not reports:
            continue
        first, last = lines[0], lines[-1]
        start = first["timestamp"] - first.get("time_this_iter_s", 0.0)
        train = sum(float(r.get("train_s", float("nan"))) for r in reports)
        evals = sum(float(r.get("eval_s", float("nan"))) for r in reports)
        wall = last["timestamp"] - start
        rows.append({
            "trial_id": last.get("trial_id", result.parent.name),
            "epochs": len(reports),
            "train_s": train,
            "eval_s": evals,
            "wall_s": wall,
            "train_share": train / wall if wall > 0 else float("nan"),
            "start": start,
            "end": last["timestamp"],
        })
    return rows


def summarise(rows: list[dict], sweep_wall: float | None = None) -> dict:
    train = sum(r["train_s"] for r in rows)
    span = (max(r["end"] for r in rows) - min(r["start"] for r in rows)) if rows else float("nan")
    wall = sweep_wall if sweep_wall is not None else span
    return {
        "trials": len(rows),
        "train_s_total": train,
        "eval_s_total": sum(r["eval_s"] for r in rows),
        "trial_wall_s_total": sum(r["wall_s"] for r in rows),
        "sweep_wall_s": wall,
        "sweep_wall_over_train": wall / train if train > 0 else float("nan"),
        "goal_wall_over_train": 1.25,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment")
    p.add_argument("--sweep-wall", type=float, help="the sweep command's own wall time, if measured around it")
    p.add_argument("--out", help="write the rows and the summary as JSON here")
    a = p.parse_args(argv)
    rows = trial_rows(Path(a.experiment))
    if not rows:
        print(f"{a.experiment}: no trial results (result.json) found", file=sys.stderr)
        return 2
    s = summarise(rows, a.sweep_wall)
    print(f"{'trial':<14}{'epochs':>7}{'train s':>10}{'eval s':>9}{'wall s':>9}{'train/wall':>12}")
    for r in rows:
        print(f"{r['trial_id']:<14}{r['epochs']:>7}{r['train_s']:>10.1f}{r['eval_s']:>9.1f}{r['wall_s']:>9.1f}{r['train_share']:>12.2f}")
    print(
        f"sweep: {s['trials']} trials, training {s['train_s_total']:.1f} s, evaluation {s['eval_s_total']:.1f} s, "
        f"wall {s['sweep_wall_s']:.1f} s = {s['sweep_wall_over_train']:.2f} x training (goal <= {s['goal_wall_over_train']})"
    )
    if a.out:
        Path(a.out).write_text(json.dumps({"trials": rows, "summary": s}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
