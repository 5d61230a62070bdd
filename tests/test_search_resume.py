"""A sweep driver killed between Optuna handing out a trial and Tune saving its state (issue 32,
item 5): the resumed searcher adopts that trial, so the resumed sweep asks the same trials as an
uninterrupted one: the same numbers (so the same per-trial seeds and seed indices), the same
parameters, in the same order, with no orphan left in the study.

Driven through the searcher Tune uses (tune_gems.sweep.search.DivergenceAwareOptunaSearch) the
way Tune drives it: `suggest` per new trial, `save` when Tune snapshots its experiment state,
`on_trial_complete` when a trial ends; the kill is dropping the searcher; the resume is a new
searcher `restore`d from the last snapshot, as `Tuner.restore` does. No Ray cluster is started.
"""

from __future__ import annotations

import optuna
import pytest

from sweep_fixtures import SMOKE, TINY_SWEEP
from tune_gems.sweep.search import ORPHAN_ATTR, close_orphaned_trials, journal_storage, make_searcher, optuna_trial_numbers
from tune_gems.sweep.spec_load import load_spec, trial_constants

N = 6
SPEC = [*TINY_SWEEP, f"num_samples={N}", "search.params={trainer.lr: {type: float, low: 0.0001, high: 0.01, log: true}}"]


@pytest.fixture(scope="module")
def spec():
    return load_spec(SMOKE, SPEC)


@pytest.fixture(scope="module")
def uninterrupted(spec, tmp_path_factory):
    """The N trials an uninterrupted driver asks, in order (each one finishing before the next)."""
    searcher = make_searcher(spec, "ref", tmp_path_factory.mktemp("ref") / "journal.log")
    asked = []
    for i in range(N):
        asked.append(searcher.suggest(f"t{i}"))
        searcher.on_trial_complete(f"t{i}", {"objective": float(i)})
    return asked


@pytest.mark.parametrize("snapshot_after", [0, 1, 3])
@pytest.mark.parametrize("orphans", [1, 2])
@pytest.mark.parametrize("orphan_state", ["running", "finished"])
def test_a_resumed_driver_asks_what_an_uninterrupted_one_asks(spec, uninterrupted, tmp_path, snapshot_after, orphans, orphan_state):
    journal = tmp_path / "journal.log"
    first = make_searcher(spec, "drv", journal)
    asked = []
    for i in range(snapshot_after):
        asked.append(first.suggest(f"t{i}"))
        first.on_trial_complete(f"t{i}", {"objective": float(i)})
    first.save(str(tmp_path / "searcher.pkl"))  # Tune's last snapshot
    for i in range(snapshot_after, snapshot_after + orphans):  # handed out after it: orphans
        first.suggest(f"t{i}")
        if orphan_state == "finished":
            first.on_trial_complete(f"t{i}", {"objective": float(i)})
    del first  # SIGKILL: nothing more is saved

    resumed = make_searcher(spec, "drv", journal)
    resumed.restore(str(tmp_path / "searcher.pkl"))
    for i in range(snapshot_after, N):
        asked.append(resumed.suggest(f"r{i}"))
        resumed.on_trial_complete(f"r{i}", {"objective": float(i)})

    assert asked == uninterrupted  # numbers (seeds, seed indices) and parameters, in order
    assert [a["seed"] for a in asked] == [trial_constants(spec, n)["seed"] for n in range(N)]
    study = optuna.load_study(study_name="drv", storage=journal_storage(journal))
    assert [t.number for t in study.trials] == list(range(N))  # no trial asked twice, none skipped
    assert close_orphaned_trials("drv", journal) == 0 and not any(ORPHAN_ATTR in t.user_attrs for t in study.trials)
    numbers = optuna_trial_numbers("drv", journal)  # trials.parquet's optuna_trial column
    assert all(numbers[f"r{i}"] == i for i in range(snapshot_after, N))


def test_a_trial_closed_as_orphaned_by_an_earlier_sweep_is_not_adopted(spec, tmp_path):
    journal = tmp_path / "journal.log"
    first = make_searcher(spec, "old", journal)
    first.save(str(tmp_path / "searcher.pkl"))
    first.suggest("t0")
    close_orphaned_trials("old", journal)  # what a finished sweep did with it before
    resumed = make_searcher(spec, "old", journal)
    resumed.restore(str(tmp_path / "searcher.pkl"))
    assert resumed.suggest("r0")["seed"] == trial_constants(spec, 1)["seed"]  # a new trial, number 1
