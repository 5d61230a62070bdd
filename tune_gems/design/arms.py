"""Arms: several configurations on the population axis of one run (docs/design.md "Arms"): the
`arms:` model expanded into validated named arms, and the member layout. A run expands its arms once
(`run_arms`) and hands the frozen `RunArms` to the estimate, the trainer and the learner."""

from __future__ import annotations

import itertools
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

from tune_gems.config.arms_section import (  # noqa: F401 - re-exported: the arms API
    DEFAULT_ARM, GEM_FIELDS, MAX_ARMS, MODEL_SWITCHES, ArmsConfig,
)
from tune_gems.config.schema import Config
from tune_gems.config.load import build_config
from tune_gems.config.dotted import flatten, with_dotted
from tune_gems.contracts.config_label import trial_label
from tune_gems.contracts.errors import ConfigError, control_characters

@dataclass(frozen=True)
class Arm:
    """One configuration of the population axis: name, the dotted keys it sets, its single-arm config."""

    name: str
    settings: dict[str, Any]
    config: Config


def per_member_keys(cfg: Config) -> tuple[str, ...]:
    gems = tuple(f"gems.{g}.{f}" for g in type(cfg.gems).model_fields for f in GEM_FIELDS)
    return gems + MODEL_SWITCHES


def resolved_settings(cfg: Config) -> dict[str, Any]:
    """The value of every per-member key in `cfg` (a row of the arms table)."""
    flat = flatten(cfg.to_dict())
    return {k: flat[k] for k in per_member_keys(cfg)}


def _level_text(v: Any) -> str:
    return {True: "true", False: "false"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _check_key(key: str, allowed: tuple[str, ...], base: dict[str, Any], where: str) -> None:
    if key in allowed:
        return
    if key in flatten(base):
        raise ConfigError(f"{where}.{key}: cannot vary per member (per-member keys: {', '.join(allowed)})")
    raise ConfigError(f"{where}.{key}: unknown key")


def expand_arms(cfg: Config, arms: ArmsConfig | None = None, source: str = "config") -> list[Arm]:
    """The named arms of a run (none: `default`), each validated whole, a bad level named with its arm."""
    arms = arms if arms is not None else cfg.arms
    if arms is None:
        return [Arm(DEFAULT_ARM, {}, cfg)]
    base = cfg.to_dict()
    base.pop("arms", None)
    allowed = per_member_keys(cfg)
    specs: list[tuple[str, dict[str, Any]]] = []
    if arms.factors is not None:
        for key in arms.factors:
            _check_key(key, allowed, base, "arms.factors")
        keys = list(arms.factors)
        count = math.prod(len(levels) for levels in arms.factors.values())  # before anything is built: 1e12 arms is a typo
        if count > MAX_ARMS:
            raise ConfigError(f"arms.factors: {count:g} arms (the product of the levels); at most {MAX_ARMS}")
        specs = [("", dict(zip(keys, combo))) for combo in itertools.product(*(arms.factors[k] for k in keys))]  # named below
    else:
        if len(arms.list_) > MAX_ARMS:
            raise ConfigError(f"arms.list: {len(arms.list_)} arms; at most {MAX_ARMS}")
        for i, entry in enumerate(arms.list_):
            entry = dict(entry)
            name = entry.pop("name", None)
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"arms.list.{i}.name: every listed arm needs a non-empty name")
            if control_characters(name):  # a name becomes a label, a column suffix and a TensorBoard tag
                raise ConfigError(f"arms.list.{i}.name: {name!r} holds a control character ({control_characters(name)[0]})")
            for key in entry:
                _check_key(key, allowed, base, f"arms.list.{i}")
            specs.append((name.strip(), entry))
    seen: set[str] = set()
    out: list[Arm] = []
    for name, settings in specs:
        label = name or ",".join(f"{k}={_level_text(v)}" for k, v in settings.items())
        arm_cfg = build_config(with_dotted(base, settings), f"{source}: arm {label!r}")
        flat = flatten(arm_cfg.to_dict())
        resolved = {k: flat[k] for k in settings}
        name = name or ",".join(f"{k}={_level_text(v)}" for k, v in resolved.items())
        if name in seen:
            raise ConfigError(f"arms: duplicate arm {name!r}")
        seen.add(name)
        out.append(Arm(name, resolved, arm_cfg))
    return out


