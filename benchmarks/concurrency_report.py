"""Which GPU each trial of a finished sweep ran on, when, and how many ran at once.

    python benchmarks/concurrency_report.py EXPERIMENT_DIR

Reads Tune's per-trial result.json (every reported epoch, with its wall-clock timestamp and
the `node_id` / `gpu_ids` the trial reported) and prints one line per trial plus the largest
number of trials whose running intervals overlap, and whether any two overlapping trials
shared a GPU of one node.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def trial_intervals(exp: Path) -> list[dict]:
    rows = []
    for result in sorted(exp.glob("*/result.json")):
        lines = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if not lines:
            continue
        first, last = lines[0], lines[-1]
        rows.append({
            "trial_id": last["trial_id"],
            "node": str(last.get("node_id", "?"))[:8],
            "gpus": last.get("gpu_ids", ""),
            "start": first["timestamp"] - first.get("time_this_iter_s", 0.0),
            "end": last["timestamp"],
            "epochs": len(lines),
        })
    return rows


def main(argv: list[str]) -> int:
    exp = Path(argv[0])
    rows = trial_intervals(exp)
    if not rows:
        print(f"{exp}: no trial results", file=sys.stderr)
        return 2
    t0 = min(r["start"] for r in rows)
    print(f"{'trial':10} {'node':9} {'gpus':5} {'start_s':>8} {'end_s':>8} epochs")
    for r in sorted(rows, key=lambda r: r["start"]):
        print(f"{r['trial_id']:10} {r['node']:9} {r['gpus']:5} {r['start'] - t0:8.1f} {r['end'] - t0:8.1f} {r['epochs']}")
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    clash = [
        (a["trial_id"], b["trial_id"])
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
        if a["node"] == b["node"] and set(a["gpus"].split(",")) & set(b["gpus"].split(",")) - {""}
        and a["start"] < b["end"] and b["start"] < a["end"]
    ]
    print(f"most trials running at once: {peak}; overlapping trials sharing a GPU: {clash or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
