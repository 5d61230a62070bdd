"""A trial's synthetic market paths, timed per source tree and interpreter (issue 40 item 0).

    python benchmarks/market_paths.py [--tree PATH ...] [--python INTERPRETER ...] [--paths 64] [--rows 6000]

For each interpreter (default this one) and tree (default this script's), a fresh process with
PYTHONPATH at the tree times `tune_gems.data.series.load_paths` of `--paths` per-seed synthetic
paths of `--rows` rows (the moonshot's 64 seeds at the default 6000 rows): the first call (what
a trial's process pays) and the best of two more in the same process, and the sha256 of the paths' bytes, so trees built the same bits when their digests agree. Only numpy
and pandas are imported: an interpreter with another pandas (the GPU image's) needs nothing
else, which is how the pandas-2 cost of one business-day index per path shows on a machine whose
own pandas is 3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import hashlib, json, sys, time, types
import numpy as np, pandas as pd
from tune_gems.data import series
rows, paths = int(sys.argv[1]), int(sys.argv[2])
cfg = types.SimpleNamespace(source="synthetic", synthetic=types.SimpleNamespace(n=rows, seed=7, edge=0.8, paths="per_seed", edge_periods=None))
times = []
for _ in range(3):
    t0 = time.perf_counter()
    built = series.load_paths(cfg, paths)
    times.append(time.perf_counter() - t0)
digest = hashlib.sha256(np.stack([p.to_numpy() for p in built]).tobytes()).hexdigest()
assert series.__file__.startswith(sys.argv[3]), series.__file__
print(json.dumps({"pandas": pd.__version__, "numpy": np.__version__, "first_s": times[0], "again_s": min(times[1:]), "sha256": digest}))
"""


def measure(python: str, tree: str, rows: int, paths: int) -> dict:
    env = {"PYTHONPATH": tree, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory() as elsewhere:  # `python -c` puts its working directory first on the path
        out = subprocess.run([python, "-c", CHILD, str(rows), str(paths), tree], capture_output=True, text=True, env=env, check=True,
                             cwd=elsewhere)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", help="a source tree (repeat; default this script's)")
    p.add_argument("--python", action="append", help="an interpreter (repeat; default this one)")
    p.add_argument("--paths", type=int, default=64)
    p.add_argument("--rows", type=int, default=6000)
    a = p.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in (a.tree or [str(Path(__file__).resolve().parents[1])])]
    print(f"{'interpreter':<40}{'tree':<28}{'pandas':>8}{'numpy':>8}{'first s':>9}{'again s':>9}  sha256")
    for python in a.python or [sys.executable]:
        for tree in trees:
            m = measure(python, tree, a.rows, a.paths)
            print(f"{python[-39:]:<40}{Path(tree).name[-27:]:<28}{m['pandas']:>8}{m['numpy']:>8}{m['first_s']:>9.3f}{m['again_s']:>9.3f}  {m['sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
