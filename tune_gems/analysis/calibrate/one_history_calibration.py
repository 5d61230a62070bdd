"""The calibration of a confirmation on one price history: a simulated search, then the confirmation by the rules
`tune-gems confirm` ships. Fresh seeds on the same history inherit each configuration's luck and the search kept the
luckiest, so the final verdict needs the selection-adjusted gate (`rules.decision.final_on_one_history`). `python
analysis/calibrate_confirm.py`; docs/analysis.md "Confirmation power"."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats as sps

from tune_gems.analysis.calibrate.calibration import _draws
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.periods import fold_data
from tune_gems.analysis.rules.settings import HARMFUL, KEEP, Thresholds
from tune_gems.analysis.text import text_table
from tune_gems.analysis.verdicts.search_choice import best_trial
from tune_gems.stats.inference import rank_test


# -- the simulated search on one price history (the calibration of the rule above) -------------------


@dataclass(frozen=True)
class OneHistoryShape:
    """A simulated search on one history: `trials` trials wiring each gem with probability `p_wire`,
    a shared seed part, each configuration's `luck` (discovery seed SEs) in discovery and
    confirmation alike, `folds` periods, `confirm_seeds` fresh seeds."""

    trials: int = 8
    gems: int = 3
    seeds: int = 16
    confirm_seeds: int = 16
    sd: float = 1.0
    shared: float = 0.5
    p_wire: float = 0.5
    luck: float = 1.0
    folds: int = 1

    @property
    def luck_sd(self) -> float:
        return self.luck * self.sd / math.sqrt(self.seeds)


def one_history_search_rates(shape: OneHistoryShape, effect: float = 0.0, n_sim: int = 2000, *, alpha: float = 0.05,
                             rope: float = 0.1, dist: str = "normal", seed: int = 0) -> dict[str, float]:
    """Simulated searches on one history, then the shipped choice and rule with the search's
    selection. Returns the null family-wise rates with fresh seeds alone (`seeds_fwer`), after the
    gates (`gated_fwer`) and final (`final_fwer`), and gem 0's final power."""
    rng = np.random.default_rng(seed + 11)
    T, m, n, nc, k = shape.trials, shape.gems, shape.seeds, shape.confirm_seeds, shape.folds
    wired = rng.random((n_sim, T, m)) < shape.p_wire
    delta = np.zeros(m)
    delta[0] = effect
    luck = shape.luck_sd * rng.standard_normal((n_sim, T, m, k, 1))
    path = math.sqrt(shape.shared) * shape.sd * _draws(rng, (n_sim, 1, m, 1, n), dist)
    noise = math.sqrt(1 - shape.shared) * shape.sd * _draws(rng, (n_sim, T, m, k, n), dist)
    d = delta[None, None, :, None, None] + luck + path + noise
    score = rank_test(d.mean(3).reshape(-1, n)).estimate.reshape(n_sim, T, m)
    best, chosen = best_trial(score, wired, axis=1)
    candidates = wired.sum(1)
    kept = np.take_along_axis(luck[..., 0], best[:, None, :, None], axis=1)[:, 0]  # [S, m, K]
    fresh = delta[None, :, None, None] + kept[..., None] + shape.sd * _draws(rng, (n_sim, m, k, nc), dist)
    unit = fresh.mean(2)  # [S, m, nc]
    th = Thresholds(alpha=alpha, rope=rope)
    diffs = [unit[:, g] for g in range(m)]
    if k == 1:  # the history's luck, as the confirmation's market-noise interval measures it
        centre = unit.mean(2)

        def market(tail: np.ndarray):
            h = sps.norm.ppf(1 - tail) * shape.luck_sd
            return centre - h, centre + h, np.ones((n_sim, m), bool)

        ev = Evidence(diffs, tested=chosen, market=market, selection=candidates)
    else:  # the gem verdicts' period rule on the confirmation's fold data
        ev = Evidence(diffs, tested=chosen, periods=fold_data(fresh), selection=candidates)
    dec = decide(ev, th)
    seeds_only, gated, final = dec.seed_verdict, dec.discovery_verdict, dec.final_verdict
    out = {}
    for name, v in (("seeds", seeds_only), ("gated", gated), ("final", final)):
        decisive = (v == KEEP) | (v == HARMFUL)
        out[f"{name}_fwer"] = float((decisive[:, 1:] if effect else decisive).any(1).mean())
    out["power"] = float((final[:, 0] == KEEP).mean()) if effect else math.nan
    return out


ONE_HISTORY_FOLDS = (1, 4)
ONE_HISTORY_LUCK = (0.5, 1.0, 3.0)


def one_history_table(shape: OneHistoryShape = OneHistoryShape(), *, folds=ONE_HISTORY_FOLDS, lucks=ONE_HISTORY_LUCK,
                      effect: float = 1.0, n_sim: int = 2000, alpha: float = 0.05, dist: str = "normal",
                      seed: int = 0) -> pd.DataFrame:
    """One row per (folds, luck) of `one_history_search_rates` at a planted `effect`."""
    rows = []
    for k in folds:
        for luck in lucks:
            sh = replace(shape, folds=k, luck=luck)
            null = one_history_search_rates(sh, 0.0, n_sim, alpha=alpha, dist=dist, seed=seed)
            planted = one_history_search_rates(sh, effect, n_sim, alpha=alpha, dist=dist, seed=seed + 1)
            rows.append(dict(folds=k, luck_se=luck, trials=sh.trials, gems=sh.gems, seeds=sh.seeds,
                             confirm_seeds=sh.confirm_seeds, n_sim=n_sim, dist=dist, **null,
                             **{f"power@{effect:g}": planted["power"]}))
    return pd.DataFrame(rows)


def format_one_history(table: pd.DataFrame) -> str:
    """The one-history calibration as text (`python analysis/calibrate_confirm.py`)."""
    r0 = table.iloc[0]
    pcol = next(c for c in table.columns if c.startswith("power@"))
    lines = [f"Confirmation on one price history (simulated search: {int(r0['trials'])} trials, {int(r0['gems'])} gems, "
             f"{int(r0['seeds'])} seeds, confirmation {int(r0['confirm_seeds'])} fresh seeds on the same history; "
             f"{int(r0['n_sim'])} searches per row, {r0['dist']}); luck: each configuration's luck on the history, in "
             "discovery seed SE, the same in discovery and confirmation; FWER: any false keep / harmful among the gems"]
    head = ["folds", "luck", "FWER fresh seeds alone", "FWER confirmation's gates", "FWER final gate",
            f"final power {pcol.split('@')[1]} sd"]
    rows = [[f"{int(r['folds'])}", f"{r['luck_se']:g}", f"{r['seeds_fwer']:.3f}", f"{r['gated_fwer']:.3f}",
                      f"{r['final_fwer']:.3f}", f"{r[pcol]:.2f}"] for _, r in table.iterrows()]
    lines += text_table(head, rows, rule=False)
    lines.append(f"worst final family-wise false rate {table['final_fwer'].max():.3f} (promise <= 0.05)")
    return "\n".join(lines)
