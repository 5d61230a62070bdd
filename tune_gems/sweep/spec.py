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
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tune_gems.config.schema import Config, GemMode, _Strict
from tune_gems.design.arm_sets import AA_STREAM
from tune_gems.config.yaml_io import apply_overrides, read_yaml
from tune_gems.config.load import build_config, format_validation_error
from tune_gems.config.dotted import set_dotted
from tune_gems.contracts.errors import ConfigError
from tune_gems.sweep.tracking import TrackingSpec, check_tracking
from tune_gems.stats.metrics import SEARCHABLE_GAINS, epoch_metrics
from tune_gems.sweep.storage import STORAGE_TIMEOUT_S

DESIGN_NONE = "none"
DEFAULT_OBJECTIVE = "val_alpha_sharpe_mean_lastk"
"""The verdict metric: alpha Sharpe (market exposure removed), mean of the last k epochs."""


class GemSearch(_Strict):
    modes: list[GemMode] = Field(
        default_factory=lambda: ["measure", "wire"], description="the gem's modes Optuna chooses from (off, measure, wire)"
    )
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
"""Largest Optuna sampler seed (numpy's RandomState takes 0 .. 2**32 - 1)."""
INT_BOUND = 2**53
"""Largest |bound| of an int parameter (beyond it a float cannot hold every integer)."""
SEARCH_REFUSED_PREFIXES = {
    "data.": "the price series is loaded once by the driver and shared by every trial, so a searched "
    "data key would be recorded per trial but never used; run one sweep per data setting",
}
FIRST_SEED_INDEX = "first_seed_index"
"""The config key a trial's seed block sets (tune_gems.config.schema.Config.first_seed_index)."""
TRIAL_SET_KEYS = {
    "seed": "the design sets each trial's seed (the base `config.seed` + the trial's number, or the base for "
    "seeds: common); set config.seed and `seeds` instead",
    FIRST_SEED_INDEX: "the design sets each trial's first seed index (the base + the trial's number x its seed "
    "stride, or the block's); Optuna's value would be recorded while the design's trained: set "
    "config.first_seed_index instead",
}
"""Config keys the design sets per trial (tune_gems.sweep.search.DefineByRun's constants, the
blocks' grid): Ray's OptunaSearch merges those constants over Optuna's suggestions, so a searched
one would be recorded by the study (and learnt from by its sampler) while another value trained."""


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
    gems: dict[str, GemSearch] = Field(
        default_factory=dict,
        description="per gem (g6, g10, ... as in config.gems): its searched modes and weight range",
        json_schema_extra={"key_name": "gem"},
    )
    params: dict[str, ParamSpace] = Field(
        default_factory=dict,
        description="per dotted config key (e.g. trainer.lr): its search space; data.* keys, seed, first_seed_index "
        "and gems.* are refused",
    )

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
    metric: str = Field(
        DEFAULT_OBJECTIVE,
        description="the epoch metric Optuna optimises (no test_ metric; verdict_gain and the other gains only with "
        "design wire_search)",
    )
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
    wait_for_nodes_s: float = Field(
        0.0,
        ge=0.0,
        le=86400.0,
        description="when no node of the cluster can hold one trial: seconds to wait for an autoscaler to add "
        "one (with a warning) before refusing; 0 refuses at once",
    )

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
"""More blocks than this is almost surely a mistyped count (each block is a Ray trial)."""


class BlocksSpec(_Strict):
    """`blocks:` one design split into trials, one Ray Tune trial per block, each on its own
    GPU. The block key is the set of config keys a trial's block sets: today the seed block
    (`first_seed_index`); walk-forward folds join it as a second key, and Tune's grid then runs
    every (seed block, fold) pair once."""

    seed_blocks: int = Field(
        ...,
        ge=1,
        le=MAX_BLOCKS,
        description="trial b trains seed indices [f + b*S, f + (b+1)*S), S = config.trainer.population, "
        "f = config.first_seed_index (default 0); every block keeps the same arms",
    )


