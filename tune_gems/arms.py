"""Arms: several configurations on the population axis of one run (docs/design.md, "Arms").

Members never mix, so the population axis can carry different configurations. An *arm* is one
setting of the per-member keys (gem modes and weights, spectral norm, NoisyNets, learning rate);
a run with A arms and `trainer.population` = S seeds trains P = A x S members in one graph.
Member m belongs to arm m // S and seed index m % S (arm-major), and seed index s gets the same
member seed in every arm (the seed that member s of a single-arm run with this `seed` gets), so
seed s of every arm starts from the same weights and draws the same random numbers: every
difference between two arms at one seed is caused by the arms alone.

This module is the arms' configuration: the YAML model, the expansion of `factors` (a full
factorial) or `list` into named arms, their validation (one line naming the bad key) and the
member layout. It imports the config module lazily, so `config.py` can hold an `arms` field.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tune_gems.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tune_gems.config import Config

DEFAULT_ARM = "default"
"""The name of the one arm of a run without `arms`."""

MODEL_SWITCHES = ("model.spectral_norm", "model.noisy", "trainer.lr", "trainer.replay_stream")
"""Per-member keys besides the gems' `mode` and `weight` (issue 12: everything else is per trial)."""

GEM_FIELDS = ("mode", "weight")
MAX_ARMS = 256
"""More arms than this is almost surely a mistyped factorial (levels multiply)."""


