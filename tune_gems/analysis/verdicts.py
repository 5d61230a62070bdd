"""The verdict per gem: delete / wire candidate / keep wired / off, with its evidence.

The team's method, "measure, then commit", as rules (docs/analysis.md has the full text):

1. No completed trial measured or wired the gem -> `no data`.
2. Trials wired the gem and enough members compare with measured ones (>= `min_members` seed
   pairs, or >= `min_members` members on each side) -> compare validation Sharpe, wired minus
   measured, with a bootstrap interval at `confidence`:
   lower bound > 0 -> `keep wired`; otherwise -> `delete` when the measured magnitude is ~0,
   else `off`.
3. Otherwise the measured magnitude decides: mean |gem / C51 loss| < `rel_threshold` ->
   `delete` (redundant); else -> `wire candidate`. If wired trials exist but are too few, the
   evidence says "insufficient data".
4. Only wired trials and too few to compare, or no finite measured magnitude ->
   `insufficient data`.

The verdict uses validation Sharpe only: test Sharpe is never searched on and is shown beside
as extra evidence (same comparison, same pairs).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tune_gems.analysis import defaults
from tune_gems.analysis.labels import context_label, gem_metric, trial_gem_modes
from tune_gems.analysis.magnitudes import gem_history
from tune_gems.analysis.variance import KEY, final_members, trial_outcomes
from tune_gems.analysis.stats import (
    bootstrap_diff_ci,
    mannwhitney_p,
    paired_bootstrap_ci,
    wilcoxon_p,
)
from tune_gems.config import GEM_NAMES

VERDICTS = ("delete", "wire candidate", "keep wired", "off", "no data", "insufficient data")
PAIRED = "paired bootstrap (seed)"
UNPAIRED = "unpaired stratified bootstrap"

VERDICT_COLUMNS = [
    "gem", "metric", "verdict", "reason",
    "measured_n", "measured_rel_mean", "measured_rel_max", "rel_threshold",
    "wired_n", "wired_rel_mean", "n_excluded",
    "test", "n_pairs", "wired_members", "measured_members",
    "sharpe_diff", "ci_low", "ci_high", "confidence", "p_value",
    "test_sharpe_diff", "test_sharpe_ci_low", "test_sharpe_ci_high",
]


def compare_wired(
    final: pd.DataFrame,
    gem: str,
    *,
    column: str = "val_sharpe",
    method: str | None = None,
    min_members: int = defaults.MIN_MEMBERS,
    statistic: str = defaults.STATISTIC,
    n_boot: int = defaults.N_BOOT,
    confidence: float = defaults.CONFIDENCE,
    seed: int = defaults.SEED,
) -> dict:
    """Wired minus measured `column` for `gem` over final-epoch members.

    `final` holds the included final-epoch member rows with a `mode` column (this gem's mode).
    Paired when >= `min_members` (context, seed) units have both a wired and a measured member
    (context = experiment + config label without this gem): the mean of per-unit differences (each side
    averaged over its members at that unit), a bootstrap over units, Wilcoxon signed-rank p.
    Otherwise unpaired, on configurations that have both modes (all of them if none has):
    difference of `statistic`, each side resampled by trial then member, Mann-Whitney U p;
    needs >= `min_members` members per side. `method` forces `paired` / `unpaired`.
    Returns a dict: test, n_pairs, wired_members, measured_members, diff, ci_low, ci_high,
    p_value, note.
    """
    d = final[np.isfinite(final[column].astype(float))].copy()
    # Pairs never cross experiments: other sweeps may differ in data or trainer settings.
    d["context"] = d["experiment"].astype(str) + " :: " + d["config_label"].map(lambda s: context_label(s, gem))
    w, m = d[d["mode"] == "wire"], d[d["mode"] == "measure"]
    res = {
        "test": "none", "n_pairs": 0, "wired_members": int(len(w)), "measured_members": int(len(m)),
        "diff": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "note": "",
    }
    units = ["context", "seed"]
    pairs = (
        w.groupby(units)[column].mean().rename("w").to_frame()
        .join(m.groupby(units)[column].mean().rename("m"), how="inner")
    )
    res["n_pairs"] = int(len(pairs))
    ci = dict(n_boot=n_boot, confidence=confidence, seed=seed)

    if method == "paired" or (method is None and len(pairs) >= min_members):
        diffs = (pairs["w"] - pairs["m"]).to_numpy()
        res["diff"], res["ci_low"], res["ci_high"] = paired_bootstrap_ci(diffs, **ci)
        res["p_value"] = wilcoxon_p(diffs)
        res["test"] = PAIRED
        return res

    shared = set(w["context"]) & set(m["context"])
    if shared:
        w, m = w[w["context"].isin(shared)], m[m["context"].isin(shared)]
    else:
        res["note"] = "no configuration differs only in this gem: other settings confound it"
    res["wired_members"], res["measured_members"] = int(len(w)), int(len(m))
    if method is None and (len(w) < min_members or len(m) < min_members):
        res["note"] = (
            f"insufficient data: n_wired={len(w)}, n_measured={len(m)}, n_pairs={len(pairs)} "
            f"(need {min_members})"
        )
        return res
    groups = lambda df: [g[column].to_numpy(float) for _, g in df.groupby(KEY, sort=True)]  # noqa: E731
    res["diff"], res["ci_low"], res["ci_high"] = bootstrap_diff_ci(
        groups(w), groups(m), statistic=statistic, **ci
    )
    res["p_value"] = mannwhitney_p(w[column], m[column])
    res["test"] = f"{UNPAIRED} ({statistic})"
    return res


def _fmt(x: float) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:.3g}"


def gem_verdicts(
    trials: pd.DataFrame,
    history: pd.DataFrame,
    members: pd.DataFrame,
    *,
    rel_threshold: float = defaults.REL_THRESHOLD,
    confidence: float = defaults.CONFIDENCE,
    n_boot: int = defaults.N_BOOT,
    min_members: int = defaults.MIN_MEMBERS,
    statistic: str = defaults.STATISTIC,
    seed: int = defaults.SEED,
) -> pd.DataFrame:
    """One row per gem (g6, g10, g12): the verdict, a one-line reason and the evidence columns.

    Evidence: measured_n (ok trials with the gem measured and a finite magnitude),
    measured_rel_mean / _max (|gem / C51 loss|: mean over trials of the mean over epochs / max),
    wired_n (ok trials with it wired), wired_rel_mean, n_excluded (failed or diverged trials
    that measured or wired it; never used), test (the comparison made, or `none`), n_pairs,
    wired_members, measured_members, sharpe_diff with ci_low / ci_high at `confidence` and
    p_value (validation Sharpe: decides), test_sharpe_diff with its interval (shown only).
    """
    outcomes = trial_outcomes(trials, members)
    modes = trial_gem_modes(trials)
    fin = final_members(members, trials)
    fin = fin[fin["included"]].merge(modes, on=KEY, how="left")
    long = gem_history(history, trials, members)
    ok = outcomes.merge(modes, on=KEY, how="left")
    ok_mask = ok["outcome"] == "ok"
    rows = []
    for gem in GEM_NAMES:
        metric = gem_metric(gem)
        row = {c: math.nan for c in VERDICT_COLUMNS}
        row.update(gem=gem, metric=metric, rel_threshold=rel_threshold, confidence=confidence)
        used = ok[gem].isin(["measure", "wire"])
        row["n_excluded"] = int((used & ~ok_mask).sum())
        row["wired_n"] = int(((ok[gem] == "wire") & ok_mask).sum())
        n_measured_trials = int(((ok[gem] == "measure") & ok_mask).sum())

        g = long[long["gem"] == gem]
        rel = g.assign(rel=g["rel"].abs()).groupby(["mode"] + KEY)["rel"].agg(["mean", "max"])
        if "measure" in rel.index.get_level_values(0):
            r = rel.loc["measure"].dropna(subset=["mean"])
            row["measured_n"] = int(len(r))
            row["measured_rel_mean"] = float(r["mean"].mean()) if len(r) else math.nan
            row["measured_rel_max"] = float(r["max"].max()) if len(r) else math.nan
        else:
            row["measured_n"] = 0
        if "wire" in rel.index.get_level_values(0):
            row["wired_rel_mean"] = float(rel.loc["wire"]["mean"].mean())

        gf = fin.assign(mode=fin[gem])
        cmp = dict(min_members=min_members, statistic=statistic, n_boot=n_boot, confidence=confidence, seed=seed)
        tested = False
        if row["wired_n"] and n_measured_trials:
            c = compare_wired(gf, gem, column="val_sharpe", **cmp)
            row.update(
                test=c["test"], n_pairs=c["n_pairs"], wired_members=c["wired_members"],
                measured_members=c["measured_members"], sharpe_diff=c["diff"],
                ci_low=c["ci_low"], ci_high=c["ci_high"], p_value=c["p_value"],
            )
            tested = c["test"] != "none"
            note = c["note"]
            if tested and "test_sharpe" in gf.columns:
                method = "paired" if c["test"] == PAIRED else "unpaired"
                t = compare_wired(gf, gem, column="test_sharpe", method=method, **cmp)
                row.update(test_sharpe_diff=t["diff"], test_sharpe_ci_low=t["ci_low"], test_sharpe_ci_high=t["ci_high"])
        else:
            row["test"] = "none"
            row["n_pairs"] = 0
            row["wired_members"] = int((gf["mode"] == "wire").sum())
            row["measured_members"] = int((gf["mode"] == "measure").sum())
            note = ""
        row["verdict"], row["reason"] = _decide(row, tested, note, n_measured_trials, rel_threshold, confidence)
        rows.append(row)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _decide(row: dict, tested: bool, note: str, n_measured_trials: int, thr: float, conf: float) -> tuple[str, str]:
    """Apply the rules of the module docstring to one gem's evidence."""
    rel = row["measured_rel_mean"]
    has_rel = row["measured_n"] > 0 and np.isfinite(rel)
    small = has_rel and abs(rel) < thr
    pct = f"{conf:.0%}"
    if row["wired_n"] == 0 and n_measured_trials == 0:
        excl = f" ({row['n_excluded']} failed/diverged trial(s) excluded)" if row["n_excluded"] else ""
        return "no data", f"never measured nor wired in a completed trial (all off){excl}"
    if tested:
        ci = f"diff {row['sharpe_diff']:+.3g}, {pct} CI [{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]"
        how = f"{row['test']}, n_pairs={row['n_pairs']}" if row["test"] == PAIRED else (
            f"{row['test']}, n_wired={row['wired_members']}, n_measured={row['measured_members']}"
        )
        extra = f"; {note}" if note else ""
        if np.isfinite(row["ci_low"]) and row["ci_low"] > 0:
            return "keep wired", f"wired val Sharpe better than measured: {ci} > 0 ({how}){extra}"
        if small:
            return "delete", (
                f"redundant: measured magnitude ~0 (rel {_fmt(rel)} < {thr:g}) and wiring did not "
                f"improve val Sharpe: {ci} ({how}){extra}"
            )
        return "off", f"wired not better than measured: {ci} does not exclude 0 from below ({how}){extra}"
    wired_note = ""
    if row["wired_n"]:
        wired_note = f"; wiring test: {note}" if note else (
            f"; wiring test: insufficient data (n_wired={row['wired_members']}, no measured members)"
        )
    if not has_rel:
        if row["wired_n"] and n_measured_trials == 0:
            return "insufficient data", (
                f"wired only ({row['wired_n']} trial(s), {row['wired_members']} members): no measured "
                f"trials to compare with"
            )
        return "insufficient data", f"no finite measured magnitude in {n_measured_trials} measured trial(s){wired_note}"
    if small:
        return "delete", (
            f"redundant: measured magnitude ~0 (rel {_fmt(rel)} < {thr:g}, n={row['measured_n']}){wired_note}"
        )
    return "wire candidate", (
        f"measured magnitude rel {_fmt(rel)} >= {thr:g} (n={row['measured_n']})"
        + (wired_note if wired_note else "; not wired in any trial yet")
    )
