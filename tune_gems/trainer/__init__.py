"""The learner and its training loop (knows nothing of Ray or Optuna). Import each name from
the module that defines it: the trainer (`trainer.py`), its set-up (`run_setup.py`), the
evaluator, the kept evaluation window, the epoch rows, the learner."""
