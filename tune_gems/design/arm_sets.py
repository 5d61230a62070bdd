"""Designed arm sets and their paired gains (docs/analysis.md): `wire_search` trains `proposal`,
`control` and `without-<g>` in one trial on the same seeds, so `proposal - control` at a seed is
the wiring's alone; `verdict_gain` scores divergence as the worst outcome."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tune_gems.design.arms import ArmsConfig
from tune_gems.config.dotted import flatten
from tune_gems.contracts.errors import ConfigError
from tune_gems.stats.metrics import VERDICT_GAIN, VERDICT_GAIN_PREFIX, has_gain_arms

if TYPE_CHECKING:  # pragma: no cover
    from tune_gems.config.schema import Config

WIRE_SEARCH = "wire_search"
WIRE_SEARCH_AA = "wire_search_aa"
DESIGNS = (WIRE_SEARCH, WIRE_SEARCH_AA)
"""Known designs (a spec's `design`); `wire_search_aa` adds the A/A arm to every trial with a proposal."""

PROPOSAL = "proposal"
CONTROL = "control"
WITHOUT_PREFIX = "without-"
AA_ARM = "control-aa"
"""The A/A arm: the control on an independent replay stream, the learner's own null spread."""
AA_STREAM = 1


def without_arm(gem: str) -> str:
    return f"{WITHOUT_PREFIX}{gem}"


def wired_gems(cfg: "Config") -> tuple[str, ...]:
    return tuple(g for g in cfg.gem_names() if cfg.gem(g).mode == "wire")


def wire_search_arms(cfg: "Config", aa: bool = False) -> ArmsConfig:
    """[proposal, control, without-<g> per wired g] (nothing wired: [control]); `aa` adds `AA_ARM`."""
    wired = wired_gems(cfg)
    if not wired:
        return ArmsConfig.model_validate({"list": [{"name": CONTROL}]})
    control = {f"gems.{g}.mode": "measure" for g in wired}
    arms: list[dict[str, Any]] = [
        {"name": PROPOSAL},
        {"name": CONTROL, **control},
        *({"name": without_arm(g), f"gems.{g}.mode": "measure"} for g in wired if len(wired) > 1),  # else = control
        *([{"name": AA_ARM, **control, "trainer.replay_stream": AA_STREAM}] if aa else []),
    ]
    return ArmsConfig.model_validate({"list": arms})


def confirmation_arms(cfg: "Config", gem: str) -> ArmsConfig:
    """A confirmation of `gem`: the proposal, and as `control` the proposal with only `gem` measured."""
    if gem not in wired_gems(cfg):
        raise ConfigError(f"confirmation of {gem}: the chosen configuration does not wire it")
    return ArmsConfig.model_validate({"list": [{"name": PROPOSAL}, {"name": CONTROL, f"gems.{gem}.mode": "measure"}]})


def arm_aliases(cfg: "Config") -> dict[str, str]:
    """{"without-<g>": "control"} for a run [proposal, control] measuring one wired gem g; else empty."""
    entries = [a for a in (cfg.arms.list_ or []) if a.get("name") != AA_ARM] if cfg.arms is not None else []
    if [a.get("name") for a in entries] != [PROPOSAL, CONTROL]:
        return {}
    control = flatten(entries[1])
    measured = [g for g in wired_gems(cfg) if control.get(f"gems.{g}.mode") == "measure"]
    return {without_arm(measured[0]): CONTROL} if len(measured) == 1 else {}


def with_arms(cfg: "Config", arms: ArmsConfig, source: str) -> "Config":
    """`cfg` with its arms set to the validated `arms`; a config with arms of its own is refused."""
    if cfg.arms is not None:
        raise ConfigError(f"{source} sets the arms itself; remove config.arms")
    return cfg.model_copy(update={"arms": arms})


def also_named(aliases: dict[str, str], arm: str) -> str:
    """The other names of `arm`, comma-separated: the arms table's `also_named`."""
    return ",".join(other for other, trained in aliases.items() if trained == arm)


def apply_design(cfg: "Config", design: str) -> "Config":
    """`cfg` (one trial's validated config) with the design's arms set."""
    if design not in DESIGNS:
        raise ConfigError(f"design: unknown design {design!r} (known: {', '.join(DESIGNS)})")
    return with_arms(cfg, wire_search_arms(cfg, aa=design == WIRE_SEARCH_AA), f"design: {design}")


has_gains = has_gain_arms


def _pairs(arm_of: np.ndarray, seed_index: np.ndarray, a: str, b: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The members of arms a and b in seed-index order; None when a has none or they cover other indices."""
    in_a, in_b = np.flatnonzero(arm_of == a), np.flatnonzero(arm_of == b)
    sa, sb = seed_index[in_a], seed_index[in_b]
    if not len(in_a) or sorted(sa.tolist()) != sorted(sb.tolist()):
        return None
    return in_a[np.argsort(sa, kind="stable")], in_b[np.argsort(sb, kind="stable")]


def _pair_mean(values: np.ndarray, arm_of: np.ndarray, seed_index: np.ndarray, a: str, b: str) -> float:
    """Mean over seed indices of values[a, s] - values[b, s]; NaN for any NaN pair or unpaired arms."""
    pairs = _pairs(arm_of, seed_index, a, b)
    if pairs is None:
        return math.nan
    diff = values[pairs[0]] - values[pairs[1]]
    return float(diff.mean()) if np.isfinite(diff).all() else math.nan


def paired_gains(gems: Sequence[str], arm_of: Sequence[str], seed_index: Sequence[int], val_sharpe: Sequence[float],
        val_alpha_sharpe: Sequence[float], aliases: dict[str, str] | None = None) -> dict[str, float]:
    """The epoch's gains from per-member validation columns (diverged NaN): proposal - control on Sharpe and alpha
    Sharpe, `gain_<g>` proposal - without-<g> (NaN without that arm; `aliases` rename it)."""
    arm_arr = np.asarray(arm_of, dtype=object)
    seeds = np.asarray(seed_index, dtype=np.int64)
    vs, va = np.asarray(val_sharpe, dtype=np.float64), np.asarray(val_alpha_sharpe, dtype=np.float64)
    arms = set(arm_arr.tolist())
    out: dict[str, float] = {}
    if arms == {CONTROL}:
        # proposal == control: the difference is 0 at every seed, and NaN where a member diverged
        out["val_sharpe_gain"] = 0.0 if np.isfinite(vs).all() else math.nan
        out["val_alpha_sharpe_gain"] = 0.0 if np.isfinite(va).all() else math.nan
    else:
        out["val_sharpe_gain"] = _pair_mean(vs, arm_arr, seeds, PROPOSAL, CONTROL)
        out["val_alpha_sharpe_gain"] = _pair_mean(va, arm_arr, seeds, PROPOSAL, CONTROL)
    for g in gems:
        arm = (aliases or {}).get(without_arm(g), without_arm(g))
        out[f"gain_{g}"] = _pair_mean(va, arm_arr, seeds, PROPOSAL, arm) if arm in arms else math.nan
    return out


def _pair_hodges_lehmann(values: np.ndarray, diverged: np.ndarray, arm_of: np.ndarray, seed_index: np.ndarray,
                         a: str, b: str) -> float:
    """Hodges-Lehmann pseudo-median of values[a, s] - values[b, s], divergence the worst outcome."""
    from tune_gems.stats.inference import hodges_lehmann, worst_outcome_difference

    pairs = _pairs(arm_of, seed_index, a, b)
    if pairs is None:
        return math.nan
    ia, ib = pairs
    return hodges_lehmann(worst_outcome_difference(values[ia], values[ib], diverged[ia], diverged[ib]))


def verdict_gains(gems: Sequence[str], arm_of: Sequence[str], seed_index: Sequence[int], window: np.ndarray,
        window_diverged: np.ndarray, aliases: dict[str, str] | None = None) -> dict[str, float]:
    """The verdict's statistic on a trial's arms from `window` [k, P] validation alpha Sharpe; diverged
    if anywhere non-finite (as `pairing.window_values`)."""
    arm_arr = np.asarray(arm_of, dtype=object)
    seeds = np.asarray(seed_index, dtype=np.int64)
    w = np.asarray(window, dtype=np.float64).reshape(-1, arm_arr.size)
    with np.errstate(invalid="ignore"):
        value = w.mean(axis=0)
    diverged = np.asarray(window_diverged, bool).reshape(w.shape).any(axis=0) | ~np.isfinite(w).all(axis=0)
    arms = set(arm_arr.tolist())
    out = {VERDICT_GAIN: 0.0 if arms == {CONTROL} else
           _pair_hodges_lehmann(value, diverged, arm_arr, seeds, PROPOSAL, CONTROL)}
    for g in gems:
        arm = (aliases or {}).get(without_arm(g), without_arm(g))
        out[f"{VERDICT_GAIN_PREFIX}{g}"] = (_pair_hodges_lehmann(value, diverged, arm_arr, seeds, PROPOSAL, arm)
                                            if arm in arms else math.nan)
    return out
