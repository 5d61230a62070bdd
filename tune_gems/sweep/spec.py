"""Sweep specs: YAML validated (pydantic) before Ray starts.

A spec holds the base trainer config, the search space (per gem: which modes Optuna may pick
and the log-scale weight range when wired; any other config key as a float/int/categorical
parameter), num_samples, the objective, resources per trial, the failure policy, an optional
early-stopping scheduler, and where results go. Every key of the search space is checked
against the trainer config at both ends of its range, so a typo or an impossible value fails
here, not in a trial an hour later.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tune_gems.config import (
    GEM_NAMES,
    Config,
    GemMode,
    _Strict,
    apply_overrides,
    build_config,
    format_validation_error,
    read_yaml,
    set_dotted,
)
from tune_gems.errors import ConfigError
from tune_gems.metrics import EPOCH_METRICS


class GemSearch(_Strict):
    modes: list[GemMode] = Field(default_factory=lambda: ["measure", "wire"])
    weight_low: float = Field(1e-3, gt=0.0)
    weight_high: float = Field(1.0, gt=0.0, le=1e3)

    @model_validator(mode="after")
    def _check(self) -> "GemSearch":
        if not self.modes or len(set(self.modes)) != len(self.modes):
            raise ValueError("modes must be a non-empty list without repeats")
        if not self.weight_low < self.weight_high:
            raise ValueError("weight_low must be below weight_high")
        return self


class ParamSpace(_Strict):
    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> "ParamSpace":
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs choices")
            return self
        if self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"a {self.type} parameter needs low < high")
        if self.log and self.low <= 0:
            raise ValueError("a log-scale parameter needs low > 0")
        return self

    def ends(self) -> list[Any]:
        if self.type == "categorical":
            return list(self.choices or [])
        cast = int if self.type == "int" else float
        return [cast(self.low), cast(self.high)]


class SearchSpec(_Strict):
    gems: dict[str, GemSearch] = Field(default_factory=dict)
    params: dict[str, ParamSpace] = Field(default_factory=dict)

    @field_validator("gems")
    @classmethod
    def _known_gems(cls, v: dict) -> dict:
        unknown = sorted(set(v) - set(GEM_NAMES))
        if unknown:
            raise ValueError(f"unknown gem {unknown[0]!r} (known: {', '.join(GEM_NAMES)})")
        return v

    @field_validator("params")
    @classmethod
    def _not_gems(cls, v: dict) -> dict:
        for key in v:
            if key.startswith("gems.") or key == "seed":
                raise ValueError(f"{key}: gem modes/weights go under search.gems, and seeds under `seeds`")
        return v


class ObjectiveSpec(_Strict):
    metric: str = "val_sharpe_mean"
    mode: Literal["max", "min"] = "max"

    @field_validator("metric")
    @classmethod
    def _searchable(cls, v: str) -> str:
        if v.startswith("test_"):
            raise ValueError("the test segment is never searched on: choose a validation or training metric")
        if v not in EPOCH_METRICS or v in ("epoch", "diverged"):
            raise ValueError(f"unknown metric {v!r}")
        return v


class ResourcesSpec(_Strict):
    cpu: float = Field(1.0, gt=0.0)
    gpu: float | None = Field(None, ge=0.0, description="GPUs per trial; null = 1 when the cluster has GPUs, else 0")

    @field_validator("gpu")
    @classmethod
    def _fraction_or_whole(cls, v: float | None) -> float | None:
        if v is not None and v > 1 and v != int(v):
            raise ValueError("more than one GPU per trial must be a whole number")
        return v


class FailureSpec(_Strict):
    max_failures: int = Field(2, ge=-1, description="retries of a failed trial from its checkpoint (-1: forever)")
    fail_fast: bool = False


class SchedulerSpec(_Strict):
    type: Literal["none", "asha"] = "none"
    grace_period: int = Field(2, ge=1)
    reduction_factor: float = Field(3.0, gt=1.0)


class SweepSpec(_Strict):
    name: str | None = None
    description: str = ""
    storage: str = "experiments"
    config: dict[str, Any] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)
    num_samples: int = Field(4, ge=1)
    max_concurrent_trials: int | None = Field(None, ge=1)
    seeds: Literal["per_trial", "common"] = Field(
        "per_trial", description="per_trial: trial n uses seed+n; common: every trial uses the same member seeds"
    )
    sampler_seed: int = 0
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    failure: FailureSpec = Field(default_factory=FailureSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    checkpoints_to_keep: int = Field(2, ge=1)

    def base_config(self) -> Config:
        return build_config(copy.deepcopy(self.config), "config")

    @property
    def searches(self) -> bool:
        return bool(self.search.gems or self.search.params)


def trial_config(base: dict[str, Any], params: dict[str, Any]) -> Config:
    """The full config of one trial: the base tree with the trial's dotted parameters applied."""
    tree = copy.deepcopy(base)
    for key, value in params.items():
        set_dotted(tree, key, value)
    return build_config(tree, "trial config")


def _check_search_against_config(spec: SweepSpec, source: str) -> None:
    base = spec.config
    for key, space in spec.search.params.items():
        for value in space.ends():
            try:
                trial_config(base, {key: value})
            except ConfigError as e:
                raise ConfigError(f"{source}: search.params.{key}: {value!r} is not a valid value ({e})") from None
    for gem, gs in spec.search.gems.items():
        for mode in gs.modes:
            trial_config(base, {f"gems.{gem}.mode": mode})
        for w in (gs.weight_low, gs.weight_high):
            try:
                trial_config(base, {f"gems.{gem}.weight": w})
            except ConfigError as e:
                raise ConfigError(f"{source}: search.gems.{gem}: weight {w} is out of range ({e})") from None


def load_spec(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    """Read, override (`key=value` on the spec tree, e.g. config.trainer.epochs=2) and validate."""
    tree = read_yaml(path)
    apply_overrides(tree, list(overrides or []))
    try:
        spec = SweepSpec.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e)}") from None
    try:
        spec.base_config()
    except ConfigError as e:
        raise ConfigError(f"{path}: {str(e).replace('config: ', 'config.', 1)}") from None
    _check_search_against_config(spec, str(path))
    return spec
