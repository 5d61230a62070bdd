"""Calibration of the verdict rule: simulated nulls (false keep / harmful) and planted effects
(power), on datasets shaped like an experiment, through the very function the verdicts use
(`rules.decision.decide`), vectorised over datasets."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.decision import Evidence, decide
from tune_gems.analysis.rules.settings import DELETE, Thresholds, verdict_codes
from tune_gems.analysis.rules.power import PowerInputs, mde
from tune_gems.analysis.text import text_table
from tune_gems.analysis.verdicts.search_choice import best_trial
from tune_gems.stats.inference import rank_test

DISTRIBUTIONS = ("normal", "t3")
EFFECT_MULTIPLES = (0.25, 0.5, 0.75, 1.0)
"""Planted effects, in units of the per-seed difference's sd."""


@dataclass(frozen=True)
class Shape:
    """One gem's comparison as the experiment has it."""

    gem: str
    n: int
    sd: float = 1.0
    p_div: float = 0.0
    p_tie: float = 0.0
    """The share of pairs that tie exactly (both members never traded, both diverged)."""


def _draws(rng: np.random.Generator, size: tuple[int, ...], dist: str) -> np.ndarray:
    if dist == "normal":
        return rng.standard_normal(size)
    if dist == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)  # var of t3 is 3
    raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {dist!r}")


def simulate_differences(rng, shape: Shape, n_sim: int, effect: float = 0.0, dist: str = "normal") -> np.ndarray:
    """[n_sim, n] per-seed differences wired - measured for one gem (divergence as +-inf / 0)."""
    d = effect + shape.sd * _draws(rng, (n_sim, shape.n), dist)
    if shape.p_div > 0:
        hi = rng.random((n_sim, shape.n)) < shape.p_div
        lo = rng.random((n_sim, shape.n)) < shape.p_div
        d = np.where(hi & lo, 0.0, np.where(hi, -np.inf, np.where(lo, np.inf, d)))
    if shape.p_tie > 0:
        d = np.where(rng.random((n_sim, shape.n)) < shape.p_tie, 0.0, d)
    return d


def family_decisions(diffs: list[np.ndarray], alpha: float = defaults.ALPHA, rope: float = defaults.ROPE,
                     p_magnitude: np.ndarray | None = None, one_sided: bool = False) -> np.ndarray:
    """[n_sim, m] verdict names by the shipped seed rule (`rules.decision.decide`); `p_magnitude`
    the magnitude TOST p (None: never at its null, no `delete`)."""
    th = Thresholds(alpha=alpha, rope=rope, one_sided_keep=one_sided)
    return decide(Evidence(diffs, magnitude_p=p_magnitude), th).verdict


def _signed(verdict: np.ndarray) -> np.ndarray:
    """+1 keep wired, -1 harmful, 0 otherwise (`rules.settings.verdict_codes`, the decisive ones)."""
    codes = verdict_codes(verdict)
    return np.where(np.abs(codes) == 1, codes, 0)


def family_verdicts(diffs: list[np.ndarray], alpha: float = defaults.ALPHA) -> np.ndarray:
    """[n_sim, m] codes per dataset and gem: +1 keep wired, -1 harmful, 0 otherwise (Holm)."""
    return _signed(family_decisions(diffs, alpha))


def null_rate(shapes: list[Shape], n_sim: int = defaults.N_SIM, *, dist: str = "normal",
              alpha: float = defaults.ALPHA, seed: int = defaults.SEED) -> dict[str, float]:
    """Family-wise rates under the null: any false keep, any false harmful, either."""
    rng = np.random.default_rng(seed)
    codes = family_verdicts([simulate_differences(rng, s, n_sim, 0.0, dist) for s in shapes], alpha)
    keep, harm = (codes == 1).any(1), (codes == -1).any(1)
    return dict(false_keep=float(keep.mean()), false_harmful=float(harm.mean()), fwer=float((keep | harm).mean()))


