"""Sweep specs: the pydantic models of a spec (loading and the checks across keys: `spec_load.py`)."""

from __future__ import annotations

import copy
import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tune_gems.config.schema import Config, GemMode, _Strict
from tune_gems.config.load import build_config
from tune_gems.sweep.tracking import TrackingSpec
from tune_gems.stats.metrics import SEARCHABLE_GAINS, epoch_metrics
from tune_gems.sweep.storage import STORAGE_TIMEOUT_S

DESIGN_NONE = "none"
DEFAULT_OBJECTIVE = "val_alpha_sharpe_mean_lastk"
"""The verdict metric: alpha Sharpe, mean of the last k epochs."""


class GemSearch(_Strict):
    modes: list[GemMode] = Field(default_factory=lambda: ["measure", "wire"],
        description="the gem's modes Optuna chooses from (off, measure, wire)")
    weight_low: float = Field(1e-3, gt=0.0, description="lowest weight Optuna proposes when the gem is wired (log scale)")
    weight_high: float = Field(1.0, gt=0.0, le=1e3, description="highest weight Optuna proposes when the gem is wired")

    @model_validator(mode="after")
    def _check(self) -> "GemSearch":
        if not self.modes or len(set(self.modes)) != len(self.modes):
            raise ValueError("modes must be a non-empty list without repeats")
        if not self.weight_low < self.weight_high:
            raise ValueError("weight_low must be below weight_high")
        return self


SAMPLER_SEED_MAX = 2**32 - 1
"""Largest Optuna sampler seed (numpy's RandomState range)."""
INT_BOUND = 2**53
"""Largest |bound| of an int parameter (beyond it a float cannot hold every integer)."""
SEARCH_REFUSED_PREFIXES = {
    "data.": "the price series is loaded once by the driver and shared by every trial, so a searched "
    "data key would be recorded per trial but never used; run one sweep per data setting",
}
FIRST_SEED_INDEX = "first_seed_index"
TRIAL_SET_KEYS = {
    "seed": "the design sets each trial's seed (the base `config.seed` + the trial's number, or the base for "
    "seeds: common); set config.seed and `seeds` instead",
    FIRST_SEED_INDEX: "the design sets each trial's first seed index (the base + the trial's number x its seed "
    "stride, or the block's); Optuna's value would be recorded while the design's trained: set "
    "config.first_seed_index instead",
}
"""Config keys the design sets per trial: searched, one value would be recorded while another trained."""


class ParamSpace(_Strict):
    type: Literal["float", "int", "categorical"] = Field(description="how Optuna proposes the config key's value")
    low: float | None = Field(None, description="float and int: the lowest value")
    high: float | None = Field(None, description="float and int: the highest value")
    log: bool = Field(False, description="float and int: propose on a log scale (needs low > 0)")
    choices: list[Any] | None = Field(None, description="categorical: the values to choose from (numbers, strings, booleans, null)")

    @model_validator(mode="after")
    def _check(self) -> "ParamSpace":
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs choices")
            for c in self.choices:
                if c is not None and not isinstance(c, (bool, int, float, str)):
                    raise ValueError(f"choice {c!r}: choices must be numbers, strings, booleans or null")
                if isinstance(c, float) and not math.isfinite(c):
                    raise ValueError(f"choice {c!r}: choices must be finite")
            if len({repr(c) for c in self.choices}) != len(self.choices):
                raise ValueError("choices must not repeat")
            return self
        if self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"a {self.type} parameter needs low < high")
        if self.log and self.low <= 0:
            raise ValueError("a log-scale parameter needs low > 0")
        if self.type == "int":
            for end in (self.low, self.high):
                if end != int(end) or abs(end) > INT_BOUND:
                    raise ValueError(f"an int parameter needs whole-number bounds within +-2**53 (got {end!r})")
        return self

    def ends(self) -> list[Any]:
        if self.type == "categorical":
            return list(self.choices or [])
        cast = int if self.type == "int" else float
        return [cast(self.low), cast(self.high)]


