"""Who each member of a run is, as the result rows and `eval_returns.npz` name it (docs/results.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tune_gems.design.arm_sets import arm_aliases
from tune_gems.market.features import Market
from tune_gems.trainer.learner import Learner


@dataclass(frozen=True)
class MemberIds:
    """The run's arms, folds and histories, and per member its arm, seed index, seed, path, fold, history, pair."""

    arms: tuple[str, ...]
    folds: tuple[int, ...]
    arm: tuple[str, ...]
    seed_index: tuple[int, ...]
    seed: tuple[int, ...]
    path: tuple[int, ...]
    fold: tuple[int, ...]
    pair: tuple[int, ...]
    histories: tuple[str, ...] = ("",)
    history: tuple[int, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def members(self) -> int:
        return len(self.arm)


def member_ids(learner: Learner, market: Market) -> MemberIds:
    layout, members = learner.layout, range(learner.P)
    cell = [layout.history_index(m) * layout.folds + learner.fold_of_member[m] for m in members]
    return MemberIds(arms=tuple(str(a) for a in layout.arms), folds=tuple(int(f) for f in market.fold_ids),
        arm=tuple(str(layout.arm_of(m)) for m in members), seed_index=tuple(int(layout.seed_index(m)) for m in members),
        seed=tuple(int(s) for s in learner.seeds), path=tuple(int(p) for p in learner.path_of_member),
        fold=tuple(int(market.fold_ids[learner.fold_of_member[m]]) for m in members),
        pair=tuple(cell[m] * layout.seeds_per_arm + layout.seed_slot(m) for m in members),
        histories=tuple(spec.name for spec in learner.cfg.data.price_histories),
        history=tuple(int(layout.history_index(m)) for m in members), aliases=arm_aliases(learner.cfg))
