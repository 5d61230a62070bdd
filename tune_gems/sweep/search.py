"""Optuna through Ray Tune's OptunaSearch: a define-by-run space (a weight only where a gem is
wired) and a journal study in the experiment folder. OptunaSearch's private state (`_ot_study`,
...) is used because Ray exposes no accessor."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from ray.tune.result import TRAINING_ITERATION
from ray.tune.search.optuna import OptunaSearch

from tune_gems.sweep.objective_noise import OBJECTIVE_DF, OBJECTIVE_SE
from tune_gems.sweep.spec import FIRST_SEED_INDEX, SweepSpec
from tune_gems.sweep.spec_load import seed_stride

from tune_gems.contracts.result_files import JOURNAL_FILE, JOURNAL_LOCK_SUFFIX  # noqa: E402 - JOURNAL_FILE re-exported for sweep.driver


TUNE_TRIAL_ATTR = "tune_trial_id"
"""The Optuna trial's user attribute holding its Tune trial id (the `trial_id` of trials.parquet)."""
TRIAL_ATTRS = ("config_label", "epoch", "val_sharpe_mean", "val_alpha_sharpe_mean", "test_sharpe_mean", "diverged",
               OBJECTIVE_SE, OBJECTIVE_DF)
"""Result keys copied into a finished Optuna trial's user attributes (the objective's standard
error and df: tune_gems.sweep.objective_noise)."""


def journal_storage(path: str | Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(path)))


def clear_stale_journal_lock(journal: Path) -> bool:
    """Remove Optuna's journal lock a killed driver left (under the writer lock only); True if one was."""
    from tune_gems.contracts.outputs import is_journal_lock

    lock = journal.with_name(journal.name + JOURNAL_LOCK_SUFFIX)
    if is_journal_lock(lock):
        lock.unlink()
        return True
    return False


class DefineByRun:
    """The search space as Optuna's define-by-run callable (a class: Tune pickles the searcher)."""

    def __init__(self, spec: SweepSpec):
        self.base_seed = int(spec.config.get("seed", 0))
        self.first_seed_index = spec.base_config().first_seed_index
        self.stride = seed_stride(spec)
        self.gems = dict(spec.search.gems)
        self.params = dict(spec.search.params)
        self.per_trial = spec.seeds == "per_trial"

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        for gem, gs in self.gems.items():
            mode = trial.suggest_categorical(f"gems.{gem}.mode", list(gs.modes))
            if mode == "wire":
                trial.suggest_float(f"gems.{gem}.weight", gs.weight_low, gs.weight_high, log=True)
        for key, p in self.params.items():
            if p.type == "categorical":
                trial.suggest_categorical(key, list(p.choices or []))
            elif p.type == "int":
                trial.suggest_int(key, int(p.low), int(p.high), log=p.log)
            else:
                trial.suggest_float(key, float(p.low), float(p.high), log=p.log)
        n = trial.number if self.per_trial else 0
        return {"seed": self.base_seed + n, FIRST_SEED_INDEX: self.first_seed_index + n * self.stride}


