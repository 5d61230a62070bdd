"""The learner learns: on the embedded synthetic series, a short CPU run's validation Sharpe
beats the flat policy (Sharpe 0) across seeds, with a one-sided 95% t-interval above 0."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tune_gems.config import load_config
from tune_gems.trainer import Trainer

pytestmark = pytest.mark.slow


def test_short_default_run_beats_flat_across_seeds():
    cfg = load_config(None, ["trainer.population=8", "device=cpu"])  # defaults otherwise: 6 epochs
    t = Trainer(cfg, log=print)
    t.fit()
    final = [m["val_sharpe"] for m in t.member_history if m["epoch"] == cfg.trainer.epochs]
    x = np.asarray(final)
    n = len(x)
    lower = x.mean() - stats.t.ppf(0.95, n - 1) * x.std(ddof=1) / np.sqrt(n)
    print(f"final val Sharpe per member: {np.round(x, 2).tolist()} mean {x.mean():.2f} one-sided 95% lower bound {lower:.2f}")
    assert not t.diverged
    assert lower > 0.0, f"flat policy (Sharpe 0) not beaten: mean {x.mean():.2f}, lower bound {lower:.2f}"
