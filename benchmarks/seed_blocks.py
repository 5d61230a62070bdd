"""Scaling of one design split into seed blocks over G GPUs (issue 25 deliver 3).

    python benchmarks/seed_blocks.py EXPERIMENT_DIR --sweep-wall SECONDS [--reference ONE.json] [--out FILE.json]

Reads Tune's per-trial `result.json` of a block sweep (`blocks.seed_blocks` = G, one trial per
GPU): per block its first seed index, node, Ray's GPU ids and the CUDA_VISIBLE_DEVICES the trial
saw (`tune_gems.sweep.trainable.placement`), training seconds, trial wall and training share; for
the sweep its wall time (`--sweep-wall`, measured around the command), the number of distinct
GPUs used, and the training share of the devices' time (sum of training / (G x wall); on CPU,
with no GPU ids, G is the number of blocks).

With `--reference` (this script's JSON of the same shape run as ONE block on one GPU), the
scaling: the G-block sweep trains G times the seeds, so its speedup in seeds per second is
G x wall_1 / wall_G and its efficiency wall_1 / wall_G (issue 25's goal: speedup >= 0.9 x G,
i.e. efficiency >= 0.9). Weak scaling on purpose: each GPU keeps the population that fills it
(docs/cluster.md says when to prefer more GPUs over more members per GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_efficiency import trial_rows  # noqa: E402

GOAL_EFFICIENCY = 0.9


def placements(exp: Path) -> dict[str, dict]:
    """trial_id -> where its last report came from (a retried block may have moved)."""
    out = {}
    for result in sorted(exp.glob("*/result.json")):
        lines = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if lines:
            last = lines[-1]
            out[str(last.get("trial_id", result.parent.name))] = {
                "first_seed_index": (last.get("config") or {}).get("first_seed_index"),
                "node_id": last.get("node_id"),
                "gpu_ids": last.get("gpu_ids"),
                "cuda_visible_devices": last.get("cuda_visible_devices"),
            }
    return out


def measure(exp: Path, sweep_wall: float) -> dict:
    rows = trial_rows(exp)
    where = placements(exp)
    for r in rows:
        r.update(where.get(r["trial_id"], {}))
    gpus = {(r.get("node_id"), r.get("gpu_ids")) for r in rows if r.get("gpu_ids")}
    slots = len(gpus) or len(rows)  # on CPU (no GPU ids) every block is its own worker
    train = sum(r["train_s"] for r in rows)
    return {
        "blocks": rows,
        "summary": {
            "blocks": len(rows),
            "distinct_gpus": len(gpus),
            "sweep_wall_s": sweep_wall,
            "train_s_total": train,
            "train_share_of_device_time": train / (slots * sweep_wall) if sweep_wall > 0 else float("nan"),
        },
    }


def scaling(run: dict, reference: dict) -> dict:
    g, wall_g = run["summary"]["blocks"], run["summary"]["sweep_wall_s"]
    wall_1 = reference["summary"]["sweep_wall_s"]
    eff = wall_1 / wall_g if wall_g > 0 else float("nan")
    return {"gpus": g, "wall_1_s": wall_1, "wall_g_s": wall_g, "speedup_seeds_per_s": g * eff, "efficiency": eff,
            "goal_efficiency": GOAL_EFFICIENCY, "meets_goal": bool(eff >= GOAL_EFFICIENCY)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment")
    p.add_argument("--sweep-wall", type=float, required=True, help="the sweep command's wall time, measured around it")
    p.add_argument("--reference", help="this script's JSON for the same design as one block on one GPU")
    p.add_argument("--out", help="write the blocks, summary (and scaling) as JSON here")
    a = p.parse_args(argv)
    run = measure(Path(a.experiment), a.sweep_wall)
    if not run["blocks"]:
        print(f"{a.experiment}: no trial results (result.json) found", file=sys.stderr)
        return 2
    print(f"{'trial':<14}{'first':>7}{'gpu':>5}{'CUDA_VISIBLE':>14}{'train s':>9}{'wall s':>8}{'train/wall':>12}")
    for r in sorted(run["blocks"], key=lambda r: r.get("first_seed_index") or 0):
        print(f"{r['trial_id']:<14}{r.get('first_seed_index')!s:>7}{r.get('gpu_ids')!s:>5}{r.get('cuda_visible_devices')!s:>14}"
              f"{r['train_s']:>9.1f}{r['wall_s']:>8.1f}{r['train_share']:>12.2f}")
    s = run["summary"]
    where = f"{s['distinct_gpus']} GPU(s)" if s["distinct_gpus"] else "CPU (no GPU ids)"
    print(f"sweep: {s['blocks']} blocks on {where}, wall {s['sweep_wall_s']:.1f} s, "
          f"training {s['train_share_of_device_time']:.2f} of the devices' time")
    if a.reference:
        run["scaling"] = sc = scaling(run, json.loads(Path(a.reference).read_text()))
        print(f"scaling: {sc['gpus']} GPUs, wall {sc['wall_g_s']:.1f} s against {sc['wall_1_s']:.1f} s for one block on one GPU: "
              f"speedup {sc['speedup_seeds_per_s']:.2f}x in seeds/s, efficiency {sc['efficiency']:.2f} (goal >= {GOAL_EFFICIENCY})")
    if a.out:
        Path(a.out).write_text(json.dumps(run, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