class SweepSpec(_Strict):
    name: str | None = Field(None, description="experiment folder under storage (--name wins); none: <spec name>-<time>")
    description: str = Field("", description="free text about the sweep, kept in its spec.yaml")
    storage: str = Field("experiments", description="where experiments live: a local folder or a URI Ray understands (--storage wins)")
    storage_timeout_s: float = Field(
        STORAGE_TIMEOUT_S, gt=0.0, le=3600.0, description="seconds to reach a remote storage URI before Ray starts (then refused)"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="the base config of every trial: the config keys (tune-gems config, first table)"
    )
    search: SearchSpec = Field(default_factory=SearchSpec)
    num_samples: int = Field(4, ge=1, description="trials Optuna proposes (with blocks: the number of blocks)")
    max_concurrent_trials: int | None = Field(None, ge=1, description="most trials running at once; none: as many as fit")
    seeds: Literal["per_trial", "common"] = Field(
        "per_trial",
        description="per_trial: trial n uses seed+n and its own seed indices (and so its own synthetic paths), "
        "[f + n*S, f + (n+1)*S) with S the largest trainer.population of the spec; common: every trial "
        "uses the same member seeds and seed indices",
    )
    blocks: BlocksSpec | None = Field(
        None, description="one design split into seed blocks, one trial (and GPU) per block; nothing searched"
    )
    sampler_seed: int = Field(0, ge=0, le=SAMPLER_SEED_MAX, description="seed of Optuna's TPE sampler (numpy's range)")
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    failure: FailureSpec = Field(default_factory=FailureSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    checkpoints_to_keep: int = Field(2, ge=1, description="checkpoints Ray keeps per trial (the newest)")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    design: Literal["none", "wire_search", "wire_search_aa"] = Field(
        DESIGN_NONE,
        description="none: each trial is its config (and config.arms, if any); wire_search: each trial trains "
        "Optuna's proposal, a control and one without-<gem> arm per wired gem, paired by seed (tune_gems.design.arm_sets); "
        "wire_search_aa: the same and an A/A arm (the control with an independent replay stream: the learner's own "
        "null spread, reported beside the verdicts)",
    )

    @model_validator(mode="after")
    def _known_names(self) -> "SweepSpec":
        """Gems and the objective are checked against the run's own registry (plug-ins
        included) and design."""
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
        """A block sweep runs one design: nothing searched, nothing stopped early, one trial per
        block (num_samples is the number of blocks)."""
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
        """Whether Optuna proposes anything (gem modes/weights or parameters)."""
        return bool(self.search.gems or self.search.params)


def seed_stride(spec: SweepSpec) -> int:
    """Seed indices between the first seed index of one trial and the next (per_trial seeds,
    blocks): the most seeds per arm a trial of the spec can have, so trials never share one."""
    stride = spec.base_config().trainer.population
    space = spec.search.params.get("trainer.population")
    if space is not None:
        stride = max([stride, *(int(v) for v in space.ends())])
    return stride


def trial_constants(spec: SweepSpec, number: int) -> dict[str, int]:
    """The config keys the design sets for trial `number` (Optuna's trial number; per_trial
    seeds: seed = base seed + n, first seed index = base + n x `seed_stride`; common: the
    bases). tune_gems.sweep.search.DefineByRun returns these, and `_check_trial_grid` validates
    the largest before Ray starts."""
    base = spec.base_config()
    n = number if spec.seeds == "per_trial" else 0
    return {"seed": base.seed + n, FIRST_SEED_INDEX: base.first_seed_index + n * seed_stride(spec)}


def block_grid(spec: SweepSpec) -> dict[str, list[Any]]:
    """Per block key, its values: one trial per combination (Tune's grid). Today the seed block's
    first seed index; a fold key joins here."""
    if spec.blocks is None:
        return {}
    first, stride = spec.base_config().first_seed_index, seed_stride(spec)
    return {FIRST_SEED_INDEX: [first + b * stride for b in range(spec.blocks.seed_blocks)]}


def trial_config(base: dict[str, Any], params: dict[str, Any]) -> Config:
    """The full config of one trial: the base tree with the trial's dotted parameters applied."""
    tree = copy.deepcopy(base)
    for key, value in params.items():
        set_dotted(tree, key, value)
    return build_config(tree, "trial config")


def arms_keys(config: dict[str, Any]) -> set[str]:
    """The dotted keys the config's `arms` set (every factor, every key of a listed arm)."""
    from tune_gems.config.dotted import flatten

    arms = config.get("arms") if isinstance(config, dict) else None
    if not isinstance(arms, dict):
        return set()
    keys: set[str] = set()
    if isinstance(arms.get("factors"), dict):
        keys |= set(flatten(arms["factors"]))
    for entry in arms.get("list") or []:
        if isinstance(entry, dict):
            keys |= {k for k in flatten(entry) if k != "name"}
    return keys


def _check_search_not_set_by_arms(spec: SweepSpec, source: str) -> None:
    """A key both searched and set by the arms would be recorded per trial (Optuna's value)
    while every member trained with the arms' value: refused."""
    set_by_arms = arms_keys(spec.config)
    searched = [(f"search.params.{k}", k) for k in spec.search.params]
    searched += [(f"search.gems.{g}", f"gems.{g}.{f}") for g in spec.search.gems for f in ("mode", "weight")]
    for field, key in searched:
        if key in set_by_arms:
            raise ConfigError(
                f"{source}: {field}: {key} is also set by config.arms, so the arms' value would train while each "
                "trial recorded the searched one; search it or set it per arm, not both"
            )


def _check_search_against_config(spec: SweepSpec, source: str) -> None:
    _check_search_not_set_by_arms(spec, source)
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
    import_spec_plugins(tree, str(path))
    try:
        spec = SweepSpec.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, model=SweepSpec)}") from None
    try:
        spec.base_config()
    except ConfigError as e:  # named as the spec's keys: config.trainer.epochs
        raise ConfigError(f"{path}: {e}") from None
    _check_search_against_config(spec, str(path))
    _check_design(spec, str(path))
    _check_design_keys(spec, str(path))
    _check_trial_grid(spec, str(path))
    _check_scheduler(spec, str(path))
    check_tracking(spec.tracking, str(path))
    return spec


