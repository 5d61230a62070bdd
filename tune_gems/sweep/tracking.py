"""Experiment tracking: Ray Tune's logger callbacks (W&B, MLflow) from the spec's `tracking`,
checked before Ray starts (docs/workflow.md "Tracking")."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

from pydantic import Field

from tune_gems.config.schema import _Strict
from tune_gems.contracts.errors import ConfigError

CALLBACKS = {"wandb": ("wandb", "ray.air.integrations.wandb", "WandbLoggerCallback"),
    "mlflow": ("mlflow", "ray.air.integrations.mlflow", "MLflowLoggerCallback")}
"""spec key -> (the package it needs, the module and class of Ray Tune's callback)."""


class TrackingSpec(_Strict):
    wandb: dict[str, Any] | None = Field(None,
        description="arguments of Ray Tune's WandbLoggerCallback, e.g. {project: tune-gems}; needs the wandb package")
    mlflow: dict[str, Any] | None = Field(None,
        description="arguments of Ray Tune's MLflowLoggerCallback, e.g. {tracking_uri: ..., experiment_name: ...}; needs the mlflow package")


def _wanted(tracking: TrackingSpec) -> list[tuple[str, dict[str, Any]]]:
    return [(key, dict(getattr(tracking, key))) for key in CALLBACKS if getattr(tracking, key) is not None]


def _callback_class(key: str, source: str):
    package, module, cls = CALLBACKS[key]
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"{source}: tracking.{key}: needs the {package} package, which is not installed (pip install {package})")
    return getattr(importlib.import_module(module), cls)


def check_tracking(tracking: TrackingSpec, source: str) -> None:
    """Every tracker the spec names is installed and takes the given arguments."""
    for key, kwargs in _wanted(tracking):
        params = inspect.signature(_callback_class(key, source)).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        unknown = sorted(set(kwargs) - set(params))
        if unknown and not takes_any:
            raise ConfigError(f"{source}: tracking.{key}.{unknown[0]}: not an argument of {CALLBACKS[key][2]}")


def tracking_callbacks(tracking: TrackingSpec) -> list[Any]:
    return [_callback_class(key, "tracking")(**kwargs) for key, kwargs in _wanted(tracking)]
