"""What the result tables alone give (issue 31 item 6): `compare` reads a confirmation folder's
settings from its trials table (it has no spec), and `analyze` of a run with a plug-in gem works
without the plug-in's code (its magnitudes and verdicts from the tables; only a re-run needs
the code). Through the real CLI (compare through its `main`, in this process)."""

from __future__ import annotations


import pandas as pd
import pytest

import fake_results as fr
from sweep_fixtures import REPO, SMOKE, TINY_SWEEP, cli, cli_in_process, store_spec
from tune_gems.commands.compare import differences, run_settings
from tune_gems.config.dotted import flatten
from tune_gems.sweep.spec_load import load_spec, trial_config


def _confirmation_like(folder, spec, choices: list[dict]):
    """A fake experiment whose trials table holds every config key, as `tune-gems confirm`
    writes it (flatten of each trial's config), one trial per choice, and no spec.yaml."""
    fr.wire_scenario(folder, n=6, trials=len(choices))
    trials = pd.read_parquet(folder / "trials.parquet")
    rows = [flatten(trial_config(spec.config, params).to_dict()) for params in choices]
    config = pd.DataFrame(rows)
    keep = [c for c in trials.columns if c not in config.columns]
    pd.concat([trials[keep], config], axis=1).to_parquet(folder / "trials.parquet", index=False)
    return folder


def test_compare_reads_a_confirmation_folders_settings_from_its_trials_table(tmp_path):
    spec = load_spec(SMOKE)
    search = fr.wire_scenario(tmp_path / "search", n=6)
    store_spec(search, SMOKE.read_bytes())
    confirmation = _confirmation_like(tmp_path / "confirmation", spec, [
        {"seed": 4, "gems.g6.mode": "wire", "gems.g6.weight": 0.05},
        {"seed": 5, "gems.g6.mode": "wire", "gems.g6.weight": 0.05, "gems.g12.mode": "wire", "gems.g12.weight": 0.01},
    ])
    settings = run_settings(confirmation)
    assert settings["config.trainer.population"] == spec.base_config().trainer.population
    assert settings["config.seed"] == "4 | 5" and settings["config.gems.g12.mode"] == "measure | wire"
    diff = differences(run_settings(search), settings)
    keys = {k for k, _, _ in diff}
    assert keys == {"config.seed", "config.gems.g6.mode", "config.gems.g6.weight", "config.gems.g12.mode",
                    "config.gems.g12.weight"}, diff  # what the confirmation set, nothing it merely lacks
    res = cli_in_process("compare", str(search), str(confirmation), "--n-boot", "50")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "settings that differ (5):" in res.stdout and "confirmation=-" not in res.stdout
    assert "config.gems.g12.mode: search=measure  confirmation=measure | wire" in res.stdout


@pytest.mark.slow
def test_analyze_works_without_the_plugins_code(tmp_path):
    run = tmp_path / "run"
    config = [o.removeprefix("config.") for o in TINY_SWEEP if o.startswith("config.")]
    trained = cli("train", *config, "trainer.epochs=2", "plugins=[q_magnitude]",
                  "arms.factors={gems.qmag.mode: [measure, wire]}", "--out", str(run),
                  env={"PYTHONPATH": str(REPO / "examples" / "gems")})
    assert trained.returncode == 0, trained.stderr[-2000:]
    ana = tmp_path / "analysis"
    res = cli("analyze", str(run), "--n-boot", "50", "--out", str(ana))  # no examples/gems on the path: the plug-in is absent
    assert res.returncode == 0, res.stderr[-2000:]
    verdicts = pd.read_csv(ana / "verdicts.csv").set_index("gem")
    assert verdicts.loc["qmag", "metric"] == "q_magnitude" and verdicts.loc["qmag", "n_seeds"] == 2
    assert str(verdicts.loc["qmag", "design"]).startswith("arms within trials")
    magnitudes = pd.read_csv(ana / "gem_magnitudes.csv")
    assert (magnitudes["gem"] == "qmag").any()
    assert "qmag=wire sn=on noisy=on \\| arm gems.qmag.mode=wire" in (ana / "report.md").read_text()
    rerun = cli("train", "--out", str(run), "--resume")
    assert rerun.returncode == 2 and "q_magnitude" in rerun.stderr  # a re-run does need the code
