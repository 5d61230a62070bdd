"""The Optuna study bookkeeping of the sweep's searcher through Optuna's public API (issue 23):
a trial told by the searcher is found finished in the journal, and orphaned RUNNING trials are
closed with their note. Without Ray running: the searcher is driven by hand."""

from __future__ import annotations

import optuna

from tune_gems.sweep.search import ORPHAN_NOTE, DivergenceAwareOptunaSearch, close_orphaned_trials, journal_storage


def _space(trial: optuna.Trial) -> dict:
    trial.suggest_float("x", 0.0, 1.0)
    return {"seed": 0}


def test_a_told_trial_is_finished_in_the_journal(tmp_path):
    searcher = DivergenceAwareOptunaSearch(space=_space, metric="objective", mode="max", study_name="s",
                                           storage=journal_storage(tmp_path / "journal.log"),
                                           sampler=optuna.samplers.RandomSampler(seed=0))
    assert "x" in searcher.suggest("t1") and not searcher._finished_in_journal("t1")
    assert not searcher._finished_in_journal("never asked")
    searcher.on_trial_complete("t1", {"objective": 1.5})
    assert searcher._finished_in_journal("t1")
    searcher.suggest("t2")
    searcher.on_trial_complete("t2", {"objective": float("nan")})  # diverged: FAIL, not RUNNING
    states = [t.state for t in optuna.load_study(study_name="s", storage=journal_storage(tmp_path / "journal.log")).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]


def test_orphaned_running_trials_are_failed_with_their_note(tmp_path):
    path = tmp_path / "journal.log"
    study = optuna.create_study(study_name="s", storage=journal_storage(path))
    done, orphan = study.ask(), study.ask()
    study.tell(done, 1.0)
    assert close_orphaned_trials("s", path) == 1
    trials = optuna.load_study(study_name="s", storage=journal_storage(path)).trials
    assert trials[orphan.number].state == optuna.trial.TrialState.FAIL
    assert trials[orphan.number].user_attrs == {"orphaned": ORPHAN_NOTE}
    assert trials[done.number].state == optuna.trial.TrialState.COMPLETE and not trials[done.number].user_attrs
