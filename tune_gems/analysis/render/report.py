"""Text renderings: the terminal verdict table and `report.md`, its factor section included (its
numbers, intervals and markdown tables in the words of `tune_gems.analysis.text`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tune_gems.analysis.rules.seed import NO_DESIGN
from tune_gems.analysis.rules.words import INSUFFICIENT, NULL_ARM_OK
from tune_gems.analysis.render.figures import lead_section
from tune_gems.analysis.render.plot_tables import decided_interval
from tune_gems.analysis.text import format_interval, format_number, markdown_table
from tune_gems.stats.baseline_headline import baseline_comparison, baseline_headline


def market_interval(r: Any) -> str:
    """The market-noise interval of a verdict row, `-` where there is none."""
    status = r.get("market_noise")
    return format_interval(r.get("market_ci_low"), r.get("market_ci_high")) if status == "ok" else "-"


def _market_part(r: Any) -> str:
    status = r.get("market_noise")
    if status == "ok":
        return f"; market-noise interval {market_interval(r)} (same level)"
    if isinstance(status, str) and status:
        return f"; market noise: {status.split(':', 1)[0]}"
    return ""


def evidence_line(r: Any) -> str:
    """One gem's evidence in one line, each number once: its verdict line and its why line."""
    why = why_line(r)
    return f"{verdict_line(r)}; {why}" if why else verdict_line(r)


def verdict_line(r: Any) -> str:
    """The gem block's first line: the verdict's word (and the discovery's where the held-out
    stage withheld it, else the seeds' where the gates changed it), the effect that decided with its interval, and the MDE of the test that decided (with
    walk-forward folds the pooled estimate; else the seed rule's)."""
    if format_number(r.get("n_seeds"), "g") in ("-", "0"):
        return f"{r['gem']}: {r['verdict']} - design: none"
    seed_word, found = r.get("seed_verdict"), r.get("discovery_verdict")
    if isinstance(found, str) and found and found != r["verdict"]:  # the held-out stage withheld it
        changed = f" (the discovery: {found})"
    else:
        changed = f" (seeds alone: {seed_word})" if isinstance(seed_word, str) and seed_word and seed_word != r["verdict"] else ""
    if _finite(r, "pooled_effect"):
        level = format_number(100 * float(r.get("pooled_ci_level", float("nan"))), ".1f")
        interval = format_interval(r.get("pooled_ci_low"), r.get("pooled_ci_high"))
        effect = (f"pooled effect {format_number(r.get('pooled_effect'), '+.3g')} "
                  + (f"{interval} ({level}%, " if interval != "-" else "(no interval, ")
                  + f"over {format_number(r.get('periods_informative'), '.0f')} "
                  + ("histories)" if _finite(r, "histories") and float(r["histories"]) >= 2 else "periods)"))
    else:
        effect = (f"effect {format_number(r.get('effect'), '+.3g')} {format_interval(r.get('ci_low'), r.get('ci_high'))} "
                  f"({format_number(100 * float(r.get('ci_level', float('nan'))), '.1f')}% family-wise, over seeds; pseudo-median)")
    return f"{r['gem']}: {r['verdict']}{changed} - {effect}; MDE {format_number(r.get('mde'))}"


def why_line(r: Any, *, per_fold: bool = True) -> str:
    """The gem block's second line: why (verdicts.csv's `why`: the reason without its numbers),
    then the evidence the verdict line does not state, each once: design, seeds and ties, the
    seed effect where the pooled one decided, the mean, the market noise, Holm p, the power
    statement, the periods' heterogeneity (and the fold effects, `per_fold`), the held-out test
    and the skill in context. Without a `why` (a table written before it) the reason."""
    why = r.get("why") if isinstance(r.get("why"), str) and r.get("why") else str(r.get("reason", ""))
    if format_number(r.get("n_seeds"), "g") in ("-", "0"):
        return why
    seeds = ""
    if _finite(r, "pooled_effect"):
        seeds = (f"; over seeds {format_number(r.get('effect'), '+.3g')} {format_interval(r.get('ci_low'), r.get('ci_high'))} "
                 f"({format_number(100 * float(r.get('ci_level', float('nan'))), '.1f')}% family-wise; pseudo-median)")
    return (f"{why}; design: {r['design']}; seeds {int(r['n_seeds'])}{_ties_part(r)}{seeds}, mean "
            f"{format_number(r.get('mean_effect'), '+.3g')}{_market_part(r)}; Holm p {format_number(r.get('p_adjusted'), '.2g')}"
            f"{_power_part(r)}{_period_part(r, per_fold)}{_held_out_part(r)}{_skill_part(r)}")