def import_spec_plugins(tree: dict[str, Any], source: str) -> None:
    """Import the gem plug-ins the spec's config names, before its gems are validated."""
    from tune_gems.gems import import_plugins

    config = tree.get("config") if isinstance(tree, dict) else None
    plugins = config.get("plugins") if isinstance(config, dict) else None
    if not plugins:
        return
    from tune_gems.stats.metrics import check_plugin_columns

    try:
        import_plugins(plugins, validate=check_plugin_columns)  # in a throwaway child first (tune_gems.gems.registry)
    except ConfigError as e:
        raise ConfigError(f"{source}: config.{e}") from None


def designed_config(spec: SweepSpec, params: dict[str, Any]) -> Config:
    """A trial's full config with the spec's design applied (its arms set)."""
    cfg = trial_config(spec.config, params)
    return apply_spec_design(cfg, spec.design)


def apply_spec_design(cfg: Config, design: str) -> Config:
    if design == DESIGN_NONE:
        return cfg
    from tune_gems.design.arm_sets import apply_design

    return apply_design(cfg, design)


def widest_trial(spec: SweepSpec) -> dict[str, Any]:
    """The trial parameters with the most arms under the design: every searched gem wired at
    its highest weight (what the memory check and the design check try)."""
    params: dict[str, Any] = {}
    for gem, gs in spec.search.gems.items():
        if "wire" in gs.modes:
            params[f"gems.{gem}.mode"] = "wire"
            params[f"gems.{gem}.weight"] = gs.weight_high
    return params


def _check_design(spec: SweepSpec, source: str) -> None:
    if spec.design == DESIGN_NONE:
        return
    if spec.config.get("arms") is not None:
        raise ConfigError(f"{source}: design: {spec.design} sets the arms itself; remove config.arms")
    if not spec.search.gems:
        raise ConfigError(f"{source}: design: {spec.design} needs search.gems (Optuna's proposals to test)")
    try:
        designed_config(spec, widest_trial(spec))
    except ConfigError as e:
        raise ConfigError(f"{source}: design: {e}") from None


DESIGN_SET_KEYS = {
    "wire_search_aa": {
        "trainer.replay_stream": "design wire_search_aa sets it per arm (the A/A arm draws its replay batches from "
        f"stream {AA_STREAM}, every other arm from stream 0), so a value of its own would change what the arms mean "
        f"(with {AA_STREAM}, the A/A arm would be the control itself)",
    },
}
"""Per design, the config keys its arms set (tune_gems.design.arm_sets): neither searched nor set
in the base config, since either would change what the design's arms mean."""


def _check_design_keys(spec: SweepSpec, source: str) -> None:
    """A key the design sets per arm, searched or set in the base config: refused."""
    from tune_gems.config.dotted import flatten

    owned = DESIGN_SET_KEYS.get(spec.design, {})
    given = flatten(spec.config)
    defaults = flatten(Config().to_dict())
    for key, why in owned.items():
        if key in spec.search.params:
            raise ConfigError(f"{source}: search.params.{key} cannot be searched: {why}")
        if key in given and given[key] != defaults.get(key):
            raise ConfigError(f"{source}: config.{key}: {given[key]!r} cannot be set: {why}; leave it out")


def _check_trial_grid(spec: SweepSpec, source: str) -> None:
    """Every trial's design-set keys (the seed and first seed index of each trial or block)
    valid before Ray starts, not in a trial: the last trial or block has the largest, so its
    config is built (with the design's widest arms, every stream of them) and any refusal is
    named as the count that reaches it."""
    if spec.blocks is not None:
        values = block_grid(spec)[FIRST_SEED_INDEX]
        constants, field, what = {FIRST_SEED_INDEX: values[-1]}, "blocks.seed_blocks", f"block {len(values) - 1}"
    else:
        last = spec.num_samples - 1
        constants, field, what = trial_constants(spec, last), "num_samples", f"trial {last}"
    params = {**widest_trial(spec), **constants}
    try:
        designed_config(spec, params)
    except ConfigError as e:
        raise ConfigError(f"{source}: {field}: {what} would train with {constants}, which the config refuses ({e}); "
                          "use fewer trials or blocks, or lower config.seed / config.first_seed_index") from None


def _check_scheduler(spec: SweepSpec, source: str) -> None:
    """ASHA stops trials at rungs grace_period, grace_period*rf, ... up to the run's epochs: a
    grace period past the end never stops anything, and searched epochs would move the end."""
    if spec.scheduler.type != "asha":
        return
    if "trainer.epochs" in spec.search.params:
        raise ConfigError(f"{source}: search.params.trainer.epochs cannot be searched with scheduler.type asha (its rungs need one run length)")
    epochs = spec.base_config().trainer.epochs
    if spec.scheduler.grace_period >= epochs:
        raise ConfigError(
            f"{source}: scheduler.grace_period: {spec.scheduler.grace_period} epochs is not shorter than the run "
            f"(config.trainer.epochs={epochs}), so ASHA would stop nothing; lower it or use scheduler.type none"
        )