class SearchSpec(_Strict):
    gems: dict[str, GemSearch] = Field(default_factory=dict, json_schema_extra={"key_name": "gem"},
        description="per gem (g6, g10, ... as in config.gems): its searched modes and weight range")
    params: dict[str, ParamSpace] = Field(default_factory=dict,
        description="per dotted config key (e.g. trainer.lr): its search space; data.* keys, seed, first_seed_index and gems.* are refused")

    @field_validator("params")
    @classmethod
    def _not_gems(cls, v: dict) -> dict:
        for key in v:
            if key.startswith("gems."):
                raise ValueError(f"{key}: gem modes/weights go under search.gems")
            if key in TRIAL_SET_KEYS:
                raise ValueError(f"{key} cannot be searched: {TRIAL_SET_KEYS[key]}")
            for prefix, why in SEARCH_REFUSED_PREFIXES.items():
                if key.startswith(prefix):
                    raise ValueError(f"{key} cannot be searched: {why}")
        return v


class ObjectiveSpec(_Strict):
    metric: str = Field(DEFAULT_OBJECTIVE,
        description="the epoch metric Optuna optimises (no test_ metric; verdict_gain and the other gains only with design wire_search)")
    mode: Literal["max", "min"] = Field("max", description="maximise or minimise the metric")

    @field_validator("metric")
    @classmethod
    def _searchable(cls, v: str) -> str:
        if v.startswith("test_"):
            raise ValueError("the test segment is never searched on: choose a validation or training metric")
        if v in ("epoch", "diverged"):
            raise ValueError(f"{v!r} is not an objective")
        return v  # known metrics depend on the run's plug-ins and design: checked by SweepSpec


class ResourcesSpec(_Strict):
    cpu: float = Field(1.0, gt=0.0, le=1e4, description="CPUs per trial (Ray's resource request)")
    gpu: float | None = Field(None, ge=0.0, le=1e3, description="GPUs per trial; null = 1 when the cluster has GPUs, else 0")
    wait_for_nodes_s: float = Field(0.0, ge=0.0, le=86400.0,
        description="when no node of the cluster can hold one trial: seconds to wait for an autoscaler to add one (with a warning) before "
        "refusing; 0 refuses at once")

    @field_validator("gpu")
    @classmethod
    def _fraction_or_whole(cls, v: float | None) -> float | None:
        if v is not None and v > 1 and v != int(v):
            raise ValueError("more than one GPU per trial must be a whole number")
        return v


class FailureSpec(_Strict):
    max_failures: int = Field(2, ge=-1, description="retries of a failed trial from its checkpoint (-1: forever)")
    fail_fast: bool = Field(False, description="stop the whole sweep at the first trial that fails for good")


class SchedulerSpec(_Strict):
    type: Literal["none", "asha"] = Field("none", description="none: every trial runs its epochs; asha: stop poor trials early")
    grace_period: int = Field(2, ge=1, description="asha: epochs every trial runs before it may be stopped")
    reduction_factor: float = Field(3.0, gt=1.0, description="asha: 1 in this many trials goes on at each rung")


MAX_BLOCKS = 4096


class BlocksSpec(_Strict):
    """`blocks:` one design split into seed blocks, one trial (and GPU) per block."""

    seed_blocks: int = Field(..., ge=1, le=MAX_BLOCKS,
        description="trial b trains seed indices [f + b*S, f + (b+1)*S), S = config.trainer.population, f = config.first_seed_index "
        "(default 0); every block keeps the same arms")


