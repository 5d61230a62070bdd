"""The Tune run of a sweep: the Tuner, new or restored, with the trial function and its callbacks."""

from __future__ import annotations

from tune_gems.contracts.result_files import JOURNAL_FILE
from tune_gems.sweep.search import make_searcher
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import block_grid
from tune_gems.sweep.storage import ExperimentStore


def fit_tuner(spec: SweepSpec, store: ExperimentStore, name: str, prices, resources: dict, resume: bool, verbose: bool = False):
    """Run the trials to the end (or Ctrl-C); `resume` restores and finishes unfinished and errored ones."""
    from ray import tune

    from tune_gems.sweep.progress import SweepConsole, TrialEvents, ray_verbosity
    from tune_gems.sweep.tracking import tracking_callbacks
    from tune_gems.sweep.trainable import train_trial

    trainable = tune.with_parameters(train_trial, base=spec.config, prices=prices, objective=spec.objective.metric,
        design=spec.design, verbose=verbose)
    trainable = tune.with_resources(trainable, resources)
    mirror = (store.storage, name) if store.local_dir is None else None
    if resume:
        tuner = tune.Tuner.restore(store.uri, trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        blocks = block_grid(spec)
        # blocks: Tune's grid, one trial per block, each run exactly once (it is part of Tune's saved
        # state, so a resumed driver neither repeats nor skips a block); nothing to search.
        # reuse_actors: one actor runs trial after trial, its imports, CUDA context and markets kept.
        tune_config = tune.TuneConfig(
            search_alg=None if blocks else make_searcher(spec, name, store.journal_path(JOURNAL_FILE), mirror),
            scheduler=_scheduler(spec), num_samples=1 if blocks else spec.num_samples,
            max_concurrent_trials=spec.max_concurrent_trials, reuse_actors=True)
        callbacks = [SweepConsole(spec.num_samples, spec.objective.metric, spec.objective.mode, verbose),
                     TrialEvents(),  # TensorBoard: train's tags, one run per trial id (in place of Tune's logger)
                     *tracking_callbacks(spec.tracking)]
        run_config = tune.RunConfig(
            name=name, storage_path=store.storage, callbacks=callbacks, verbose=ray_verbosity(verbose),
            failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures, fail_fast=spec.failure.fail_fast),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.checkpoints_to_keep))
        tuner = tune.Tuner(trainable, param_space={key: tune.grid_search(values) for key, values in blocks.items()},
                           tune_config=tune_config, run_config=run_config)
    return tuner.fit()


def _scheduler(spec: SweepSpec):
    if spec.scheduler.type == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(metric="objective", mode=spec.objective.mode, time_attr="training_iteration",
        max_t=spec.base_config().trainer.epochs, grace_period=spec.scheduler.grace_period,
        reduction_factor=spec.scheduler.reduction_factor)
