"""A config tree validated into a Config: the run's plug-ins imported first (their gems become `gems.<name>` keys), then
pydantic, every failure one line; `load_config` adds the file and overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, create_model

from tune_gems.config.dotted import DuplicateKeyError, check_one_form
from tune_gems.config.schema import Config, gems_model
from tune_gems.config.yaml_io import apply_overrides, read_yaml
from tune_gems.contracts.errors import ConfigError
from tune_gems.gems import registry


def format_validation_error(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """The first problem of a pydantic error as `field.path: message` (an unknown key first)."""
    from tune_gems.config.keys import did_you_mean

    first = next((e for e in err.errors() if e["type"] == "extra_forbidden"), err.errors()[0])
    loc = ".".join(str(p) for p in first["loc"])
    loc = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "config"
    msg = first["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's own message
    if first["type"] == "extra_forbidden":
        msg = "unknown key" + did_you_mean(model, tuple(first["loc"]), prefix)
    elif first["type"] == "list_type" and isinstance(first.get("input"), str):  # `key=a,b` on the command line
        msg += f" (a list is written in brackets: {loc}=[{first['input']}])"
    elif first["type"] == "list_type" and isinstance(first.get("input"), dict):  # `key.0.x=..` where no list is given
        msg += f" (an entry is set by its index only in a list given first: {loc}=[{{...}}, ...])"
    extra = f" (and {len(err.errors()) - 1} more problems)" if len(err.errors()) > 1 else ""
    return f"{loc}: {msg}{extra}"


def config_model(plugins: tuple[str, ...] = ()) -> type[Config]:
    """The Config model of a run with these (imported) plug-ins."""
    if not plugins:
        return Config
    if plugins not in _CONFIG_MODELS:
        gems = gems_model(plugins)
        _CONFIG_MODELS[plugins] = create_model(
            "Config", __base__=Config, gems=(gems, Field(default_factory=gems)), __doc__=Config.__doc__
        )
    return _CONFIG_MODELS[plugins]


_CONFIG_MODELS: dict[tuple[str, ...], type[Config]] = {}


def build_config(tree: dict[str, Any], source: str = "config", key_prefix: str = "") -> Config:
    """Validate a config tree (`plugins` imported first); one ConfigError `source: key: message`."""
    plugins = tree.get("plugins") if isinstance(tree, dict) else None
    where = key_prefix or f"{source}: "
    try:
        check_one_form(tree)  # a key nested and dotted: one of the two would be dropped (tune_gems.config.dotted)
    except DuplicateKeyError as e:
        raise ConfigError(f"{where}{e}") from None
    try:
        from tune_gems.stats.metrics import check_plugin_columns

        registry.import_plugins(plugins or [], validate=check_plugin_columns)  # also in a throwaway child first
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None
    model = config_model(tuple(plugins)) if plugins else Config
    try:
        return model.model_validate(tree)
    except ValidationError as e:
        msg = format_validation_error(e, prefix=key_prefix, model=model)
        raise ConfigError(msg if key_prefix else f"{source}: {msg}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The config of a run: defaults, then the YAML file (if any), then the overrides."""
    tree = read_yaml(path) if path is not None else {}
    apply_overrides(tree, list(overrides or []))
    return build_config(tree, str(path) if path is not None else "config")
