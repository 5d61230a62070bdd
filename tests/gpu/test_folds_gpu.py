"""Walk-forward folds and purged cross-validation on the GPU (issues 20, 30): the arms invariant extended to folds, with the CUDA
kernels and the captured graph.

Run on the GPU machine: `pytest -m gpu tests/gpu/test_folds_gpu.py -q` (skipped without CUDA).

3 folds x 2 arms x 4 seeds (P = 24) in one graph against, per fold, a graph run of that fold
alone with the same 2 arms (P = 8). Both runs have several (fold, arm) blocks, so every matmul
and every per-group reduction runs per block of 4 members in both: the same shapes, so the
comparison tests what the invariant promises (a member's numbers do not depend on how many
folds share the graph), not blocked against unblocked arithmetic. On failure it names the
first iteration and the state tensors that differ (tests/gpu/test_arms_gpu.py's helpers).
"""

from __future__ import annotations

import pytest
import torch

from test_arms_gpu import SMALL, _lockstep, _Run
from tune_gems.design.arms import ArmsConfig, expand_arms
from tune_gems.config.load import load_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

FOLDS = ["data.folds.k=3", "data.folds.val_length=200", "data.folds.gap=5"]
PURGED = ["data.folds.scheme=purged", "data.folds.k=3", "data.folds.embargo=5"]
ARMS = {"factors": {"gems.g10.mode": ["measure", "wire"]}}


class _FoldRun(_Run):
    """test_arms_gpu's graph-stepped learner, on a market of some of the config's folds."""

    def __init__(self, cfg, arms, folds=None):
        from tune_gems.ops import resolve_backend
        from tune_gems.trainer.run_setup import prepare_market
        from tune_gems.trainer.graph import StepRunner
        from tune_gems.trainer.learner import Learner

        dev = torch.device(cfg.device)
        market = prepare_market(cfg, dev, n_seed_indices=cfg.trainer.population, folds=folds)
        self.learner = Learner(cfg, market, dev, resolve_backend(cfg.kernels, dev), arms=arms)
        self.learner.reset_envs()
        for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
            self.learner.collect()
        self.runner = StepRunner(self.learner.iteration, self.learner.state_tensors, use_graph=True)


@pytest.mark.parametrize("design", [FOLDS, PURGED], ids=["walk_forward", "purged"])
def test_each_folds_members_equal_a_graph_run_of_that_fold_alone_on_gpu(design):
    """Walk-forward folds, and purged cross-validation (issue 30: episode starts over two runs
    of rows inside the captured graph)."""
    cfg = load_config(None, [*SMALL, *design])
    arms = expand_arms(cfg, ArmsConfig.model_validate(ARMS))
    S, A, F = cfg.trainer.population, len(arms), 3
    together = _FoldRun(cfg, arms)
    assert together.learner.P == F * A * S
    alone = [
        (_FoldRun(cfg, arms, folds=[f]), [f * A * S + q for q in range(A * S)], list(range(A * S)))
        for f in range(F)
    ]  # fmt: skip
    _lockstep(together, alone)
    params = together.learner.online_flat.data
    assert not torch.equal(params[0], params[A * S])  # the folds differ, so the comparison can fail