def power(shapes: list[Shape], effect: float, n_sim: int = defaults.N_SIM, *, dist: str = "normal",
          alpha: float = defaults.ALPHA, seed: int = defaults.SEED) -> dict[str, float]:
    """Planted `effect` on the first gem only: P(keep wired) for it, and the others' false rate."""
    rng = np.random.default_rng(seed + 1)
    diffs = [simulate_differences(rng, s, n_sim, effect if i == 0 else 0.0, dist) for i, s in enumerate(shapes)]
    codes = family_verdicts(diffs, alpha)
    others = (codes[:, 1:] != 0).any(1) if codes.shape[1] > 1 else np.zeros(n_sim, bool)
    return dict(power=float((codes[:, 0] == 1).mean()), others_false=float(others.mean()))


def mc_tolerance(rate: float, n_sim: int, z: float = 2.326) -> float:
    """One-sided 99% Monte-Carlo allowance above `rate` for a rate estimated from n_sim datasets."""
    return z * math.sqrt(rate * (1 - rate) / n_sim)


def median_parts(parts):
    """The first contrast's variance parts at their median over the simulated datasets: where a
    row's stated MDE is read."""
    def first(name: str):
        x = np.asarray(getattr(parts, name))
        x = x[..., 0] if x.ndim >= 2 else x
        return bool(np.any(x)) if x.dtype == bool else float(np.nanmedian(x)) if x.size else math.nan
    return type(parts)(*(first(f.name) for f in fields(parts)))


def calibration_table(shapes: list[Shape], *, thresholds: Thresholds | None = None, seeds=defaults.CALIBRATION_SEEDS,
                      effects=EFFECT_MULTIPLES, **settings) -> pd.DataFrame:
    """One row per (seeds, distribution): null rates and power per planted effect (multiples of the
    first gem's sd, plus the ROPE); `seeds` besides the experiment's own."""
    th = Thresholds.build(thresholds, **settings)
    n_sim, rope, alpha, seed = th.n_sim, th.rope, th.alpha, th.seed
    own = {s.n for s in shapes}
    variants = [("experiment", shapes)] + [(str(n), [Shape(s.gem, n, s.sd, s.p_div, s.p_tie) for s in shapes])
                                           for n in seeds if own != {n}]  # the experiment's own n is row 1
    sd = shapes[0].sd
    eff_values = [(f"{k:g} sd", k * sd) for k in effects] + [(f"ROPE {rope:g}", rope)]
    rows = []
    for label, sh in variants:
        for dist in DISTRIBUTIONS:
            row = dict(seeds=label, n_seeds=",".join(str(s.n) for s in sh), distribution=dist, n_sim=n_sim,
                       gems=len(sh), sd=sd, p_div=sh[0].p_div)
            row.update(null_rate(sh, n_sim, dist=dist, alpha=alpha, seed=seed))
            row["mc_tolerance"] = mc_tolerance(alpha, n_sim)
            row["mde"] = mde(PowerInputs(sh[0].n, sd, sh[0].p_div), alpha / len(sh), th.power)
            for name, value in eff_values:
                row[f"power@{name} ({value:.3g})"] = power(sh, value, n_sim, dist=dist, alpha=alpha, seed=seed)["power"]
            rows.append(row)
    return pd.DataFrame(rows)