def _finite(r: Any, key: str) -> bool:
    try:
        return math.isfinite(float(r.get(key)))
    except (TypeError, ValueError):
        return False


def _ties_part(r: Any) -> str:
    """Ties (left out of every test) and members that never traded, where there are any."""
    parts = []
    if _finite(r, "tied_share") and float(r["tied_share"]) > 0:
        parts.append(f"{format_number(100 * float(r['tied_share']), '.0f')}% tie ({format_number(r.get('n_informative'), '.0f')} informative)")
    if _finite(r, "zero_turnover_share") and float(r["zero_turnover_share"]) > 0:
        parts.append(f"{format_number(100 * float(r['zero_turnover_share']), '.0f')}% of members never traded")
    return f" ({', '.join(parts)})" if parts else ""


def _power_part(r: Any) -> str:
    """The power statement beyond the MDE (on the verdict line): with several periods the
    floor with infinitely many seeds and what it implies, else the seeds that would reach the ROPE."""
    rope = format_number(r.get("rope"), "g")
    note = r.get("power_note") if isinstance(r.get("power_note"), str) and r.get("power_note") else ""
    if not _finite(r, "mde_floor"):
        return f"; seeds for +-{rope}: {format_number(r.get('seeds_needed'), '.0f')}"
    advice = f": {note}" if note else f"; seeds per fold for +-{rope}: {format_number(r.get('seeds_needed'), '.0f')}"
    return f"; MDE floor {format_number(r.get('mde_floor'))} with infinitely many seeds{advice}"


def _period_part(r: Any, per_fold: bool = True) -> str:
    """Walk-forward folds: the pooled test's heterogeneity and the fold effects; one
    period: what the verdict is conditional on."""
    if format_number(r.get("pooled_effect")) == "-":
        period = r.get("period") if isinstance(r.get("period"), str) else ""
        folds = r.get("fold_effects") if per_fold and isinstance(r.get("fold_effects"), str) else ""
        return (f"; {period}" if period and period not in str(r.get("why", "")) else "") + (
            f"; per fold: {folds}" if folds else "")
    shared = ", tau shared" if bool(r.get("tau_shared")) else ""
    folds = f"; per fold: {r['fold_effects']}" if per_fold and isinstance(r.get("fold_effects"), str) and r["fold_effects"] else ""
    if not _finite(r, "pooled_p_adjusted"):  # too few periods: nothing was tested
        return folds
    return (f"; pooled by HKSJ with {format_number(r.get('pooled_df'), '.3g')} df{shared}, Holm p "
            f"{format_number(r.get('pooled_p_adjusted'), '.2g')}, tau^2 {format_number(r.get('tau2'))}, I^2 "
            f"{_percent(r.get('i2'))} (Q Holm p {format_number(r.get('q_p_adjusted'), '.2g')}){folds}")


def _percent(share: Any) -> str:
    """A share as a whole percentage, "-" where it is missing (no "-%")."""
    text = format_number(100 * share if isinstance(share, (int, float, np.floating)) else share, ".0f")
    return text if text == "-" else f"{text}%"


def _held_out_part(r: Any) -> str:
    """The held-out test segment's second stage of a keep wired / harmful: its
    effect, its interval at the confirmation's level and what it found."""
    held = r.get("held_out")
    if not isinstance(held, str) or not held:
        return ""
    return f"; test segment {format_number(r.get('test_effect'), '+.3g')} {format_interval(r.get('test_ci_low'), r.get('test_ci_high'))}: {held}"


def _skill_part(r: Any) -> str:
    skill = r.get("skill")
    return f"; {skill}" if isinstance(skill, str) and skill else ""


