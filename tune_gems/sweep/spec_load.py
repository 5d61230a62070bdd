"""A sweep spec loaded and checked before Ray starts (`load_spec`: every searched key at both ends
of its range), and what it implies per trial: the design's keys, a trial's config, the widest trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tune_gems.config.schema import Config
from tune_gems.design.arm_sets import AA_STREAM, apply_design
from tune_gems.config.yaml_io import apply_overrides, read_yaml
from tune_gems.config.load import build_config, format_validation_error
from tune_gems.config.dotted import with_dotted
from tune_gems.contracts.errors import ConfigError
from tune_gems.sweep.spec import DESIGN_NONE, FIRST_SEED_INDEX, SweepSpec
from tune_gems.sweep.tracking import check_tracking

def seed_stride(spec: SweepSpec) -> int:
    """Seed indices from one trial's first to the next: the most seeds per arm a trial can have."""
    stride = spec.base_config().trainer.population
    space = spec.search.params.get("trainer.population")
    if space is not None:
        stride = max([stride, *(int(v) for v in space.ends())])
    return stride


def trial_constants(spec: SweepSpec, number: int) -> dict[str, int]:
    """The config keys the design sets for Optuna's trial `number` (`search.DefineByRun` returns them)."""
    base = spec.base_config()
    n = number if spec.seeds == "per_trial" else 0
    return {"seed": base.seed + n, FIRST_SEED_INDEX: base.first_seed_index + n * seed_stride(spec)}


def block_grid(spec: SweepSpec) -> dict[str, list[Any]]:
    """Per block key its values, one trial per combination (Tune's grid)."""
    if spec.blocks is None:
        return {}
    first, stride = spec.base_config().first_seed_index, seed_stride(spec)
    return {FIRST_SEED_INDEX: [first + b * stride for b in range(spec.blocks.seed_blocks)]}


def trial_config(base: dict[str, Any], params: dict[str, Any], design: str = DESIGN_NONE) -> Config:
    """One trial's config: the base with its dotted parameters, validated once, with the design's arms."""
    cfg = build_config(with_dotted(base, params), "trial config")
    return cfg if design == DESIGN_NONE else apply_design(cfg, design)


def arms_keys(config: dict[str, Any]) -> set[str]:
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
    """A key both searched and set by the arms is refused (the arms' value would train)."""
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
    tree = read_yaml(path)
    apply_overrides(tree, list(overrides or []))
    _check_config_keys_at_top(tree, str(path))
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


def _check_config_keys_at_top(tree: dict[str, Any], source: str) -> None:
    """A config key at the spec's top level is refused naming `config.<key>`."""
    from tune_gems.config.dotted import flatten
    from tune_gems.config.keys import did_you_mean, known_keys

    if not isinstance(tree, dict):
        return
    spec_keys = {f.alias or n for n, f in SweepSpec.model_fields.items()}
    config_keys = {f.alias or n for n, f in Config.model_fields.items()}
    for key, value in tree.items():
        if key in spec_keys or key not in config_keys:
            continue
        leaves = list(flatten({key: value})) if isinstance(value, dict) and value else [key]
        dotted = leaves[0] if len(leaves) == 1 else key
        loc = tuple(dotted.split("."))
        if len(loc) == 1 or loc[-1] in known_keys(Config, loc):
            meant = f"did you mean config.{dotted}? "
        else:  # a mistyped config key too: the config's own suggestion, with the prefix
            close = did_you_mean(Config, loc, "config.").strip().removeprefix("(").removesuffix(")")
            meant = f"{close} " if close else ""
        raise ConfigError(f"{source}: {dotted}: not a spec key ({meant}a sweep's config keys take the config. prefix)")


def import_spec_plugins(tree: dict[str, Any], source: str) -> None:
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
    return trial_config(spec.config, params, spec.design)


def widest_trial(spec: SweepSpec) -> dict[str, Any]:
    """The parameters with the most arms: every searched gem wired at its highest weight."""
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
"""Per design, the config keys its arms set: neither searched nor set in the base config."""


def _check_design_keys(spec: SweepSpec, source: str) -> None:
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
    """The last trial or block's design-set keys (the largest) valid before Ray starts."""
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
    """ASHA's grace period must be shorter than the run, whose epochs must not be searched."""
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
