"""What a gem function receives: one object of population-first tensors (docs/gems.md).

Shapes: P members, B samples, K action branches, A sub-actions, H trunk width, D stream width.
Every tensor has the member axis first, and a gem must not reduce across it: member p's value
depends on member p's slice alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class GemInputs:
    """One iteration's sampled transitions as the learner sees them.

    - `q_t` [P,B,K,A]: expected Q of s_t (online network; carries gradient in `wire` mode).
    - `q_tp1` [P,B,K,A]: expected Q of the one-step successor s_{t+1} (online network, run in
      one batch with s_t; carries gradient in `wire` mode).
    - `h_t` [P,B,H]: shared trunk features of s_t (online network).
    - `h_tp1` [P,B,H]: trunk features of s_{t+1} from the target network (a stable target:
      never carries gradient).
    - `adv_features` [P,K,B,D]: each action branch's advantage-stream features at s_t.
    - `action` [P,B,K] int64: the sub-action taken in each branch.
    - `reward` [P,B]: the sample's (scaled) n-step discounted return, as the C51 target uses it.
    - `not_done` [P,B]: 1.0 where s_{t+1} continues the episode, 0.0 where the episode ended
      at s_t (then s_{t+1} is meaningless: mask with it).
    - `head`: the gem's own parameters (`Gem.head`) as a callable bound to this iteration's
      weights; None for a gem without a head.
    """

    q_t: Any
    q_tp1: Any
    h_t: Any
    h_tp1: Any
    adv_features: Any
    action: Any
    reward: Any
    not_done: Any
    head: Optional[Callable[..., Any]] = None

    TENSORS = ("q_t", "q_tp1", "h_t", "h_tp1", "adv_features", "action", "reward", "not_done")

    @property
    def population(self) -> int:
        return int(self.q_t.shape[0])

    @property
    def batch(self) -> int:
        return int(self.q_t.shape[1])

    def detached(self) -> "GemInputs":
        """The same inputs cut from the autograd graph (what `measure` mode passes a gem)."""
        return dataclasses.replace(self, **{k: getattr(self, k).detach() for k in self.TENSORS})

    def with_head(self, head: Optional[Callable[..., Any]]) -> "GemInputs":
        return dataclasses.replace(self, head=head)
