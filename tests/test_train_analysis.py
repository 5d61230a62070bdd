"""`tune-gems analyze` on a `train` folder (its arms are the design), `tune-gems compare A B`
(two runs side by side, each analysed on its own) and train's TensorBoard event files, through
the CLI's `main` (in-process) on two tiny train runs."""

from __future__ import annotations

import pandas as pd
import pytest

from sweep_fixtures import cli_in_process as cli
from test_bad_input import TRAIN_TINY
from tune_gems.analysis.read.load import load_experiment

pytestmark = pytest.mark.slow
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
ARMS = "arms.factors={gems.g6.mode: [measure, wire]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two train runs with a measure/wire arm pair on G6, differing only in trainer.lr."""
    root = tmp_path_factory.mktemp("train_runs")
    for name, lr in (("a", "0.0005"), ("b", "0.001")):
        res = cli("train", *TRAIN_TINY, "trainer.epochs=2", ARMS, f"trainer.lr={lr}", "--out", str(root / name), env=ONE_THREAD)
        assert res.returncode == 0, res.stderr[-2000:]
    return root


def test_a_train_folder_loads_as_a_one_trial_experiment(runs):
    exp = load_experiment(runs / "a")
    assert list(exp.trials["trial_id"]) == ["train"] and list(exp.trials["status"]) == ["TERMINATED"]
    assert exp.trials.loc[0, "trainer.lr"] == 0.0005 and exp.trials.loc[0, "epochs_done"] == 2
    assert set(exp.members["trial_id"]) == {"train"} and set(exp.members["arm"]) == {"gems.g6.mode=measure", "gems.g6.mode=wire"}
    assert len(exp.members) == 2 * 2 * 2  # epochs x arms x seeds
    assert exp.arms is not None and exp.baselines is not None


def test_analyze_takes_a_train_folder_and_uses_its_arms_as_the_design(runs, tmp_path):
    res = cli("analyze", str(runs / "a"), "--out", str(tmp_path / "ana"), "--no-plots", env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]
    v = pd.read_csv(tmp_path / "ana" / "verdicts.csv").set_index("gem")
    assert v.loc["g6", "design"].startswith("arms within trials") and v.loc["g6", "n_seeds"] == 2
    assert v.loc["g10", "verdict"] == "insufficient data"  # never wired in this run
    report = (tmp_path / "ana" / "report.md").read_text()
    # the report's verdict summary is narrow, the numbers a user decides by first; the evidence stays in verdicts.csv
    assert ("| gem | verdict | decided_by | decided_effect | decided_ci_low | decided_ci_high | decided_ci_level | "
            "decided_p_adjusted | mde | test_effect | held_out | family_size | n_seeds | tied_share | seeds: verdict | "
            "seeds: effect | seeds: ci_low | seeds: ci_high | seeds: Holm p |") in report  # the seeds alone, headed so
    assert {"seed_verdict", "tost_p_adjusted", "seeds_needed", "excess_median", "redundancy"} <= set(v.columns)


def test_compare_shows_two_runs_side_by_side(runs):
    res = cli("compare", str(runs / "a"), str(runs / "b"), env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert out.startswith("compare a vs b (each analysed on its own)")
    assert "settings that differ (1):\n  config.trainer.lr: a=0.0005  b=0.001\n" in out
    assert out.count("against the baselines") == 2
    verdicts = out.split("verdicts:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "verdict [a]" in verdicts[0] and "verdict [b]" in verdicts[0]
    assert [line.split()[0] for line in verdicts[1:]] == ["g6", "g10", "g12"]  # registry order, as analyze
    assert "val_sharpe_mean [a]" in out and "val_sharpe_mean [b]" in out


def test_compare_needs_two_folders(runs):
    res = cli("compare", str(runs / "a"))
    assert res.returncode == 2 and res.stderr.strip() == "tune-gems: error: compare: give exactly two experiment folders, got 1"


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files in `folder` (TFRecord framing, Event protos)."""
    import struct

    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(folder.glob("events.out.tfevents.*")):
        data = f.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            event = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def test_train_writes_tensorboard_scalars_per_epoch(runs):
    scalars = _scalars(runs / "a" / "tensorboard")
    history = pd.read_csv(runs / "a" / "history.csv")
    assert [s for s, _ in scalars["loss"]] == [1, 2]
    assert [v for _, v in scalars["loss"]] == pytest.approx(history["loss"].tolist(), rel=1e-6)
    assert "val_sharpe_mean/gems.g6.mode_wire" in scalars  # per-arm columns under the metric (tag rules: = -> _)
    assert "diverged" not in scalars  # flags are not scalars