class SweepSpec(_Strict):
    name: str | None = Field(None, description="experiment folder under storage (--name wins); none: <spec name>-<time>")
    description: str = Field("", description="free text about the sweep, kept in its spec.yaml")
    storage: str = Field("experiments", description="where experiments live: a local folder or a URI Ray understands (--storage wins)")
    storage_timeout_s: float = Field(STORAGE_TIMEOUT_S, gt=0.0, le=3600.0,
        description="seconds to reach a remote storage URI before Ray starts (then refused)")
    config: dict[str, Any] = Field(default_factory=dict,
        description="the base config of every trial: the config keys (tune-gems config, first table)")
    search: SearchSpec = Field(default_factory=SearchSpec)
    num_samples: int = Field(4, ge=1, description="trials Optuna proposes (with blocks: the number of blocks)")
    max_concurrent_trials: int | None = Field(None, ge=1, description="most trials running at once; none: as many as fit")
    seeds: Literal["per_trial", "common"] = Field("per_trial",
        description="per_trial: trial n uses seed+n and its own seed indices (and so its own synthetic paths), [f + n*S, f + (n+1)*S) with "
        "S the largest trainer.population of the spec; common: every trial uses the same member seeds and seed indices")
    blocks: BlocksSpec | None = Field(None,
        description="one design split into seed blocks, one trial (and GPU) per block; nothing searched")
    sampler_seed: int = Field(0, ge=0, le=SAMPLER_SEED_MAX, description="seed of Optuna's TPE sampler (numpy's range)")
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    failure: FailureSpec = Field(default_factory=FailureSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    checkpoints_to_keep: int = Field(2, ge=1, description="checkpoints Ray keeps per trial (the newest)")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    design: Literal["none", "wire_search", "wire_search_aa"] = Field(DESIGN_NONE,
        description="none: each trial is its config (and config.arms, if any); wire_search: each trial trains Optuna's proposal, a control "
        "and one without-<gem> arm per wired gem, paired by seed (tune_gems.design.arm_sets); wire_search_aa: the same and an A/A arm "
        "(the control with an independent replay stream: the learner's own null spread, reported beside the verdicts)")

    @model_validator(mode="after")
    def _known_names(self) -> "SweepSpec":
        """Gems and the objective checked against the run's own registry and design."""
        from tune_gems.gems import run_gems

        plugins = list((self.config or {}).get("plugins") or [])
        known = [g.name for g in run_gems(plugins)]
        unknown = sorted(set(self.search.gems) - set(known))
        if unknown:
            raise ValueError(f"search.gems: unknown gem {unknown[0]!r} (known: {', '.join(known)})")
        metric = self.objective.metric
        if metric in SEARCHABLE_GAINS:
            if self.design == DESIGN_NONE:
                raise ValueError(f"objective.metric: {metric} exists only with design: wire_search (use {DEFAULT_OBJECTIVE})")
        elif metric not in epoch_metrics(plugins):
            raise ValueError(f"objective.metric: unknown metric {metric!r}")
        return self

    @model_validator(mode="after")
    def _blocks(self) -> "SweepSpec":
        """A block sweep runs one design: nothing searched or stopped early, one trial per block."""
        if self.blocks is None:
            return self
        n = self.blocks.seed_blocks
        if self.searches:
            raise ValueError("blocks: a block sweep trains one design split into blocks; remove search "
                             "(search in one sweep, then run the chosen design in blocks)")
        if self.scheduler.type != "none":
            raise ValueError("blocks: the blocks are one design, none may be stopped early; use scheduler.type none")
        if "seeds" in self.model_fields_set and self.seeds == "common":
            raise ValueError("seeds: common contradicts blocks (every block has its own seed indices)")
        if "num_samples" in self.model_fields_set and self.num_samples != n:
            raise ValueError(f"num_samples: a block sweep runs one trial per block ({n}); leave num_samples out")
        self.__dict__["num_samples"] = n  # not through validate_assignment: it would re-run this check
        return self

    def base_config(self) -> Config:
        return build_config(copy.deepcopy(self.config), key_prefix="config.")

    @property
    def searches(self) -> bool:
        return bool(self.search.gems or self.search.params)
