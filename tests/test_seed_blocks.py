"""Seed blocks (docs/cluster.md "One design over many GPUs"): a run of seed indices
[first_seed_index, first_seed_index + population) gives every member the member seed, the
synthetic path and the `seed_index` that seed index has in a run of every seed, so blocks
trained as separate trials pool into one seed-paired design."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from learner_fixtures import tiny_config
from tune_gems.design.arms import MemberLayout
from tune_gems.contracts.errors import ConfigError
from tune_gems.config.load import load_config
from tune_gems.data.series import load_paths, synthetic_prices
from tune_gems.rng import member_seeds

TWO_ARMS = "arms.list=[{name: m}, {name: w, gems.g12.mode: wire, gems.g12.weight: 0.1}]"


@pytest.mark.parametrize("first,n", [(0, 5), (3, 4), (1000, 2)])
def test_member_seeds_of_a_block_are_those_of_its_indices_in_the_whole_run(first, n):
    assert member_seeds(7, n, first) == member_seeds(7, first + n)[first:]


def test_layout_gives_design_seed_indices_and_their_seeds():
    lay = MemberLayout(("a", "b"), 3, first_seed_index=6)
    assert [lay.seed_slot(m) for m in range(6)] == [0, 1, 2] * 2
    assert [lay.seed_index(m) for m in range(6)] == [6, 7, 8] * 2
    assert lay.member_seeds(5) == member_seeds(5, 9)[6:] * 2


def test_block_paths_are_the_paths_of_its_seed_indices():
    data = load_config(None, ["data.synthetic.n=300", "data.synthetic.seed=9"]).data
    block = load_paths(data, 2, first_seed_index=4)
    for got, s in zip(block, (4, 5)):
        assert np.array_equal(got.to_numpy(), synthetic_prices(300, 9 + s, data.synthetic.edge).to_numpy())
    shared = load_config(None, ["data.synthetic.n=300", "data.synthetic.paths=shared"]).data
    assert len(load_paths(shared, 2, first_seed_index=4)) == 1  # one history: nothing to shift


def test_a_trainer_of_a_block_reports_design_seed_indices_seeds_and_paths():
    from tune_gems.trainer.trainer import Trainer

    t = Trainer(tiny_config("trainer.population=2", "first_seed_index=2", "trainer.epochs=1", TWO_ARMS), log=None)
    r = t.run_epoch()
    assert [(m["arm"], m["seed_index"]) for m in r.members] == [("m", 2), ("m", 3), ("w", 2), ("w", 3)]
    assert [m["seed"] for m in r.members] == member_seeds(0, 4)[2:] * 2
    assert t.learner.path_of_member == [0, 1, 0, 1]  # positions in this run's market
    syn = t.cfg.data.synthetic
    want = synthetic_prices(syn.n, syn.seed + 3, syn.edge)
    assert t.market.n_paths == 2
    # the block's second path is seed index 3's: its validation asset returns are that path's
    assert np.allclose(t.window.asset[1], t.window.asset[3]) and not np.allclose(t.window.asset[0], t.window.asset[1])
    assert np.array_equal(load_paths(t.cfg.data, 2, first_seed_index=2)[1].to_numpy(), want.to_numpy())


def test_a_checkpoint_of_one_block_is_refused_by_another(tmp_path):
    from tune_gems.contracts.errors import CheckpointError
    from tune_gems.trainer.trainer import Trainer

    t = Trainer(tiny_config("trainer.population=2", "trainer.epochs=1"), log=None)
    t.run_epoch()
    t.save_checkpoint(tmp_path / "c.pt")
    other = Trainer(tiny_config("trainer.population=2", "trainer.epochs=1", "first_seed_index=2"), log=None)
    with pytest.raises(CheckpointError, match="first_seed_index"):
        other.load_checkpoint(tmp_path / "c.pt")


def test_first_seed_index_is_validated():
    with pytest.raises(ConfigError, match="first_seed_index"):
        load_config(None, ["first_seed_index=-1"])


# -- the analysis: blocks pool into one design; per-trial seeds add units ------------------------

ARMS = {"control": {}, "wired": {"gems.g12.mode": "wire", "gems.g12.weight": 0.1}}


def _trial(fr, tid: str, values: dict, first: int, seed: int = 0):
    return fr.ArmTrial(tid, ARMS, {a: list(v) for a, v in values.items()}, seed=seed, first_seed_index=first)


def _design_values(fr, n: int, effect: float):
    base = fr.seed_values(n, seed=100)
    return {"control": base, "wired": base + effect + fr.paired_noise(n, seed=1, sd=0.3)}


def _g12(folder):
    from tune_gems.analysis.analyze import analyze

    return analyze(folder, n_boot=50).verdicts.set_index("gem").loc["g12"]


@pytest.mark.parametrize("effect", [0.0, 0.4])
def test_seed_blocks_pool_to_the_verdict_of_one_trial_with_every_seed(tmp_path, effect):
    """The same 16 seed indices as one trial, or as blocks 0-7 and 8-15 of two trials: the same
    pairs (units), the same effect, interval, p and verdict; only the trial count differs."""
    import fake_results as fr

    v = _design_values(fr, 16, effect)
    one = fr.write_arms_experiment(tmp_path / "one", [_trial(fr, "t0", v, 0)])
    halves = [{a: x[:8] for a, x in v.items()}, {a: x[8:] for a, x in v.items()}]
    blocks = fr.write_arms_experiment(tmp_path / "blocks", [_trial(fr, f"b{b}", h, 8 * b) for b, h in enumerate(halves)])
    a, b = _g12(one), _g12(blocks)
    for key in ("verdict", "n_seeds", "n_pairs", "effect", "ci_low", "ci_high", "p_adjusted"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert a["design"].startswith("arms within trials: 1 context(s) in 1 trial(s), 16 seed pair(s)")
    assert b["design"].startswith("arms within trials: 1 context(s) in 2 trial(s), 16 seed pair(s)")
    assert a["design"].endswith("units: 16 seed(s), each on its own market path")
    assert b["design"].endswith("units: 16 seed(s), each on its own market path")


def test_trials_on_the_same_seed_indices_share_paths_and_the_label_says_so(tmp_path):
    """Two trials of 8 seeds at seed indices 0-7 (what per_trial seeds gave before trials had
    their own seed indices): 16 member seeds but 8 market paths, so 8 units, and the label says
    so; at seed indices 0-7 and 8-15 the same trials give 16 units."""
    import fake_results as fr

    v = _design_values(fr, 8, 0.4)
    same = fr.write_arms_experiment(tmp_path / "same", [_trial(fr, f"t{n}", v, 0, seed=n) for n in range(2)])
    own = fr.write_arms_experiment(tmp_path / "own", [_trial(fr, f"t{n}", v, 8 * n, seed=n) for n in range(2)])
    a, b = _g12(same), _g12(own)
    assert a["n_seeds"] == 8 and a["design"].endswith("units: 8 market path(s) (16 member seeds; seeds on one path count once)")
    assert b["n_seeds"] == 16 and b["design"].endswith("units: 16 seed(s), each on its own market path")


def test_per_trial_seeds_give_every_trial_its_own_seed_indices():
    from tune_gems.sweep.search import DefineByRun
    from tune_gems.sweep.spec_load import load_spec
    from sweep_fixtures import SMOKE, TINY_SWEEP

    class Fixed:  # an Optuna trial that always picks the first choice
        def __init__(self, number):
            self.number = number

        def suggest_categorical(self, name, choices):
            return choices[0]

        def suggest_float(self, name, low, high, log=False):
            return low

        suggest_int = suggest_float

    spec = load_spec(SMOKE, [*TINY_SWEEP, "config.first_seed_index=100"])
    got = [DefineByRun(spec)(Fixed(n)) for n in range(3)]
    assert [(g["seed"], g["first_seed_index"]) for g in got] == [(0, 100), (1, 102), (2, 104)]  # population 2
    searched = load_spec(SMOKE, [*TINY_SWEEP, "search.params={trainer.population: {type: int, low: 1, high: 5}}"])
    assert DefineByRun(searched)(Fixed(2))["first_seed_index"] == 10  # the widest trial's seeds apart
    common = load_spec(SMOKE, [*TINY_SWEEP, "seeds=common"])
    assert DefineByRun(common)(Fixed(3)) == {"seed": 0, "first_seed_index": 0}


# -- the spec form -----------------------------------------------------------------------------

BLOCKS = Path(__file__).resolve().parents[1] / "sweeps" / "seed_blocks.yaml"


def test_the_block_spec_has_one_trial_per_block_at_disjoint_seed_indices():
    from tune_gems.sweep.spec_load import block_grid, load_spec

    spec = load_spec(BLOCKS)
    assert spec.num_samples == 4 and block_grid(spec) == {"first_seed_index": [0, 64, 128, 192]}
    shifted = load_spec(BLOCKS, ["blocks.seed_blocks=3", "config.trainer.population=8", "config.first_seed_index=1000"])
    assert shifted.num_samples == 3 and block_grid(shifted) == {"first_seed_index": [1000, 1008, 1016]}
    assert block_grid(load_spec(BLOCKS, ["blocks=null"])) == {}
    again = type(spec).model_validate(spec.model_dump(mode="json"))  # the stored spec.yaml of a --resume
    assert again == spec


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("search.gems={g10: {modes: [measure, wire]}}", "blocks: a block sweep trains one design"),
        ("scheduler.type=asha", "blocks: the blocks are one design"),
        ("seeds=common", "seeds: common contradicts blocks"),
        ("num_samples=2", "num_samples: a block sweep runs one trial per block (4)"),
        ("blocks.seed_blocks=0", "blocks.seed_blocks"),
        ("blocks.seeds=4", "blocks.seeds: unknown key"),
    ],
)
def test_a_bad_block_spec_is_one_line_naming_the_key(override, fragment):
    from tune_gems.sweep.spec_load import load_spec

    with pytest.raises(ConfigError) as e:
        load_spec(BLOCKS, [override])
    assert fragment in str(e.value) and "\n" not in str(e.value)


# -- benchmarks/seed_blocks.py: the multi-GPU figures from Tune's result.json ---------------------


def _result_json(exp: Path, tid: str, first: int, gpu: str, start: float, epochs: int, train_s: float) -> None:
    import json

    d = exp / f"train_trial_{tid}"
    d.mkdir(parents=True)
    lines = [{"trial_id": tid, "epoch": e, "timestamp": start + 10.0 * e, "time_this_iter_s": 10.0, "train_s": train_s,
              "eval_s": 1.0, "node_id": "n1", "gpu_ids": gpu, "cuda_visible_devices": gpu,
              "config": {"first_seed_index": first}} for e in range(1, epochs + 1)]
    (d / "result.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_the_block_benchmark_reports_placement_training_share_and_scaling(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import seed_blocks as bench

    one, two = tmp_path / "one", tmp_path / "two"
    _result_json(one, "a", 0, "0", 1000.0, 3, 8.0)
    _result_json(two, "a", 0, "0", 1000.0, 3, 8.0)
    _result_json(two, "b", 64, "1", 1001.0, 3, 8.0)
    ref = bench.measure(one, sweep_wall=40.0)
    run = bench.measure(two, sweep_wall=50.0)
    assert [(b["first_seed_index"], b["gpu_ids"], b["cuda_visible_devices"]) for b in run["blocks"]] == [(0, "0", "0"), (64, "1", "1")]
    assert run["summary"]["distinct_gpus"] == 2 and run["summary"]["train_share_of_device_time"] == pytest.approx(48 / 100)
    sc = bench.scaling(run, ref)
    assert sc["efficiency"] == pytest.approx(0.8) and sc["speedup_seeds_per_s"] == pytest.approx(1.6) and not sc["meets_goal"]
