"""Helpers shared by the environment tests: episodes walked at random, and a policy evaluated
eagerly over a whole segment."""

from __future__ import annotations

import torch

from tune_gems.market.env import VecTradingEnv
from tune_gems.market.segment_evaluator import SegmentEvaluator
from tune_gems.rng import CounterRNG, member_seeds, to_integers


def evaluate_segment(market, actions, cost, policy, population, segment, path_of_member=None, fold_of_member=None):
    """Eager one-off evaluation (`SegmentEvaluator` stepped T times): per-step net returns and
    positions, both [P,T]."""
    ev = SegmentEvaluator(market, actions, cost, policy, population, segment, path_of_member, fold_of_member)
    for _ in range(ev.T):
        ev.step()
    return ev.returns.clone(), ev.positions.clone()


def walk_episodes(env: VecTradingEnv, seed: int, steps: int) -> tuple[list[set[int]], list[list[int]]]:
    """Reset `env` and take `steps` random steps, every draw from the members' own RNG (the
    members' seeds from `seed`): per member, the decision times it visited and the times its
    episodes started at (the first step of each episode)."""
    P, E = env.t.shape
    rng = CounterRNG(member_seeds(seed, P), "cpu")
    env.reset(rng.uniform(1, (E,)))
    seen: list[set[int]] = [set() for _ in range(P)]
    starts: list[list[int]] = [[] for _ in range(P)]
    for _ in range(steps):
        rng.advance()
        for p in range(P):
            seen[p].update(env.t[p].tolist())
            starts[p].extend(env.t[p][env.steps[p] == 0].tolist())
        env.step(to_integers(rng.uniform(2, (E, 2)), torch.tensor(3)).view(P, E, 2), rng.uniform(1, (E,)))
    return seen, starts