def experiment_shapes(verdicts: pd.DataFrame, members: pd.DataFrame | None = None,
                      default_seeds: int = 16) -> tuple[list[Shape], str]:
    """(shapes, note) of each gem's comparison from a verdict table; gems without a design get the
    experiment's typical shape, so a 3-gem family is always simulated."""
    v = verdicts
    has = v[v["n_seeds"].fillna(0).astype(int) > 1]
    note = ""
    if len(has):
        sd_typ = float(np.nanmedian(has["sd_diff"].astype(float)))
        n_typ = int(has["n_seeds"].max())
    else:
        n_typ, sd_typ = default_seeds, math.nan
        note = "no gem has a paired design: "
        if members is not None and len(members):
            col = "val_alpha_sharpe" if "val_alpha_sharpe" in members and np.isfinite(members["val_alpha_sharpe"]).any() else "val_sharpe"
            last = members[members["epoch"] == members.groupby("trial_id")["epoch"].transform("max")]
            x = last[col].astype(float)
            sd_typ = float(np.nanstd(x[np.isfinite(x)], ddof=1)) * math.sqrt(2)
            note += f"sd taken as sqrt(2) x the spread of {col} across members ({sd_typ:.3g}), {n_typ} seeds"
        else:
            sd_typ = 1.0
            note += f"sd 1, {n_typ} seeds"
    if not np.isfinite(sd_typ) or sd_typ <= 0:
        sd_typ = 1.0
    shapes = []
    for _, r in v.iterrows():
        n = int(r["n_seeds"]) if np.isfinite(r["n_seeds"]) and r["n_seeds"] > 1 else n_typ
        sd = float(r["sd_diff"]) if np.isfinite(r.get("sd_diff", np.nan)) and r["sd_diff"] > 0 else sd_typ
        pairs = max(float(r.get("n_pairs", 0) or 0), 1.0)
        p_div = 0.0
        if np.isfinite(r.get("wired_diverged", np.nan)):
            p_div = float((r["wired_diverged"] + r["measured_diverged"]) / (2 * pairs))
        tie = float(r.get("tied_share", 0.0))
        tie = tie if np.isfinite(tie) else 0.0
        shapes.append((not (np.isfinite(r["n_seeds"]) and r["n_seeds"] > 1), -n,
                       Shape(str(r["gem"]), n, sd, min(p_div, 0.5), min(tie, 0.95))))
    # the planted effect goes to the first: a gem with a design, the most seeds first
    shapes = [s for *_, s in sorted(shapes, key=lambda x: x[:2])]
    return shapes, note


def format_calibration(table: pd.DataFrame, shapes: list[Shape], note: str = "", alpha: float = defaults.ALPHA) -> str:
    """The calibration as text for a terminal (what `tune-gems analyze --calibrate` prints)."""
    lines = [f"Calibration of the verdict rule (signed-rank, Holm over {len(shapes)} gems, alpha {alpha:g}); "
             f"{int(table['n_sim'].iloc[0])} simulated datasets per row",
             "shape: " + ", ".join(f"{s.gem}: {s.n} seeds, sd {s.sd:.3g}, divergence {s.p_div:.2g}"
                                   + (f", ties {s.p_tie:.0%}" if s.p_tie else "") for s in shapes)]
    if note:
        lines.append(note)
    pcols = [c for c in table.columns if c.startswith("power@")]
    head = ["seeds", "dist", "false keep", "false harmful", "FWER", "MDE (80%)"] + [c.replace("power@", "power ") for c in pcols]
    rows = [[str(r["seeds"]) + ("" if r["seeds"] != "experiment" else f" ({r['n_seeds']})"), r["distribution"],
             f"{r['false_keep']:.3f}", f"{r['false_harmful']:.3f}", f"{r['fwer']:.3f}", f"{r['mde']:.3g}"]
            + [f"{r[c]:.2f}" for c in pcols] for _, r in table.iterrows()]
    lines += text_table(head, rows, rule=False)
    lines.append(promise("family-wise false rate: worst", table["fwer"].max(), alpha, table["mc_tolerance"].iloc[0]))
    return "\n".join(lines)


def promise(what: str, worst: float, alpha: float, tol: float) -> str:
    """The line under a calibration table: its worst false rate against the promise, with the
    Monte-Carlo allowance `tol` (`mc_tolerance`)."""
    return (f"{what} {worst:.3f} (promise <= {alpha:g}; Monte-Carlo allowance +{tol:.3f})"
            + ("" if worst <= alpha + tol else "  ** ABOVE THE PROMISE **"))


