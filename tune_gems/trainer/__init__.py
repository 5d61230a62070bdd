"""The learner and its training loop (knows nothing of Ray or Optuna)."""
