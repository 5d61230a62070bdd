"""The plan of a confirmation: per gem the discovery trial it re-tests, with fresh seeds, seed
indices and paths (what makes it independent of the search), and the builder of its config. In the
command line's layer because the choice is the analysis's (`search_choice.choose_per_gem`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import pandas as pd

from tune_gems.analysis.verdicts.search_choice import Choice, choose_per_gem
from tune_gems.config.schema import Config
from tune_gems.design.arm_sets import confirmation_arms, with_arms
from tune_gems.rng import member_seeds
from tune_gems.sweep.spec import FIRST_SEED_INDEX, SweepSpec
from tune_gems.sweep.spec_load import trial_config

MIN_SEEDS = 2
"""Fewest seeds per arm a confirmation may ask for (one seed gives no paired test)."""


class Taken(NamedTuple):
    """An earlier confirmation trial's seeds: its trial seed and its block of seed indices."""

    seed: int
    first_seed_index: int
    population: int


@dataclass(frozen=True)
class Plan:

    gem: str
    trial_id: str
    seed: int
    first_seed_index: int
    synthetic_seed: int | None
    choice: Choice
    population: int = 0

    @property
    def path_seed(self) -> int | None:
        """The first fresh path (path of seed index s: synthetic seed + s); None on one history."""
        return None if self.synthetic_seed is None else self.synthetic_seed + self.first_seed_index

    @property
    def discovery_trial(self) -> str:
        return self.choice.trial_id


def searched_keys(spec: SweepSpec) -> list[str]:
    """The config keys the search set per trial (gem modes and weights, search.params)."""
    keys = [k for g in spec.search.gems for k in (f"gems.{g}.mode", f"gems.{g}.weight")]
    return keys + list(spec.search.params)


def _fresh_bases(trials: pd.DataFrame, members: pd.DataFrame, taken: Sequence[Taken]) -> tuple[int, int, int | None]:
    """(first unused trial seed, first unused seed index, largest synthetic seed) after the discovery and `taken`."""
    seeds = pd.to_numeric(trials.get("seed", pd.Series(dtype=float)), errors="coerce").dropna()
    seed_base = max([int(seeds.max()) if len(seeds) else 0, *(t.seed for t in taken)]) + 1
    syn = pd.to_numeric(trials.get("data.synthetic.seed", pd.Series(dtype=float)), errors="coerce").dropna()
    top_index = pd.to_numeric(members.get("seed_index", members.get("member", pd.Series(dtype=float))),
                              errors="coerce").max()
    index_base = max([int(top_index) + 1 if pd.notna(top_index) else 0, *(t.first_seed_index + t.population for t in taken)])
    return seed_base, index_base, (int(syn.max()) if len(syn) else None)


def used_member_seeds(members: pd.DataFrame, taken: Sequence[Taken]) -> set[int]:
    """Every member seed the search and the earlier confirmations (`taken`) trained."""
    used = set(pd.to_numeric(members["seed"], errors="coerce").dropna().astype(int)) if "seed" in members else set()
    return used.union(*(member_seeds(t.seed, t.population, t.first_seed_index) for t in taken))


def fresh_paths(spec: SweepSpec) -> bool:
    """Whether a confirmation trains on paths the search never saw (synthetic per-seed paths)."""
    data = spec.base_config().data
    return data.source == "synthetic" and data.synthetic.paths == "per_seed"


def plan_confirmation(spec: SweepSpec, trials: pd.DataFrame, members: pd.DataFrame, gems: list[str],
                      population: int | dict[str, int] | None = None, taken: Sequence[Taken] = (),
                      ) -> tuple[list[Plan], list[str], Callable[[Plan], Config]]:
    """The confirmation trials (one per wired gem), notes for the others and a config builder; no
    plan's member seed is one trained before or another plan's."""
    choices, notes = choose_per_gem(trials, gems, searched_keys(spec))
    seed_base, index_base, synthetic_seed = _fresh_bases(trials, members, taken)
    used = used_member_seeds(members, taken)
    base = spec.base_config()
    per_seed = fresh_paths(spec)
    sizes = [int(population.get(c.gem, base.trainer.population)) if isinstance(population, dict)
             else int(population or base.trainer.population) for c in choices]
    starts = [index_base + sum(sizes[:j]) for j in range(len(choices))]
    plans, seed = [], seed_base
    for c, size, start in zip(choices, sizes, starts):
        while used & set(block := member_seeds(seed, size, start)):
            seed += 1
        used |= set(block)
        plans.append(Plan(c.gem, f"confirm-{c.gem}", seed, start,
                          (base.data.synthetic.seed if synthetic_seed is None else synthetic_seed) if per_seed else None,
                          c, size))
        seed += 1

    def build(plan: Plan) -> Config:
        params = {**plan.choice.params, "seed": plan.seed, FIRST_SEED_INDEX: plan.first_seed_index}
        if plan.synthetic_seed is not None:
            params["data.synthetic.seed"] = plan.synthetic_seed
        if population is not None or plan.population != base.trainer.population:
            params["trainer.population"] = plan.population
        cfg = trial_config(spec.config, params)
        return with_arms(cfg, confirmation_arms(cfg, plan.gem), f"confirmation of {plan.gem}")

    histories = [h.name for h in base.data.price_histories]
    if not per_seed and len(histories) >= 2:  # the discovery's histories, kept: trial_config leaves data as the spec has it
        notes.append(f"the search's {len(histories)} price histories ({', '.join(histories)}): the confirmation has "
                     "fresh seeds on the same histories (each its own market, folds and test segment), so it is "
                     "conditional on them")
    elif not per_seed:
        notes.append("one price history (a file or synthetic paths: shared): the confirmation has fresh seeds on "
                     "the same history, so it is conditional on that history")
    return plans, notes, build
