"""The dry run counts walk-forward folds (folds x arms x seeds), and the objective note appears
only where a search chose among trials (issue 31 item 3): through the CLI's `main`."""

from __future__ import annotations

import pytest
import yaml

import fake_results as fr
from sweep_fixtures import SMOKE, TINY_SWEEP, cli_in_process, store_spec
from tune_gems.config.load import load_config
from tune_gems.design.arms import run_arms
from tune_gems.trainer.dry_run import members_line

NOTE = "its trials were chosen on another quantity"


def test_the_members_line_counts_folds():
    cfg = load_config(None, ["trainer.population=2"])
    assert members_line(cfg, run_arms(cfg)) == "members: 1 arm(s) x 2 seed(s) = 2 (default)"
    cfg = load_config(None, ["trainer.population=2", "data.folds.k=3", "arms.factors={gems.g6.mode: [measure, wire]}"])
    assert members_line(cfg, run_arms(cfg)) == "members: 3 fold(s) x 2 arm(s) x 2 seed(s) = 12 (gems.g6.mode=measure, gems.g6.mode=wire)"


@pytest.mark.slow
def test_the_sweep_dry_run_counts_the_widest_trials_folds(tmp_path):
    res = cli_in_process("sweep", str(SMOKE), "--dry-run", "--storage", str(tmp_path), "--name", "plan", *TINY_SWEEP,
                         "config.data.folds.k=3", "resources.cpu=1", env={"OMP_NUM_THREADS": "", "MKL_NUM_THREADS": ""})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "widest trial: 3 fold(s) x 5 arm(s) x 2 seed(s) = 30 (proposal, control" in res.stdout
    # timed as a trial runs: Ray gives it one thread per CPU of resources.cpu
    assert ("tune-gems sweep: threads: 1 CPU thread(s) (a trial's resources.cpu=1: Ray gives a trial one thread per "
            "CPU)") in res.stdout
    assert "with 1 CPU thread(s)" in res.stdout


def _spec(folder, **over) -> None:
    spec = yaml.safe_load(SMOKE.read_text())
    spec.update(objective={"metric": "val_sharpe_mean_lastk", "mode": "max"}, **over)
    store_spec(folder, yaml.safe_dump(spec).encode())


def test_the_objective_note_only_where_the_search_chose(tmp_path):
    one = fr.wire_scenario(tmp_path / "one", n=6)  # one trial, nothing searched
    _spec(one, num_samples=1, search={"gems": {}, "params": {}})
    res = cli_in_process("analyze", str(one), "--no-plots", "--n-boot", "50")
    assert res.returncode == 0, res.stderr[-2000:]
    assert NOTE not in res.stdout and NOTE not in (one / "analysis" / "report.md").read_text()
    searched = fr.wire_scenario(tmp_path / "searched", n=6, trials=2)  # the smoke spec searches every gem
    _spec(searched, num_samples=2)
    res = cli_in_process("analyze", str(searched), "--no-plots", "--n-boot", "50")
    assert res.returncode == 0 and NOTE in res.stdout
