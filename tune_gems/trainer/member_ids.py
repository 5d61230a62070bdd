"""Who each member of a run is: its arm, seed index, seed, market path, fold and price history, as
the result rows and `eval_returns.npz` name it (docs/results.md; the layout: tune_gems.design.arms)."""

from __future__ import annotations

from dataclasses import dataclass

from tune_gems.market.features import Market
from tune_gems.trainer.learner import Learner


@dataclass(frozen=True)
class MemberIds:
    """The run's arm names, fold ids and history names, and per member (P entries each, member
    order): its arm, seed index (the unit the analysis pairs and pools by), seed, price path,
    fold (the config's fold index, `data.folds`), price history (its index into `histories`)
    and pair key (the same seed index in the same history and fold: what a designed run's paired
    gains pair). Plain Python values: checkpoints load weights-only."""

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

    @property
    def members(self) -> int:
        return len(self.arm)


def member_ids(learner: Learner, market: Market, histories: tuple[str, ...] = ("",)) -> MemberIds:
    """The identities of `learner`'s members (its arms record's layout) on `market`'s folds;
    `histories`: the names of the run's price histories (`DataConfig.price_histories`)."""
    layout, members = learner.layout, range(learner.P)
    if len(histories) != layout.histories:
        raise ValueError(f"{len(histories)} history names for a layout of {layout.histories} histories")
    cell = [layout.history_index(m) * layout.folds + learner.fold_of_member[m] for m in members]
    return MemberIds(
        arms=tuple(str(a) for a in layout.arms),
        folds=tuple(int(f) for f in market.fold_ids),
        arm=tuple(str(layout.arm_of(m)) for m in members),
        seed_index=tuple(int(layout.seed_index(m)) for m in members),
        seed=tuple(int(s) for s in learner.seeds),
        path=tuple(int(p) for p in learner.path_of_member),
        fold=tuple(int(market.fold_ids[learner.fold_of_member[m]]) for m in members),
        pair=tuple(cell[m] * layout.seeds_per_arm + layout.seed_slot(m) for m in members),
        histories=tuple(histories),
        history=tuple(int(layout.history_index(m)) for m in members),
    )
