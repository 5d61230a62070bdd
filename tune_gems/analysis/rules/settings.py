"""The verdict words, defined once, and the analysis's settings as one frozen record: every layer
reads the same thresholds (ten keyword arguments passed through each layer let one silently miss
one). Meanings: docs/analysis.md "Verdicts"; defaults and why: `analysis/defaults.py`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

import numpy as np

from tune_gems.analysis import defaults
from tune_gems.contracts.errors import ConfigError


KEEP = "keep wired"
HARMFUL = "harmful"
EQUIVALENT = "equivalent"
DELETE = "delete"
INCONCLUSIVE = "inconclusive"
INCONSISTENT = "inconclusive: inconsistent across periods"
"""The effect changes sign between periods, shown: fold intervals on both sides of 0 (Holm)."""
HETEROGENEOUS = "inconclusive: heterogeneous across periods"
"""The periods differ significantly (Cochran's Q, Holm) but no sign change is shown and the pooled
effect decides nothing: more seeds will not settle it, more periods may."""
NOT_CONFIRMED = "not confirmed on held-out data"
"""A discovery `keep wired` / `harmful` whose test-segment effect, with the test period's spread in
its standard error, does not agree at the family's level (`rules.decision`)."""
CONFOUNDED = "insufficient: confounded"
INSUFFICIENT = "insufficient data"
NO_DATA = "no data"
NOT_TESTED = ""
"""The seed rule's entry for a gem without a wiring test (NaN p): not decided by the seed rule."""

VERDICTS = (KEEP, HARMFUL, EQUIVALENT, INCONCLUSIVE, INCONSISTENT, HETEROGENEOUS, DELETE, CONFOUNDED, INSUFFICIENT,
            NO_DATA, NOT_CONFIRMED)
"""Every verdict a gem can get, in the order docs/analysis.md lists them."""

DECISIVE = (KEEP, HARMFUL)
"""The verdicts that claim an effect: the ones the market-noise, period and held-out checks test."""

NULL_ARM_OK = (EQUIVALENT, INCONCLUSIVE, INSUFFICIENT)
"""The verdicts a null arm (placebo, A/A) may get; any other says the rule is not calibrated (a
null arm too tied to test anything reads `insufficient data`, and its row says it is uninformative)."""

KEEP_CODE, HARMFUL_CODE, EQUIVALENT_CODE, INCONSISTENT_CODE, INSUFFICIENT_CODE, HETEROGENEOUS_CODE = 1, -1, 2, 3, 4, 5
NOT_CONFIRMED_CODE = 6
CODES = {KEEP: KEEP_CODE, HARMFUL: HARMFUL_CODE, EQUIVALENT: EQUIVALENT_CODE, INCONSISTENT: INCONSISTENT_CODE,
         INSUFFICIENT: INSUFFICIENT_CODE, HETEROGENEOUS: HETEROGENEOUS_CODE, NOT_CONFIRMED: NOT_CONFIRMED_CODE}
"""The calibrations' integer code of a verdict (0: any other)."""


def verdict_codes(verdict) -> np.ndarray:
    """The integer codes (`CODES`, 0 for any other word) of an array of verdict words."""
    verdict = np.asarray(verdict)
    out = np.zeros(verdict.shape, int)
    for word, code in CODES.items():
        out[verdict == word] = code
    return out


@dataclass(frozen=True)
class Thresholds:
    """The verdict's settings, each the `--` option of the same name (underscores as dashes; booleans are switches)."""

    alpha: float = defaults.ALPHA
    rope: float = defaults.ROPE
    rel_threshold: float = defaults.REL_THRESHOLD
    last_k: int = defaults.LAST_K
    window: str = defaults.WINDOW
    first_epoch: int | None = None
    """The first epoch of `window: from-epoch` (None: `defaults.FIRST_EPOCH` there); refused
    with any other window, which would ignore it."""
    min_periods: int = defaults.MIN_PERIODS
    share_tau: bool = defaults.SHARE_TAU
    one_sided_keep: bool = defaults.ONE_SIDED_KEEP
    power: float = defaults.POWER
    placebo_weight: float = defaults.PLACEBO_WEIGHT
    confidence: float = defaults.CONFIDENCE
    n_boot: int = defaults.N_BOOT
    seed: int = defaults.SEED
    n_sim: int = defaults.N_SIM

    def __post_init__(self) -> None:
        _number("alpha", self.alpha, defaults.MIN_ALPHA, 0.5, lo_open=False)
        _number("rope", self.rope, 0.0, math.inf)
        _number("rel_threshold", self.rel_threshold, 0.0, math.inf)
        _number("last_k", self.last_k, 1, 10**6, lo_open=False, integer=True)
        if self.window not in defaults.WINDOWS:
            raise ConfigError(f"--window: must be one of {', '.join(defaults.WINDOWS)}, got {self.window!r}")
        if self.first_epoch is not None:
            _number("first_epoch", self.first_epoch, 1, 10**6, lo_open=False, integer=True)
            if self.window != "from-epoch":
                raise ConfigError(f"--first-epoch: applies only to --window from-epoch (the window is {self.window}, "
                                  "which would ignore it); give --window from-epoch or leave --first-epoch out")
        elif self.window == "from-epoch":
            object.__setattr__(self, "first_epoch", defaults.FIRST_EPOCH)
        _number("min_periods", self.min_periods, 2, 10**6, lo_open=False, integer=True)
        for name in ("share_tau", "one_sided_keep"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"--{name.replace('_', '-')}: expected true or false, got {getattr(self, name)!r}")
        _number("power", self.power, 0.0, 1.0)
        _number("placebo_weight", self.placebo_weight, 0.0, math.inf, lo_open=False)
        _number("confidence", self.confidence, 0.0, 1.0)
        _number("n_boot", self.n_boot, 1, defaults.MAX_N_BOOT, lo_open=False, hi_open=False, integer=True)
        _number("n_sim", self.n_sim, 100, defaults.MAX_N_SIM, lo_open=False, hi_open=False, integer=True)
        _number("seed", self.seed, 0, 2**63, lo_open=False, integer=True)

    @classmethod
    def build(cls, thresholds: Thresholds | None = None, **settings: Any) -> Thresholds:
        """`thresholds` (default: all defaults) with the fields named in `settings` replaced;
        checked. An unknown name is a TypeError, as for any unknown keyword argument."""
        base = thresholds if thresholds is not None else cls()
        return replace(base, **settings) if settings else base

    def with_window(self, window: str, *, last_k: int | None = None, first_epoch: int | None = None) -> Thresholds:
        """These settings with another epoch window (`first_epoch` only for `from-epoch`, its
        default there; `last_k` kept unless given)."""
        return replace(self, window=window, last_k=self.last_k if last_k is None else last_k,
                       first_epoch=first_epoch if window == "from-epoch" else None)

    def check_window(self, last_epochs: Mapping[str, int], source: str) -> None:
        """Refuse (ConfigError naming `--first-epoch`) a `from-epoch` window past a run's last
        epoch: that run would average its last epoch while every record says "from epoch N on"."""
        if self.window != "from-epoch" or not last_epochs:
            return
        last = max(last_epochs.values())
        if self.first_epoch > last:
            raise ConfigError(f"--first-epoch: {self.first_epoch} is past the last evaluated epoch ({last}) of "
                              f"{source}: the window 'every validation epoch from epoch {self.first_epoch} on' holds "
                              f"no epoch; give --first-epoch {last} or less")
        run, shortest = min(last_epochs.items(), key=lambda kv: (kv[1], kv[0]))
        if self.first_epoch > shortest:
            raise ConfigError(f"--first-epoch: {self.first_epoch} is past the last evaluated epoch ({shortest}) of "
                              f"{run} in {source}: its window 'from epoch {self.first_epoch} on' would hold no epoch; "
                              f"give --first-epoch {shortest} or less")

    def window_length(self, end_epoch):
        """Per end epoch E how many epochs (E - k, E] the verdict metric averages (never more than E)."""
        e = np.asarray(end_epoch)
        if self.window == "last-half":
            k = np.maximum(e - e // 2, self.last_k)
        elif self.window == "from-epoch":
            k = np.maximum(e - self.first_epoch + 1, 1)
        else:
            k = np.full(e.shape, self.last_k)
        k = np.minimum(k, np.maximum(e, 1)).astype(int)
        return int(k) if k.ndim == 0 else k

    def window_text(self) -> str:
        """The window in words (every verdict's estimand says it)."""
        if self.window == "last-half":
            return f"the last half of the validation epochs (at least {self.last_k})"
        if self.window == "from-epoch":
            return f"every validation epoch from epoch {self.first_epoch} on"
        return f"the last {self.last_k} validation epochs"

    @classmethod
    def of_settings(cls, settings: dict[str, Any]) -> Thresholds:
        """The record behind a `settings()` dict (an analysis result's; names it does not know,
        such as n_sim, left out): every table drawn from a result reads its window from this."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in names})

    def settings(self) -> dict[str, Any]:
        """The analysis's settings as a report states them (n_sim is the calibration's, not the
        analysis's, so it is left out)."""
        out = asdict(self)
        out.pop("n_sim")
        if out["first_epoch"] is None:  # a window without a first epoch: nothing to state
            out.pop("first_epoch")
        return out


def _number(name: str, v, lo: float, hi: float, lo_open: bool = True, hi_open: bool = True,
            integer: bool = False) -> None:
    """Refuse, in one line naming the option, a value that is not a number, NaN, infinite or out of range."""
    flag = "--" + name.replace("_", "-")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
        raise ConfigError(f"{flag}: expected {'an integer' if integer else 'a number'}, got {v!r}")
    if not math.isfinite(v):
        raise ConfigError(f"{flag}: must be a finite number, got {v}")
    bad_lo = v <= lo if lo_open else v < lo
    bad_hi = v >= hi if hi_open else v > hi
    if bad_lo or bad_hi:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ConfigError(f"{flag}: must be in {rng}, got {v:g}")