# -- search, then confirm --------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchShape:
    """A simulated search: `trials` trials wiring each gem with probability `p_wire`, per-seed
    differences of a shared path part and trial noise; `confirm_seeds` fresh seeds and paths."""

    trials: int = 8
    gems: int = 3
    seeds: int = 16
    confirm_seeds: int = 16
    path_sd: float = 0.7
    noise_sd: float = 0.7
    p_wire: float = 0.5

    @property
    def sd(self) -> float:
        return math.sqrt(self.path_sd**2 + self.noise_sd**2)


def search_confirm_rates(shape: SearchShape, effect: float = 0.0, n_sim: int = defaults.N_SIM, *,
                         alpha: float = defaults.ALPHA, dist: str = "normal", seed: int = defaults.SEED) -> dict[str, float]:
    """Simulated searches, then confirmation, by the shipped choice (`search_choice.best_trial`) and
    rule (`rules.decision.decide`): the *naive* verdict tests the chosen trial's own seeds, the
    *confirmed* a fresh run. Returns naive_fwer, confirmed_fwer, power and naive_power."""
    rng = np.random.default_rng(seed + 7)
    T, m, n, nc = shape.trials, shape.gems, shape.seeds, shape.confirm_seeds
    wired = rng.random((n_sim, T, m)) < shape.p_wire
    delta = np.zeros(m)
    delta[0] = effect
    path = shape.path_sd * _draws(rng, (n_sim, 1, m, n), dist)  # shared by the trials of one search
    d = delta[None, None, :, None] + path + shape.noise_sd * _draws(rng, (n_sim, T, m, n), dist)
    score = rank_test(d.reshape(-1, n)).estimate.reshape(n_sim, T, m)
    best, chosen = best_trial(score, wired, axis=1)  # [n_sim, m]
    picked = np.take_along_axis(d, best[:, None, :, None], axis=1)[:, 0]  # [n_sim, m, n]
    fresh = delta[None, :, None] + shape.sd * _draws(rng, (n_sim, m, nc), dist)
    th = Thresholds(alpha=alpha)
    out = {}
    for name, d in (("naive", picked), ("confirmed", fresh)):
        codes = _signed(decide(Evidence([d[:, g] for g in range(m)], tested=chosen), th).verdict)
        null_gems = codes[:, 1:] if effect else codes
        out[f"{name}_fwer"] = float((null_gems != 0).any(axis=1).mean())
        out[f"{name}_power"] = float((codes[:, 0] == 1).mean()) if effect else math.nan
    out["power"] = out.pop("confirmed_power")
    return out


def confirmation_mde(shape: SearchShape, alpha: float = defaults.ALPHA, power_target: float = defaults.POWER) -> float:
    """The confirmation's minimum detectable effect (`rules.power.mde`, Holm's first step over the gems)."""
    return mde(PowerInputs(shape.confirm_seeds, shape.sd), alpha / shape.gems, power_target)


def delete_verdicts(shapes: list[Shape], effect: float, rope: float = defaults.ROPE, n_sim: int = defaults.N_SIM, *,
                    dist: str = "normal", alpha: float = defaults.ALPHA, seed: int = defaults.SEED) -> np.ndarray:
    """[n_sim] the first gem's verdict when every magnitude is at its null and wiring it shifts the
    outcome by `effect`: the wiring half decides `delete`."""
    rng = np.random.default_rng(seed + 3)
    diffs = [simulate_differences(rng, s, n_sim, effect if i == 0 else 0.0, dist) for i, s in enumerate(shapes)]
    return family_decisions(diffs, alpha, rope, p_magnitude=np.zeros((n_sim, len(shapes))))[:, 0]


def delete_rate(shapes: list[Shape], effect: float, rope: float = defaults.ROPE, n_sim: int = defaults.N_SIM, *,
                dist: str = "normal", alpha: float = defaults.ALPHA, seed: int = defaults.SEED) -> float:
    """P(the first gem reads `delete`) in `delete_verdicts`. A true wiring effect at the ROPE or
    beyond must read `delete` at most alpha of the time: a gem whose wiring matters is kept."""
    return float((delete_verdicts(shapes, effect, rope, n_sim, dist=dist, alpha=alpha, seed=seed) == DELETE).mean())