def format_verdict_table(df: pd.DataFrame, placebo: pd.DataFrame | None = None,
                         redundancy: pd.DataFrame | None = None, *, verbose: bool = True) -> str:
    """The verdicts for a terminal: an aligned table, each gem's evidence line and reason, the
    placebo arms and the redundancy findings. `verbose` False leaves out each gem's `why:` line
    (the full chain, in verdicts.csv: `tune-gems analyze --verbose` prints it)."""
    # the numbers a user decides by lead (LEAD_COLUMNS), the seeds' detail follows
    header = ["gem", "verdict", "effect", "CI", "decided by", "MDE", "held-out", "family", "seeds", "seed effect", "mean",
              "seed CI", "market CI", "Holm p", "TOST p", "excess/loss"]
    rows = [header]
    for _, r in df.iterrows():
        d = decided_interval(r)
        rows.append([str(r["gem"]), str(r["verdict"]), format_number(d["effect"], "+.3g"),
                     format_interval(d["ci_low"], d["ci_high"]), str(d["decided_by"]), format_number(r.get("mde")),
                     format_number(r.get("test_effect"), "+.3g"), format_number(r.get("family_size"), "g"),
                     format_number(r.get("n_seeds"), "g"), format_number(r.get("effect"), "+.3g"),
                     format_number(r.get("mean_effect"), "+.3g"),
                     format_interval(r.get("ci_low"), r.get("ci_high")), market_interval(r), format_number(r.get("p_adjusted"), ".2g"),
                     format_number(r.get("tost_p_adjusted"), ".2g"), format_number(r.get("excess_median"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for _, r in df.iterrows():
        lines.append(verdict_line(r))
        if verbose:
            lines.append(f"    why: {why_line(r)}")
    if placebo is not None and len(placebo):
        lines.append("")
        for _, r in placebo.iterrows():
            ok = r["verdict"] in NULL_ARM_OK
            kind = r.get("kind") if isinstance(r.get("kind"), str) else "placebo"
            what = f"placebo {r['gem']} (wired at ~0 weight)" if kind == "placebo" else kind
            vacuous = ("" if bool(r.get("informative", True)) else
                       f" ** uninformative: {format_number(100 * float(r['tied_share']), '.0f')}% of the pairs tie (identical outcomes)"
                       f"{'' if r['verdict'] != INSUFFICIENT else ', too few informative pairs for any test'}: it tests nothing, "
                       "it passes nothing **")
            lines.append(f"{what}: {r['verdict']}{'' if ok else ' ** the rule is not calibrated for this learner **'}"
                         f" - effect {format_number(r['effect'], '+.3g')} {format_interval(r['ci_low'], r['ci_high'])}, p {format_number(r['p_value'], '.2g')}, "
                         f"spread sd {format_number(r['sd_diff'])}, IQR {format_number(r['iqr_diff'])} over {int(r['n_seeds'])} seeds{vacuous}")
    if redundancy is not None and len(redundancy):
        lines.append("")
        for _, r in redundancy.iterrows():
            lines.append(f"redundancy {r['gem']} vs {r['feature']}: {r['finding']}"
                         + ("" if r["finding"] == NO_DESIGN else
                            f" - excess off {format_number(r['excess_off'])}, on {format_number(r['excess_on'])}, change "
                            f"{format_number(r['change'], '+.3g')} {format_interval(r['ci_low'], r['ci_high'])}, Holm p {format_number(r['p_adjusted'], '.2g')}"
                            f" ({int(r['n_seeds'])} seeds)"))
    return "\n".join(lines)


def _sharpe_view(sv: pd.DataFrame, prefix: str) -> pd.DataFrame:
    if not len(sv):
        return sv
    out = pd.DataFrame({"config_label": sv["config_label"]} if "config_label" in sv else {})
    for c in ("n_trials", "n_failed", "n_diverged", "n_members"):
        if c in sv:
            out[c] = sv[c]
    for s in ("n", "mean", "std", "var", "min", "max"):
        out[s] = sv[f"{prefix}_{s}"]
    out["best range"] = [format_interval(a, b) for a, b in zip(sv[f"{prefix}_best_min"], sv[f"{prefix}_best_max"])]
    out["IQM"] = sv[f"{prefix}_iqm"]
    out["IQM CI"] = [format_interval(a, b) for a, b in zip(sv[f"{prefix}_iqm_ci_low"], sv[f"{prefix}_iqm_ci_high"])]
    return out


def baseline_comparison_md(exp: Any) -> str:
    table = baseline_comparison(exp)
    if table.empty:
        return "No members and no baselines in these folders."
    note = "" if getattr(exp, "baselines", None) is not None else "\n\n(No baselines table in these folders: runs older than the evaluation columns.)"
    intro = (
        "Final epoch, mean over non-diverged members; baselines under the same cost model, averaged over "
        "paths when every seed index has its own synthetic path.\n\n"
    )
    return intro + markdown_table(table.round(3)) + note


FOLD_REPORT_COLUMNS = ("gem", "fold", "start", "end", "effect", "ci_low", "ci_high", "ci_level", "seeds", "pairs",
                       "tied_share", "pooled_effect", "pooled_ci_low", "pooled_ci_high")
"""The report's per-fold table (one row per gem and fold); every column is in fold_effects.csv."""


def _fold_table(folds: pd.DataFrame | None) -> list[str]:
    """Report lines: one row per gem and walk-forward fold, beside the pooled estimate the
    verdict used (fold_effects.csv)."""
    if folds is None or not len(folds):
        return []
    return ["", "Per fold (`fold_effects.csv`; `seeds` the informative pairs of `pairs`, the interval at the level the "
                "period rule read it; `pooled_*` the verdict's pooled estimate and interval):", "",
            markdown_table(folds, list(FOLD_REPORT_COLUMNS))]


def _periods_section(v: pd.DataFrame, folds: pd.DataFrame | None = None) -> list[str]:
    """Report lines: the verdicts over periods (walk-forward folds) with the per-fold table, the
    held-out test check and the learner's skill in context (docs/analysis.md
    "Verdicts over periods")."""
    if not len(v) or "folds" not in v.columns:
        return []
    k = int(v["folds"].max()) if v["folds"].notna().any() else 1
    lines = ["", "### Over periods and out of sample", ""]
    if k > 1:
        lines.append(f"{k} walk-forward validation periods. Per fold: the seed-paired effect inside the fold (ties "
                     "left out); pooled: random effects with the Hartung-Knapp-Sidik-Jonkman interval at the Holm level "
                     "(tau^2 and the scale shared across the gems where they agree; plus the seeds' share common to every "
                     "fold), tau^2 and I^2 its heterogeneity. The pooled test decides: fewer than the minimum periods "
                     "read `insufficient data: too few periods`; a sign change is claimed (`inconclusive: inconsistent "
                     "across periods`) only when fold intervals lie on both sides of 0 at their Holm levels; periods "
                     "that differ without a decision read `inconclusive: heterogeneous across periods`. `mde` is the "
                     "pooled test's, `mde_floor` what no number of seeds beats.")
    else:
        lines.append("One validation period: every verdict is conditional on it (run walk-forward folds, `data.folds`, "
                     "to see whether an effect holds in another period).")
    lines.append("Each `keep wired` / `harmful` is re-estimated once on the untouched test segment with the same pairs, "
                 "the pre-registered second stage: it stays final only where that effect agrees (one-sided at alpha / m, "
                 "the test period's spread in its standard error), else it reads `not confirmed on held-out data` "
                 "(`held_out`, `discovery_verdict`); the test segment chooses nothing else.")
    cols = ["gem", "verdict", "folds", "fold_effects", "pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_df",
            "tau2", "i2", "mde", "mde_floor", "test_effect", "test_ci_low", "test_ci_high", "held_out"]
    per_period = ("fold_", "pooled", "tau", "i2", "mde")
    if k > 1:  # the per-fold string of verdicts.csv is the table below
        cols.remove("fold_effects")
    lines += ["", markdown_table(v, cols if k > 1 else [c for c in cols if not c.startswith(per_period)])]
    lines += _fold_table(folds)
    skill = v["skill"].dropna().astype(str) if "skill" in v.columns else pd.Series(dtype=str)
    if len(skill) and skill.iloc[0]:
        lines += ["", f"**Skill in context:** {skill.iloc[0]}."]
    return lines


def _window_words(settings: dict[str, Any]) -> str:
    """The verdict metric's epoch window, in words, from the analysis settings."""
    from tune_gems.analysis.rules.thresholds import Thresholds

    return Thresholds.of_settings(settings).window_text()


LEAD_COLUMNS = ("gem", "verdict", "decided_by", "decided_effect", "decided_ci_low", "decided_ci_high", "mde",
                "test_effect", "held_out", "family_size")
"""The numbers a user decides by, once: the final word, the estimate and
interval of the test that decided it (`decided_by`: the pooled test over periods, or the seeds),
the MDE of that rule, the held-out test segment's effect and what the second stage found, and
the size of the family the word was decided in. verdicts.csv, the terminal table and report.md
lead with them; the per-seed and per-fold detail follows."""

REPORT_VERDICT_COLUMNS = (*LEAD_COLUMNS, "n_seeds", "tied_share", "p_adjusted")
"""The report's verdict summary; the full evidence is verdicts.csv."""


def lead_verdict_columns(v: pd.DataFrame) -> pd.DataFrame:
    """verdicts.csv with the decided estimate and interval (`plot_tables.decided_interval`, the one
    reading of which test decided) and LEAD_COLUMNS first, every other column after in its order."""
    v = v.copy()
    decided = [decided_interval(r) for _, r in v.iterrows()]
    v["decided_by"] = [d["decided_by"] for d in decided]
    for key in ("effect", "ci_low", "ci_high"):
        v[f"decided_{key}"] = [d[key] for d in decided]
    lead = [c for c in LEAD_COLUMNS if c in v.columns]
    return v[lead + [c for c in v.columns if c not in lead]]


def render_report(result: Any, images: dict[str, str], settings: dict[str, Any]) -> str:
    """`report.md` of an analysis result (see run.AnalysisResult); `images`: title -> file."""
    exp = result.experiment
    out = result.trial_outcomes
    lines = ["# tune-gems analysis", ""]
    headline = baseline_headline(baseline_comparison(exp))
    if headline:
        lines += [headline[0].upper() + headline[1:] + ".", ""]
    lines.append(
        "Settings: " + ", ".join(f"`{k}={v}`" for k, v in settings.items())
        + ". How to read this report: `docs/analysis.md`."
    )
    lines += ["", *lead] if (lead := lead_section(images)) else []  # plots to read first (render/figures.py)
    lines += ["", "## Experiments read", ""]
    rows = []
    for label, path in zip(exp.labels, exp.paths):
        o = out[out["experiment"] == label]["outcome"].value_counts()
        studies = [k for k in exp.studies if k == label or k.startswith(f"{label}/")]
        rows.append(
            {
                "experiment": label, "folder": str(path), "trials": int(o.sum()),
                "ok": int(o.get("ok", 0)), "failed": int(o.get("failed", 0)),
                "diverged": int(o.get("diverged", 0)), "optuna study": ", ".join(studies) or "none",
            }
        )
    lines.append(markdown_table(pd.DataFrame(rows)))

    v = result.verdicts if "decided_by" in result.verdicts.columns else lead_verdict_columns(result.verdicts)
    lines += ["", "## Verdicts", ""]
    lines.append(
        "Effects come only from designed comparisons: members that differ in one gem's mode alone, "
        "paired by seed (docs/analysis.md). Metric: the validation alpha Sharpe averaged over "
        f"{_window_words(settings)}, wired minus measured, a diverged member counted as the worst "
        "outcome; pairs that tie exactly (identical outcomes) are left out of every test (`tied_share`, "
        "`zero_turnover_share`), and too few informative pairs read `insufficient data`; "
        "Wilcoxon signed-rank with its Hodges-Lehmann interval (the seed interval), Holm over the design's family "
        "(every main effect it varies, gems and factors alike: `family_size`; factors.csv has the same words). "
        "More than half of a contrast's pairs tied: no `equivalent` or `delete` (`insufficient data`, mostly tied). "
        "The estimand (`effect`) is the pseudo-median of the per-seed differences (Hodges-Lehmann: the median of "
        "their Walsh averages), not the mean; `mean_effect` beside it is the mean over the seeds where nobody diverged. "
        "On one price history (a real series, or synthetic `paths: shared`) each difference also gets a "
        "market-noise interval at the same level (`market_ci_low`, `market_ci_high`: a stationary block bootstrap "
        "of the validation period over the saved per-step returns); a `keep wired` or `harmful` that it does "
        "not confirm reads `inconclusive` (`seed_verdict` keeps the seeds' word). A discovery `keep wired` / "
        "`harmful` is final only where the held-out test segment confirms it (one-sided at alpha / m, the test "
        "period's spread in its standard error; else `not confirmed on held-out data`, `discovery_verdict` keeps "
        "the discovery's word); the test segment chooses nothing else. Each row leads with the word, the estimate "
        "and interval of the test that decided it (`decided_by`), that rule's MDE, the held-out effect and the "
        "family size; the seeds' detail follows."
    )
    for note in getattr(result, "notes", []):
        lines += ["", f"Note: {note}."]
    lines += ["", markdown_table(v, list(REPORT_VERDICT_COLUMNS)), "",
              "Every column of the evidence (seed verdict, design, interval level, market-noise interval, TOST p, "
              "seeds needed, test effect, measured excess, redundancy) is in `verdicts.csv`.", ""]
    lines.extend(f"- {verdict_line(r)}\n  - why: {why_line(r, per_fold=False)}" for _, r in v.iterrows())
    lines += _periods_section(v, getattr(result, "fold_effects", None))
    if "Gem effects" in images:
        lines += ["", f"![Gem effects]({images['Gem effects']})"]
    placebo = getattr(result, "placebo", None)
    lines += ["", "## Null arms (placebo, A/A)", ""]
    lines.append("A gem wired at a negligible weight (placebo), or the control with an independent replay nuisance "
                 "stream (A/A, `trainer.replay_stream`): the learner's own null. The verdict must be `equivalent` or "
                 "`inconclusive`; the spread is the per-seed difference against its twin; `informative` is false when "
                 "most pairs tie (identical outcomes: the arm tests nothing).")
    lines += ["", markdown_table(placebo) if placebo is not None and len(placebo) else "_No placebo arm in these results._"]
    red = getattr(result, "redundancy", None)
    lines += ["", "## Redundancy (measure_gems factorial)", ""]
    lines.append("Does switching the model feature on remove the gem's measured excess over its null "
                 "(relative to the C51 loss)? `change` = on minus off, per seed; `removes` makes the gem's verdict `delete`.")
    lines += ["", markdown_table(red) if red is not None and len(red) else "_None._", ""]

    excl = out[out["outcome"] != "ok"]
    lines += ["", "## Failed and diverged trials", ""]
    lines.append(
        f"{int((out['outcome'] == 'failed').sum())} failed, {int((out['outcome'] == 'diverged').sum())} "
        f"diverged of {len(out)} trials. Failed trials are excluded everywhere; diverged members "
        "count as the worst outcome in the verdicts and are left out of the Sharpe-variance tables (never "
        "averaged in); both are counted per configuration."
    )
    if len(excl):
        lines += ["", markdown_table(excl, ["experiment", "trial_id", "config_label", "status", "outcome",
                                           "final_epoch", "reason"])]

    sv = result.sharpe_variance
    lines += ["", "## Against the baselines", ""]
    lines.append(baseline_comparison_md(exp))
    lines += ["", "## Sharpe variance per configuration", ""]
    lines.append(
        "Final epoch of each trial, all members of all ok trials pooled; std/var with ddof=1; "
        "best range = [min, max] over trials of each trial's best member; IQM CI = stratified "
        "bootstrap (trials, then members within trials). Full columns: `sharpe_variance.csv`."
    )
    for prefix, title in (("val_sharpe", "Validation"), ("test_sharpe", "Test")):
        lines += ["", f"### {title} Sharpe", "", markdown_table(_sharpe_view(sv, prefix))]
    if "Sharpe distributions" in images:
        lines += ["", f"![Sharpe distributions]({images['Sharpe distributions']})"]

    lines += ["", "## Gem magnitudes", ""]
    lines.append(
        "Per gem and mode over all epochs of ok trials: mean over trials of the mean over epochs; "
        "max over all epochs; `rel` = gem / C51 loss. Trajectories: `gem_trajectories.csv`."
    )
    lines += ["", markdown_table(result.gem_magnitudes)]
    if "Gem magnitudes" in images:
        lines += ["", f"![Gem magnitudes over epochs]({images['Gem magnitudes']})"]

    lines += ["", "## Optuna parameter importances", ""]
    lines.append("Optuna's default evaluator (`optuna.importance.get_param_importances`) on the persisted study.")
    imp = result.importances
    lines += ["", markdown_table(imp, [c for c in imp.columns if c != "note"])]
    notes = sorted({str(n) for n in imp.get("note", pd.Series(dtype=object)).dropna() if str(n)})
    lines += [f"\nNote: {n}" for n in notes]  # once, not on every row (each row keeps it in importances.csv)
    if "Parameter importances" in images:
        lines += ["", f"![Parameter importances]({images['Parameter importances']})"]
    return "\n".join(lines) + "\n"


# --- report.md's factor section (factors.csv): every factor of the design judged in one
# Holm family with the gems, largest effects first, and the factorial's interactions; it follows the
# verdict sections in the report.


FACTOR_REPORT_COLUMNS = ("kind", "factor", "contrast", "verdict", "reading", "n_seeds", "tied_share", "effect", "ci_low",
                         "ci_high", "p_adjusted", "mde", "mde_floor", "pooled_effect", "pooled_ci_low", "pooled_ci_high")
"""The report's factor table; every column is in factors.csv."""


def render_factor_section(factors: pd.DataFrame | None, settings: dict[str, Any]) -> str:
    """`report.md`'s "Every factor judged" section (appended after the rest): the family of gems
    and factors, largest effects first, then the factorial's interactions (Holm-adjusted)."""
    if factors is None or not len(factors):
        return ""
    judged = factors[factors["kind"] != "interaction"]
    inter = factors[factors["kind"] == "interaction"]
    m = int(judged["family_size"].max()) if judged["family_size"].notna().any() else 0
    lines = ["", "## Every factor judged", "",
             f"Each factor of the design (every gem's wiring, and every other key that differs between members at a "
             f"common seed: `model.*`, `trainer.*`, `gems.<g>.weight`, arms factors and list entries differing in one "
             f"key) gets its main effect by the gems' rule: seed-paired differences within each fold, the seed rule at "
             f"K = 1 (with the market-noise gates on one price history), the period rule at K >= 2, and Holm over the "
             f"{m} contrasts of the family (every main effect of the design, gems and factors alike, alpha "
             f"{settings.get('alpha', '')}): a gem's row is its verdict above, the same word, interval and Holm p. "
             "Largest effects first; nothing is left out (factors.csv has every column).", "",
             markdown_table(judged, list(FACTOR_REPORT_COLUMNS))]
    notes = [f"- {r['factor']} ({r['contrast']}): {r['power_note']}" for _, r in judged.iterrows()
             if isinstance(r.get("power_note"), str) and r["power_note"]]
    if notes:  # the pooled test's power statement (K >= 2): its MDE, the floor no seed count beats, the advice
        lines += ["", "Power of the pooled test (`mde`, `mde_floor`: the MDE with infinitely many seeds):", ""] + notes
    if len(inter):
        lines += ["", "### Interactions of the factorial", "",
                  "Per seed, one contrast's effect at the other's first level minus at its second; signed-rank, the "
                  "interval at the Holm level over the interactions (shown, not a verdict).", "",
                  markdown_table(inter, ["factor", "contrast", "verdict", "reading", "n_seeds", "effect", "ci_low",
                                         "ci_high", "ci_level", "p_adjusted"])]
    return "\n".join(lines) + "\n"
