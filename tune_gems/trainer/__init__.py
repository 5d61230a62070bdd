"""The learner and its training loop (knows nothing of Ray or Optuna)."""

from tune_gems.trainer.trainer import EpochResult, Trainer, load_prices, prepare_market, resolve_device

__all__ = ["EpochResult", "Trainer", "load_prices", "prepare_market", "resolve_device"]
