"""The `arms:` section of a config (docs/design.md "Arms"): its model and limits, below the schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tune_gems.config.dotted import flatten

DEFAULT_ARM = "default"

MODEL_SWITCHES = ("model.spectral_norm", "model.noisy", "trainer.lr", "trainer.replay_stream")
"""Per-member keys besides the gems' `mode` and `weight` (everything else is per trial)."""

GEM_FIELDS = ("mode", "weight")
MAX_ARMS = 256
"""More arms than this is almost surely a mistyped factorial (levels multiply)."""


class ArmsConfig(BaseModel):
    """`arms:`: `factors` (every combination of levels an arm) or `list` (each a `name` and dotted keys)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    factors: dict[str, list[Any]] | None = Field(None, description="dotted per-member key -> its levels")
    list_: list[dict[str, Any]] | None = Field(None, alias="list", description="explicit arms: {name, key: value, ...}")

    @model_validator(mode="before")
    @classmethod
    def _flatten_nested_factors(cls, data: Any) -> Any:
        """`arms.factors.gems.g10.mode=[..]` on the command line nests the key: flatten it."""
        if isinstance(data, dict) and isinstance(data.get("factors"), dict):
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