class DivergenceAwareOptunaSearch(OptunaSearch):
    """OptunaSearch safe for divergence and restarts: a diverged trial is told FAIL, nothing is told
    twice, a trial handed out after Tune's last snapshot is adopted (`_adopt`), and `journal_mirror` is
    copied out after every trial."""

    journal_mirror: tuple[str, str] | None = None
    objective_name: str | None = None
    """The spec's objective: the study's metric name (Tune calls it `objective`)."""

    def _name_study(self) -> None:
        if self.objective_name and self._ot_study is not None and self._ot_study.metric_names is None:
            with warnings.catch_warnings():  # "experimental" since Optuna 3.2; the name is worth it
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self._ot_study.set_metric_names([self.objective_name])

    def _annotate(self, trial_id: str, result: dict | None) -> None:
        """The Optuna trial's user attributes that join it to trials.parquet (label, final metrics)."""
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or self._finished_in_journal(trial_id):
            return
        for key in TRIAL_ATTRS:
            value = (result or {}).get(key)
            if isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value)):
                ot_trial.set_user_attr(key, value)

    def _finished_in_journal(self, trial_id: str) -> bool:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None:
            return False
        return _stored_trial(self._ot_study, ot_trial.number).state.is_finished()

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        value = result.get(self.metric)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return
        if self._finished_in_journal(trial_id) or self._reported_already(trial_id, result):
            return
        super().on_trial_result(trial_id, result)

    def _reported_already(self, trial_id: str, result: dict) -> bool:
        """Whether the Optuna trial holds this step already (a resumed trial reports it again)."""
        ot_trial = self._ot_trials.get(trial_id)
        step = result.get(TRAINING_ITERATION)
        if ot_trial is None or step is None:
            return False
        return step in _stored_trial(self._ot_study, ot_trial.number).intermediate_values

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._annotate(trial_id, result)
        self._complete(trial_id, result, error)
        self._push_journal()

    def suggest(self, trial_id: str):
        """Adopt the first orphan; copy the journal after each trial is asked."""
        if callable(self._space) and self._ot_study is not None and trial_id not in self._ot_trials:
            orphan = self._first_orphan()
            if orphan is not None:
                self._ot_trials[trial_id] = self._adopt(orphan)
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            self._name_study()
            self._record_tune_id(trial_id)
            self._push_journal()
        return config

    def _first_orphan(self) -> optuna.trial.FrozenTrial | None:
        """The lowest-numbered trial no Tune trial holds and no sweep closed."""
        held = {t.number for t in self._ot_trials.values()}
        free = [t for t in self._ot_study.get_trials(deepcopy=False) if t.number not in held and ORPHAN_ATTR not in t.user_attrs]
        return min(free, key=lambda t: t.number) if free else None

    def _adopt(self, orphan: optuna.trial.FrozenTrial) -> optuna.trial.Trial:
        """Run the orphan again: its parameters read back, the sampler moved past its draws as at first."""
        sampler = self._ot_study.sampler
        for name, dist in orphan.distributions.items():
            if not dist.single():
                sampler.sample_independent(self._ot_study, orphan, name, dist)
        return optuna.trial.Trial(self._ot_study, _trial_id(self._storage, self._study_name, orphan.number))

    def _record_tune_id(self, trial_id: str) -> None:
        """The Tune trial id on its Optuna trial, or on the study (a finished adopted trial)."""
        ot_trial = self._ot_trials[trial_id]
        if _stored_trial(self._ot_study, ot_trial.number).state.is_finished():
            self._ot_study.set_user_attr(f"{TUNE_TRIAL_ATTR}:{trial_id}", ot_trial.number)
        else:
            ot_trial.set_user_attr(TUNE_TRIAL_ATTR, trial_id)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        self._rebind_journal()

    def _rebind_journal(self) -> None:
        if self.journal_mirror is None or self._ot_study is None:
            return
        from tune_gems.sweep.storage import ExperimentStore

        storage, name = self.journal_mirror
        self._storage = journal_storage(ExperimentStore(storage, name).journal_path(JOURNAL_FILE))
        self._ot_study = optuna.load_study(study_name=self._study_name, sampler=self._sampler, storage=self._storage)
        self._ot_trials = {tid: optuna.trial.Trial(self._ot_study, _trial_id(self._storage, self._study_name, t.number))
                           for tid, t in self._ot_trials.items()}

    def _push_journal(self) -> None:
        if self.journal_mirror is None:
            return
        from tune_gems.sweep.storage import ExperimentStore

        storage, name = self.journal_mirror
        try:
            ExperimentStore(storage, name).push_journal(JOURNAL_FILE)
        except OSError as e:  # storage briefly unreachable: the next trial (or the end) copies it again
            print(f"tune-gems sweep: could not copy the Optuna journal to {storage}/{name} yet ({e})", flush=True)

    def _complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        if trial_id not in self._completed_trials and self._finished_in_journal(trial_id):
            self._completed_trials.add(trial_id)
            return
        value = (result or {}).get(self.metric)
        # NaN: no value (a diverged trial under a mean objective) -> FAIL; -inf / +inf is the
        # worst-outcome score of `verdict_gain` and is told as it is (Optuna takes infinities)
        if result and (value is None or (isinstance(value, float) and math.isnan(value))):
            if trial_id in self._completed_trials:
                return
            self._ot_study.tell(self._ot_trials[trial_id], None, state=optuna.trial.TrialState.FAIL)
            self._completed_trials.add(trial_id)
            return
        super().on_trial_complete(trial_id, result=result, error=error)


def _stored_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def _trial_id(storage: optuna.storages.BaseStorage, study_name: str, number: int) -> int:
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number)


def optuna_trial_numbers(study_name: str, journal_path: Path) -> dict[str, int]:
    """{Tune trial id: Optuna trial number} (trials.parquet's `optuna_trial`)."""
    study = optuna.load_study(study_name=study_name, storage=journal_storage(journal_path))
    out = {str(t.user_attrs[TUNE_TRIAL_ATTR]): t.number for t in study.get_trials(deepcopy=False) if TUNE_TRIAL_ATTR in t.user_attrs}
    prefix = f"{TUNE_TRIAL_ATTR}:"  # adopted trials that had finished (DivergenceAwareOptunaSearch._record_tune_id)
    out.update({key.removeprefix(prefix): int(n) for key, n in study.user_attrs.items() if key.startswith(prefix)})
    return out


ORPHAN_NOTE = "asked by a driver that stopped before Tune saved its state; no Tune trial ran it"
ORPHAN_ATTR = "orphaned"
"""User attribute of an Optuna trial closed by `close_orphaned_trials` (never adopted again)."""


def close_orphaned_trials(study_name: str, journal_path: Path) -> int:
    """Mark FAIL the trials still RUNNING after a finished sweep (asked by a killed driver); how many."""
    storage = journal_storage(journal_path)
    study = optuna.load_study(study_name=study_name, storage=storage)
    orphans = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    for t in orphans:
        storage.set_trial_user_attr(_trial_id(storage, study_name, t.number), ORPHAN_ATTR, ORPHAN_NOTE)
        study.tell(t.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    return len(orphans)


def make_searcher(spec: SweepSpec, study_name: str, journal_path: Path, mirror: tuple[str, str] | None = None) -> OptunaSearch:
    """The searcher; `mirror` = (storage URI, name) when the journal must be copied to a URI."""
    searcher = DivergenceAwareOptunaSearch(space=DefineByRun(spec), metric="objective", mode=spec.objective.mode,
        sampler=optuna.samplers.TPESampler(seed=spec.sampler_seed), study_name=study_name,
        storage=journal_storage(journal_path))
    searcher.journal_mirror = mirror
    searcher.objective_name = spec.objective.metric
    return searcher
