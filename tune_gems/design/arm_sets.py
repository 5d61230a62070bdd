"""Designed arms sets, and the paired gains they support ("wire_search").

Optuna proposes per gem a mode (off / measure / wire) and a weight. Comparing that proposal with
other trials confounds the gem with everything else that differs between trials. The
`wire_search` design instead trains, inside the one trial and on the same seed indices:

- `proposal`: the configuration as Optuna chose it;
- `control`: the proposal with every wired gem measured (wire -> measure; off stays off, weights
  are kept, they do nothing in measure mode);
- `without-<g>`, for each gem g the proposal wires: the proposal with only g measured.

Seed index s of every arm starts from the same weights and draws the same random numbers
(tune_gems.design.arms), so `proposal - control` at seed s is caused by the wiring alone, and
`proposal - without-<g>` by g's wiring given the others. The trial reports these paired gains
every epoch (`paired_gains`; names in tune_gems.stats.metrics.gain_metrics). The objective of the
shipped wire_search sweeps is `verdict_gain` (`verdict_gains`): the verdict's own statistic on
the trial's arms (validation alpha Sharpe over the last k epochs per seed, paired by seed index,
divergence the worst outcome, Hodges-Lehmann pseudo-median), so the search optimises what
`tune-gems analyze` decides on, and the seed noise cancels in it.

A proposal that wires no gem *is* its control: the design is then one arm, `control`, and every
gain is exactly 0 (there is nothing to gain), so such trials are comparable with the others.

The design never trains two identical arms: with exactly one wired gem g, `without-<g>` (only g
measured) is the same configuration as `control` (every wired gem measured), so it is trained
once, as `control`, and also answers to `without-<g>` (`arm_aliases`): `gain_<g>` is then
proposal minus that arm, the arms table lists the other name (`also_named`), and no third of the
trial's members trains a duplicate.

Divergence: a diverged member has NaN evaluation columns, and a mean gain over pairs with a diverged
member is NaN (never a mean over the surviving pairs, which would drop the destabilised side
and change what is estimated). The trainer stops a run when any member diverges and reports
`diverged`; a mean-gain objective of such a trial is NaN (Optuna records a failure), while
`verdict_gain` scores the diverged seeds as the worst outcome, as the analysis does, so a
configuration that diverges is penalised in the search instead of ignored.
"""

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
"""Known designs (a sweep spec's `design`; "none" there means the config's own arms, if any).
`wire_search_aa` adds the A/A arm (`AA_ARM`) to every trial with a proposal."""

PROPOSAL = "proposal"
CONTROL = "control"
WITHOUT_PREFIX = "without-"
AA_ARM = "control-aa"
"""The A/A arm: the control with replay batches drawn from an independent stream
(`trainer.replay_stream`), everything else equal. The analysis pairs it with the control
(`gem_verdicts.placebo_verdicts`, kind a/a): the learner's own null spread, which must read
equivalent or inconclusive."""
AA_STREAM = 1


def without_arm(gem: str) -> str:
    """The arm name of the proposal with only `gem` measured."""
    return f"{WITHOUT_PREFIX}{gem}"


def wired_gems(cfg: "Config") -> tuple[str, ...]:
    """The gems `cfg` wires, in registry order."""
    return tuple(g for g in cfg.gem_names() if cfg.gem(g).mode == "wire")


def wire_search_arms(cfg: "Config", aa: bool = False) -> ArmsConfig:
    """The wire_search arms of a proposal config (see the module docstring):
    [proposal, control, without-<g> for each wired g], or [control] when nothing is wired;
    `aa` (design wire_search_aa) adds the A/A arm `AA_ARM` after them when something is wired
    (a trial without a proposal has no gain for the A/A spread to be held against)."""
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
    """The arms of a confirmation of `gem` (tune_gems.commands.confirm): the proposal, and the proposal
    with only `gem` measured as its `control` (also named `without-<gem>`, `arm_aliases`): the
    one comparison `gem`'s verdict makes. Every other wired gem stays wired on both sides, so the
    trial holds no pair for another gem, and each gem's final verdict rests on its own
    confirmation trial alone (with one wired gem this is the wire_search design itself)."""
    if gem not in wired_gems(cfg):
        raise ConfigError(f"confirmation of {gem}: the chosen configuration does not wire it")
    return ArmsConfig.model_validate({"list": [{"name": PROPOSAL}, {"name": CONTROL, f"gems.{gem}.mode": "measure"}]})


def arm_aliases(cfg: "Config") -> dict[str, str]:
    """{other name: the arm that trains it} for a two-arm run [proposal, control] whose control
    measures exactly one of the proposal's wired gems g: {"without-<g>": "control"} (the two are
    one configuration, trained once): the wire_search design of a proposal wiring one gem, and
    every confirmation trial (`confirmation_arms`). Empty for any other run."""
    entries = [a for a in (cfg.arms.list_ or []) if a.get("name") != AA_ARM] if cfg.arms is not None else []
    if [a.get("name") for a in entries] != [PROPOSAL, CONTROL]:
        return {}
    control = flatten(entries[1])
    measured = [g for g in wired_gems(cfg) if control.get(f"gems.{g}.mode") == "measure"]
    return {without_arm(measured[0]): CONTROL} if len(measured) == 1 else {}