@dataclass(frozen=True)
class MemberLayout:
    """History, fold, arm and seed slot of each of the P = H x F x A x S members, nested in that order."""

    arms: tuple[str, ...]
    seeds_per_arm: int
    first_seed_index: int = 0
    folds: int = 1
    histories: int = 1

    @property
    def members(self) -> int:
        return self.histories * self.folds * len(self.arms) * self.seeds_per_arm

    def history_index(self, member: int) -> int:
        return member // (self.folds * len(self.arms) * self.seeds_per_arm)

    def fold_index(self, member: int) -> int:
        return (member // (len(self.arms) * self.seeds_per_arm)) % self.folds

    def arm_index(self, member: int) -> int:
        return (member // self.seeds_per_arm) % len(self.arms)

    def seed_slot(self, member: int) -> int:
        return member % self.seeds_per_arm

    def seed_index(self, member: int) -> int:
        """The member's seed index in the design (the unit the analysis pairs and pools by)."""
        return self.first_seed_index + self.seed_slot(member)

    def arm_of(self, member: int) -> str:
        return self.arms[self.arm_index(member)]

    @property
    def blocks(self) -> list[slice]:
        """The rows of each (history, fold, arm) block of S members: what runs with a single arm's shapes."""
        S = self.seeds_per_arm
        return [slice(b * S, (b + 1) * S) for b in range(self.histories * self.folds * len(self.arms))]

    def member_seeds(self, seed: int) -> list[int]:
        """Member seeds: seed index s gets a single-arm run's seed s in every arm, fold and history."""
        from tune_gems.rng import member_seeds

        per_seed = member_seeds(seed, self.seeds_per_arm, self.first_seed_index)
        return [per_seed[self.seed_slot(m)] for m in range(self.members)]

    def per_member(self, values_per_arm: list[Any]) -> list[Any]:
        if len(values_per_arm) != len(self.arms):
            raise ValueError(f"{len(values_per_arm)} values for {len(self.arms)} arms")
        return [values_per_arm[self.arm_index(m)] for m in range(self.members)]


@dataclass(frozen=True)
class RunArms:
    """A run's arms, expanded and validated once (`run_arms`), and its member layout."""

    arms: tuple[Arm, ...]
    layout: MemberLayout

    @property
    def names(self) -> tuple[str, ...]:
        return self.layout.arms

    @property
    def members(self) -> int:
        return self.layout.members

    @property
    def labels(self) -> dict[str, str]:
        return {a.name: a.config.label() for a in self.arms}

    @property
    def label(self) -> str:
        """The label of the run's members (`config_label.trial_label`)."""
        return trial_label(list(self.labels.items()))

    def with_folds(self, folds: int) -> RunArms:
        """The same arms laid out over `folds` folds (a market of some of the config's folds)."""
        if folds == self.layout.folds:
            return self
        return dataclasses.replace(self, layout=dataclasses.replace(self.layout, folds=folds))


def run_arms(cfg: Config, arms: RunArms | Sequence[Arm] | None = None) -> RunArms:
    """The arms record of a run of `cfg` (default expanded from it; a given record checked against it)."""
    if isinstance(arms, RunArms):
        layout = arms.layout
        if (layout.seeds_per_arm, layout.first_seed_index) != (cfg.trainer.population, cfg.first_seed_index):
            raise ValueError(f"an arms record of {layout.seeds_per_arm} seeds from seed index {layout.first_seed_index} "
                             f"for a config of {cfg.trainer.population} from {cfg.first_seed_index}")
        return arms
    arms = tuple(arms) if arms is not None else tuple(expand_arms(cfg))
    layout = MemberLayout(tuple(a.name for a in arms), cfg.trainer.population, cfg.first_seed_index, folds=cfg.data.folds.k,
                          histories=len(cfg.data.price_histories))
    return RunArms(arms, layout)
