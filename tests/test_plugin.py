"""Gem plug-ins through the real command line: the example plug-in trains on CPU without any
edit to the package, and bad plug-ins are refused in one line with exit status 2 before
anything is written (docs/gems.md).

Each run is `tune-gems train` (the CLI's `main`) in a process of its own, forked fresh from a
server that imported the heavy modules once, with the plug-in's folder on its path where
PYTHONPATH puts it (how a user's module reaches tune-gems); test_plugin_sweep and
test_tables_only start real `python -m tune_gems` processes with that PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cluster_fixtures import cli_forked, forked_cli_pool
from learner_fixtures import TINY

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "gems"
TRAIN = [t for t in TINY if not t.startswith("trainer.epochs")] + ["trainer.epochs=2"]


@pytest.fixture(scope="module")
def pool():
    with forked_cli_pool(1) as p:
        yield p


def train(pool, args: list[str], pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess:
    return cli_forked(pool, ["train", *args], cwd, {"PYTHONPATH": str(pythonpath)}, timeout=600)


def test_example_plugin_trains_measured_and_wired(tmp_path, pool):
    out = tmp_path / "run"
    r = train(pool, [*TRAIN, "plugins=[q_magnitude]", "gems.qmag.mode=wire", "gems.qmag.weight=0.5", "--out", str(out)], EXAMPLES,
              tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    health = [line for line in r.stdout.splitlines() if line.startswith("HEALTH_DIAG")]
    assert len(health) == 2 and all("q_magnitude=" in line for line in health)
    assert health[0].index("g12_predictive=") < health[0].index("q_magnitude=")  # registry order
    hist, members = pd.read_csv(out / "history.csv"), pd.read_csv(out / "members.csv")
    for table in (hist, members):
        assert {"q_magnitude", "q_magnitude_rel"} <= set(table.columns)
        assert (table["q_magnitude"] > 0).all()
    # the value is what it says: a member's mean squared expected Q is at least its q_mean^2
    assert (members["q_magnitude"] >= members["q_mean"] ** 2 * (1 - 1e-6)).all()

    # wiring it changes training; measuring it does not (bit-identical to a run without it)
    measured, plain = tmp_path / "measured", tmp_path / "plain"
    measured_run = train(pool, [*TRAIN, "plugins=[q_magnitude]", "gems.qmag.mode=measure", "--out", str(measured)], EXAMPLES, tmp_path)
    assert measured_run.returncode == 0, measured_run.stderr[-2000:]
    assert train(pool, [*TRAIN, "--out", str(plain)], EXAMPLES, tmp_path).returncode == 0
    m, p = pd.read_csv(measured / "members.csv"), pd.read_csv(plain / "members.csv")
    assert "q_magnitude" not in p.columns
    shared = [c for c in p.columns if c not in ("sps", "train_s", "eval_s")]
    pd.testing.assert_frame_equal(m[shared], p[shared])
    assert not members["loss"].equals(p["loss"])


BAD = {
    "does_not_import": ("import no_such_dependency_of_a_plugin\n", ["plugins: bad_plugin: cannot import", "no_such_dependency_of_a_plugin"]),
    "registers_nothing": ("X = 1\n", ["plugins: bad_plugin: registers no gem"]),
    "clashes_with_builtin": (
        "from tune_gems.gems import Gem, register\n"
        "register(Gem(name='g6', metric='my_g6', description='x', reference=lambda x: x.q_t.mean((1, 2, 3))))\n",
        ["plugins: bad_plugin", "clashes with the built-in gem g6"],
    ),
    "metric_clashes_with_builtin": (
        "from tune_gems.gems import Gem, register\n"
        "register(Gem(name='mine', metric='g10_temporal', description='x', reference=lambda x: x.q_t.mean((1, 2, 3))))\n",
        ["plugins: bad_plugin", "clashes with the built-in gem g10"],
    ),
    "wrong_shape": (
        "from tune_gems.gems import Gem, register\n"
        "register(Gem(name='mine', metric='mine_value', description='x', reference=lambda x: x.q_t.mean((2, 3))))\n",
        ["gems.mine", "shape [P]=(3,)", "got shape (3, 16)"],
    ),
    "not_finite": (
        "from tune_gems.gems import Gem, register\n"
        "register(Gem(name='mine', metric='mine_value', description='x', reference=lambda x: x.q_t.mean((1, 2, 3)) / 0.0))\n",
        ["gems.mine", "not finite"],
    ),
    "raises": (
        "from tune_gems.gems import Gem, register\n"
        "def boom(x):\n    raise RuntimeError('the plug-in broke\\non two lines')\n"
        "register(Gem(name='mine', metric='mine_value', description='x', reference=boom))\n",
        ["gems.mine", "raises on a dry evaluation", "RuntimeError: the plug-in broke on two lines"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_plugin_is_refused_in_one_line_before_anything_is_written(tmp_path, pool, case):
    source, fragments = BAD[case]
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "bad_plugin.py").write_text(source)
    out = tmp_path / "run"
    r = train(pool, [*TRAIN, "plugins=[bad_plugin]", "--out", str(out)], plugin_dir, tmp_path)
    assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune-gems: error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plugins"]  # nothing else written


def test_plugin_entry_that_is_not_a_module_name_is_refused(tmp_path, pool):
    r = train(pool, [*TRAIN, "plugins=[not a module]", "--out", str(tmp_path / "run")], EXAMPLES, tmp_path)
    assert r.returncode == 2 and "plugins: 'not a module' is not a dotted module name" in r.stderr
    assert not (tmp_path / "run").exists()


def test_manifest_lists_the_runs_gems(tmp_path):
    """The gems.json content (written beside the tables by the run writers)."""
    code = (
        "from tune_gems.config.load import load_config; from tune_gems.contracts.gem_manifest import manifest_text; "
        "from tune_gems.gems import manifest; "
        "c = load_config(None, ['plugins=[q_magnitude]']); print(manifest_text(manifest(c.plugins)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)
    assert [e["name"] for e in entries] == ["g6", "g10", "g12", "qmag"]
    assert [e["has_null"] for e in entries] == [True, True, True, False]
    assert entries[-1] == {"name": "qmag", "metric": "q_magnitude", "description": "Q-magnitude penalty: mean squared expected Q at s_t", "has_null": False}