class ArmsConfig(BaseModel):
    """`arms:` in a config or a sweep spec's `config`: `factors` (every combination of levels is
    one arm) or `list` (explicit arms, each a `name` and dotted per-member keys)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    factors: dict[str, list[Any]] | None = Field(None, description="dotted per-member key -> its levels")
    list_: list[dict[str, Any]] | None = Field(None, alias="list", description="explicit arms: {name, key: value, ...}")

    @model_validator(mode="before")
    @classmethod
    def _flatten_nested_factors(cls, data: Any) -> Any:
        """`arms.factors.gems.g10.mode=[..]` on the command line nests the dotted key: flatten it."""
        if isinstance(data, dict) and isinstance(data.get("factors"), dict):
            from tune_gems.config import flatten

            data = {**data, "factors": flatten(data["factors"])}
        return data

    @model_validator(mode="after")
    def _one_form(self) -> "ArmsConfig":
        if (self.factors is None) == (self.list_ is None):
            raise ValueError("give exactly one of arms.factors and arms.list")
        if self.factors is not None:
            if not self.factors:
                raise ValueError("arms.factors is empty")
            for key, levels in self.factors.items():
                if not levels:
                    raise ValueError(f"arms.factors.{key}: no levels")
        if self.list_ is not None and not self.list_:
            raise ValueError("arms.list is empty")
        return self


@dataclass(frozen=True)
class Arm:
    """One configuration of the population axis: its name, the per-member keys it sets (dotted),
    and the full validated config of a single-arm run of it."""

    name: str
    settings: dict[str, Any]
    config: "Config"


def per_member_keys(cfg: "Config") -> tuple[str, ...]:
    """Every key that may vary per member: each gem's mode and weight, the model switches, lr,
    the replay nuisance stream (an A/A arm)."""
    gems = tuple(f"gems.{g}.{f}" for g in type(cfg.gems).model_fields for f in GEM_FIELDS)
    return gems + MODEL_SWITCHES


def resolved_settings(cfg: "Config") -> dict[str, Any]:
    """The value of every per-member key in `cfg` (a row of the arms table)."""
    from tune_gems.config import flatten

    flat = flatten(cfg.to_dict())
    return {k: flat[k] for k in per_member_keys(cfg)}


def _level_text(v: Any) -> str:
    return {True: "true", False: "false"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _check_key(key: str, allowed: tuple[str, ...], all_keys: set[str], where: str) -> None:
    if key in allowed:
        return
    if key in all_keys:
        raise ConfigError(f"{where}.{key}: cannot vary per member (per-member keys: {', '.join(allowed)})")
    raise ConfigError(f"{where}.{key}: unknown key")


def expand_arms(cfg: "Config", arms: ArmsConfig | None = None, source: str = "config") -> list[Arm]:
    """The named arms of a run. Without `arms`, one arm named `default` (the run itself).

    Each arm's config is the base config with that arm's settings applied and `arms` removed,
    validated as a whole: a level that fails validation is reported with the arm and key.
    """
    from tune_gems.config import build_config, flatten, set_dotted

    arms = arms if arms is not None else getattr(cfg, "arms", None)
    base = cfg.to_dict()
    base.pop("arms", None)
    if arms is None:
        return [Arm(DEFAULT_ARM, {}, build_config(base, source))]
    allowed = per_member_keys(cfg)
    all_keys = set(flatten(base))
    specs: list[tuple[str, dict[str, Any]]] = []
    if arms.factors is not None:
        for key in arms.factors:
            _check_key(key, allowed, all_keys, "arms.factors")
        keys = list(arms.factors)
        combos = list(itertools.product(*(arms.factors[k] for k in keys)))
        if len(combos) > MAX_ARMS:
            raise ConfigError(f"arms.factors: {len(combos)} arms (the product of the levels); at most {MAX_ARMS}")
        for combo in combos:
            specs.append(("", dict(zip(keys, combo))))  # named below, from the validated levels
    else:
        if len(arms.list_) > MAX_ARMS:
            raise ConfigError(f"arms.list: {len(arms.list_)} arms; at most {MAX_ARMS}")
        for i, entry in enumerate(arms.list_):
            entry = dict(entry)
            name = entry.pop("name", None)
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"arms.list.{i}.name: every listed arm needs a non-empty name")
            for key in entry:
                _check_key(key, allowed, all_keys, f"arms.list.{i}")
            specs.append((name.strip(), entry))
    seen: set[str] = set()
    out: list[Arm] = []
    for name, settings in specs:
        tree = copy.deepcopy(base)
        for key, value in settings.items():
            set_dotted(tree, key, value)
        label = name or ",".join(f"{k}={_level_text(v)}" for k, v in settings.items())
        arm_cfg = build_config(tree, f"{source}: arm {label!r}")
        resolved = {k: flatten(arm_cfg.to_dict())[k] for k in settings}
        name = name or ",".join(f"{k}={_level_text(v)}" for k, v in resolved.items())
        if name in seen:
            raise ConfigError(f"arms: duplicate arm {name!r}")
        seen.add(name)
        out.append(Arm(name, resolved, arm_cfg))
    return out


@dataclass(frozen=True)
class MemberLayout:
    """Which arm and seed index each of the P = arms x seeds members has (arm-major).

    `first_seed_index` (config `first_seed_index`): a seed block's first seed index in the
    design; member m is at position `seed_slot(m)` of its arm and has the design's seed index
    `first_seed_index + seed_slot(m)`."""

    arms: tuple[str, ...]
    seeds_per_arm: int
    first_seed_index: int = 0

    @property
    def members(self) -> int:
        return len(self.arms) * self.seeds_per_arm

    def arm_index(self, member: int) -> int:
        return member // self.seeds_per_arm

    def seed_slot(self, member: int) -> int:
        """The member's position among this run's seeds (0 .. seeds_per_arm - 1)."""
        return member % self.seeds_per_arm

    def seed_index(self, member: int) -> int:
        """The member's seed index in the design (the unit the analysis pairs and pools by)."""
        return self.first_seed_index + self.seed_slot(member)

    def arm_of(self, member: int) -> str:
        return self.arms[self.arm_index(member)]

    def member_seeds(self, seed: int) -> list[int]:
        """Member seeds: seed index s gets member s's seed of a single-arm run of every seed
        index, in every arm."""
        from tune_gems.rng import member_seeds

        per_seed = member_seeds(seed, self.seeds_per_arm, self.first_seed_index)
        return [per_seed[self.seed_slot(m)] for m in range(self.members)]

    def per_member(self, values_per_arm: list[Any]) -> list[Any]:
        """Broadcast one value per arm to one value per member."""
        if len(values_per_arm) != len(self.arms):
            raise ValueError(f"{len(values_per_arm)} values for {len(self.arms)} arms")
        return [values_per_arm[self.arm_index(m)] for m in range(self.members)]
