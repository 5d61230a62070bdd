"""Greedy, noise-free evaluation over a whole segment: the weights computed once per pass, the steps
replayed EVAL_STEPS_PER_GRAPH per captured graph, the statistics back in one transfer."""

from __future__ import annotations

import numpy as np
import torch

from tune_gems.config.schema import EnvConfig
from tune_gems.market.features import Market
from tune_gems.market.segment_evaluator import SegmentEvaluator
from tune_gems.market.evaluation import evaluation_stats, read_back, segment_asset_returns
from tune_gems.model.layers import Affine
from tune_gems.trainer.graph import StepRunner
from tune_gems.trainer.learner import Learner

EVAL_STEPS_PER_GRAPH = 32
"""Evaluation steps per captured graph: T // 32 replays plus one, each replay a fixed launch cost."""


class GreedyEvaluator:
    """The greedy policy of `learner`'s online net on `market`'s segments (runners built on first use)."""

    def __init__(self, learner: Learner, market: Market, env: EnvConfig, use_graph: bool):
        self.learner, self.market, self.env, self.use_graph = learner, market, env, use_graph
        self._segments: dict[str, tuple[SegmentEvaluator, list[tuple[StepRunner, int]]]] = {}
        self._eval_w: dict | None = None  # the evaluation weights' buffers (_refresh_weights)

    def _greedy_policy(self, obs: torch.Tensor) -> torch.Tensor:
        net = self.learner.online
        with self.learner.matmul_precision():
            return net.expected_q(net(obs, self._weights()).logits).argmax(-1)

    def _weights(self) -> dict:
        if self._eval_w is None:
            self._refresh_weights()
        return self._eval_w

    def _refresh_weights(self) -> None:
        """The noise-free weights, once per pass into the buffers the captured steps read (the same bits)."""
        net = self.learner.online
        with self.learner.matmul_precision():
            fresh = net.weights("eval")
        if self._eval_w is None:
            self._eval_w = {k: Affine.copy_of(a) for k, a in fresh.items()}
        else:
            for k, (w, b) in fresh.items():
                self._eval_w[k][0].copy_(w)
                self._eval_w[k][1].copy_(b)

    def runners(self, segment: str) -> tuple[SegmentEvaluator, list[tuple[StepRunner, int]]]:
        if segment not in self._segments:
            learner = self.learner
            ev = SegmentEvaluator(
                self.market, learner.env.actions, self.env.cost, self._greedy_policy,
                learner.P, segment, path_of_member=learner.path_of_member, fold_of_member=learner.fold_of_member,
            )  # fmt: skip
            chunk = EVAL_STEPS_PER_GRAPH
            # one warm-up call before capture: the runner for the rest is first called T % chunk
            # steps before the segment's end, and its warm-up must not step past it
            runners = [(StepRunner(ev.step, ev.state_tensors, self.use_graph, warmup=1, steps=chunk), ev.T // chunk)]
            if ev.T % chunk:
                runners.append((StepRunner(ev.step, ev.state_tensors, self.use_graph, warmup=1, steps=ev.T % chunk), 1))
            self._segments[segment] = (ev, [(r, n) for r, n in runners if n])
        return self._segments[segment]

    @torch.no_grad()
    def evaluate(self, segment: str) -> tuple[dict[str, np.ndarray], torch.Tensor, torch.Tensor]:
        """The greedy policy over a segment: ({stat: [P]}, net returns [P,T], positions [P,T])."""
        ev, runners = self.runners(segment)
        self._refresh_weights()
        ev.reset()
        for runner, calls in runners:
            for _ in range(calls):
                runner()
        asset = self.asset_returns(segment)  # each member's own path and fold window
        stats = read_back(evaluation_stats(ev.positions, asset, self.env.cost, self.env.periods_per_year))
        return stats, ev.returns.clone(), ev.positions.clone()

    def asset_returns(self, segment: str) -> torch.Tensor:
        learner = self.learner
        return segment_asset_returns(self.market, segment, learner.path_of_member, learner.fold_of_member)