def with_arms(cfg: "Config", arms: ArmsConfig, source: str) -> "Config":
    """`cfg` with its arms set to `arms`, validated already, so the config is not built again (a
    config that has arms already cannot take others: the two would fight over the population axis)."""
    if cfg.arms is not None:
        raise ConfigError(f"{source} sets the arms itself; remove config.arms")
    return cfg.model_copy(update={"arms": arms})


def also_named(aliases: dict[str, str], arm: str) -> str:
    """The other names of `arm` (comma-separated; '' when none): the arms table's `also_named`."""
    return ",".join(other for other, trained in aliases.items() if trained == arm)


def apply_design(cfg: "Config", design: str) -> "Config":
    """`cfg` (one trial's validated config, e.g. Optuna's proposal) with the design's arms set.

    The Tune trainable calls this on each trial's config before building the Trainer. A config
    that already has arms cannot take a design (the two would fight over the population axis).
    """
    if design not in DESIGNS:
        raise ConfigError(f"design: unknown design {design!r} (known: {', '.join(DESIGNS)})")
    return with_arms(cfg, wire_search_arms(cfg, aa=design == WIRE_SEARCH_AA), f"design: {design}")


has_gains = has_gain_arms
"""Whether a run with these arms reports paired gains: it has `proposal` and `control` arms, or
is the one-arm design of a proposal that wires nothing (`control` alone, gains 0)."""


def _pairs(arm_of: np.ndarray, seed_index: np.ndarray, a: str, b: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The members of arms a and b in seed-index order (one pair per seed index); None when a has
    none or the arms do not cover the same seed indices."""
    in_a, in_b = np.flatnonzero(arm_of == a), np.flatnonzero(arm_of == b)
    sa, sb = seed_index[in_a], seed_index[in_b]
    if not len(in_a) or sorted(sa.tolist()) != sorted(sb.tolist()):
        return None
    return in_a[np.argsort(sa, kind="stable")], in_b[np.argsort(sb, kind="stable")]


def _pair_mean(values: np.ndarray, arm_of: np.ndarray, seed_index: np.ndarray, a: str, b: str) -> float:
    """Mean over seed indices of values[arm a, s] - values[arm b, s]; NaN when any pair has a NaN
    (a diverged member) or the arms do not cover the same seed indices."""
    pairs = _pairs(arm_of, seed_index, a, b)
    if pairs is None:
        return math.nan
    diff = values[pairs[0]] - values[pairs[1]]
    return float(diff.mean()) if np.isfinite(diff).all() else math.nan


def paired_gains(
    gems: Sequence[str],
    arm_of: Sequence[str],
    seed_index: Sequence[int],
    val_sharpe: Sequence[float],
    val_alpha_sharpe: Sequence[float],
    aliases: dict[str, str] | None = None,
) -> dict[str, float]:
    """The epoch's paired gains from per-member validation columns (diverged members NaN):
    `val_sharpe_gain` and `val_alpha_sharpe_gain` (proposal - control), and `gain_<g>` for every
    gem in `gems` (proposal - without-<g> on val_alpha_sharpe; NaN where the run has no
    without-<g> arm, i.e. the proposal does not wire g). The one-arm design (`control` alone):
    0.0 for the two overall gains, NaN per gem (no gem is wired). `aliases` (arm_aliases): an
    absent `without-<g>` trained under another name."""
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
    """Hodges-Lehmann pseudo-median over seed indices of values[a, s] - values[b, s], a diverged
    member the worst outcome; NaN when the arms do not cover the same seed indices."""
    from tune_gems.stats.inference import hodges_lehmann, worst_outcome_difference

    pairs = _pairs(arm_of, seed_index, a, b)
    if pairs is None:
        return math.nan
    ia, ib = pairs
    return hodges_lehmann(worst_outcome_difference(values[ia], values[ib], diverged[ia], diverged[ib]))


def verdict_gains(
    gems: Sequence[str],
    arm_of: Sequence[str],
    seed_index: Sequence[int],
    window: np.ndarray,
    window_diverged: np.ndarray,
    aliases: dict[str, str] | None = None,
) -> dict[str, float]:
    """The verdict's statistic on one trial's arms (tune_gems.stats.metrics.VERDICT_GAIN).

    `window` [k, P]: each member's validation alpha Sharpe at the last k epochs (k = min(
    `trainer.objective_last_k`, epochs so far), the verdict's window); `window_diverged` [k, P]
    its divergence flags. A member's value is its window mean; it counts as diverged when it
    diverged in the window or has a non-finite value there (as `pairing.window_values`).
    Returns `verdict_gain` (proposal - control) and `verdict_gain_<g>` (proposal - without-<g>;
    NaN where the run has no without-<g> arm; `aliases` as in paired_gains). The one-arm design:
    0.0 and NaN per gem."""
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
