"""Text renderings: the terminal verdict table and `report.md`, its factor section included (its
numbers, intervals and markdown tables in the words of `tune_gems.analysis.text`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tune_gems.analysis.rules.decision import NO_DESIGN
from tune_gems.analysis.rules.settings import INSUFFICIENT, NULL_ARM_OK
from tune_gems.analysis.verdicts.readings import INSUFFICIENT_BY
from tune_gems.analysis.render.figures import lead_section
from tune_gems.analysis.text import format_interval, format_number, markdown_table, text_table
from tune_gems.stats.baseline_headline import baseline_comparison, baseline_headline


def market_interval(r: Any) -> str:
    """The market-noise interval of a verdict row, `-` where there is none."""
    status = r.get("market_noise")
    return format_interval(r.get("market_ci_low"), r.get("market_ci_high")) if status == "ok" else "-"


def evidence_line(r: Any) -> str:
    """One gem's evidence in one line: its verdict line and `long_reason`."""
    return f"{verdict_line(r)}; {long_reason(r)}"


def long_reason(r: Any) -> str:
    """report.md's long form of a verdict: the reason with every number of every stage
    (verdicts.csv's `reason`) and the learner's skill in context."""
    skill = f"; {r['skill']}" if isinstance(r.get("skill"), str) and r.get("skill") else ""
    return f"{r.get('reason', '')}{skill}"


def verdict_line(r: Any) -> str:
    """The gem block's first line: the word (and the discovery's, or the seeds', where a later stage
    changed it), the deciding test's estimate, interval and Holm p, its MDE, overlap and held-out finding."""
    if format_number(r.get("n_seeds"), "g") in ("-", "0"):
        return f"{r['gem']}: {r['verdict']} - design: none"
    seed_word, found = r.get("seed_verdict"), r.get("discovery_verdict")
    if isinstance(found, str) and found and found != r["verdict"]:  # the held-out stage withheld it
        changed = f" (the discovery: {found})"
    else:
        changed = f" (seeds alone: {seed_word})" if isinstance(seed_word, str) and seed_word and seed_word != r["verdict"] else ""
    by = str(r.get("decided_by"))
    effect, interval = format_number(r.get("decided_effect"), "+.3g"), format_interval(r.get("decided_ci_low"), r.get("decided_ci_high"))
    if by.startswith(INSUFFICIENT_BY):  # no interval: the line says why
        changed = f" ({by.removeprefix(INSUFFICIENT_BY)}{'; ' + changed[2:-1] if changed else ''})"
        decided = f"effect {effect}, no interval"
    elif interval == "-":
        decided = f"{by}: {effect}, no interval"
    else:
        decided = (f"{by}: {effect} {interval} ({format_number(100 * _float(r, 'decided_ci_level'), '.1f')}%), Holm p "
                   f"{format_number(r.get('decided_p_adjusted'), '.2g')}")
    overlap = f"; folds' overlap x{_float(r, 'fold_overlap'):.2f}" if _float(r, "fold_overlap") > 1 else ""
    held = f"; held-out: {r['held_out']}" if isinstance(r.get("held_out"), str) and r["held_out"] else ""
    return f"{r['gem']}: {r['verdict']}{changed} - {decided}; MDE {format_number(r.get('mde'))}{overlap}{held}"


SCREEN_WHY = 200
"""Characters of a reason the terminal shows (`short_why`); report.md and verdicts.csv have it whole."""


def short_why(r: Any, width: int = SCREEN_WHY) -> str:
    """The `why` of a verdict row for a terminal: whole up to `width` characters, else cut at the
    last clause that fits, saying where the rest is."""
    why = str(r.get("why") if isinstance(r.get("why"), str) and r.get("why") else r.get("reason", ""))
    if len(why) <= width:
        return why
    cut = why[:width].rsplit("; ", 1)[0]
    return f"{cut}; ... (report.md)"


def _float(r: Any, key: str) -> float:
    try:
        return float(r.get(key))
    except (TypeError, ValueError):
        return math.nan


def history_effects_line(folds: pd.DataFrame | None, gem: str) -> str:
    """A gem's effect in each fold ('/') of each history by name (fold_effects.csv), '' with one history."""
    if folds is None or "history_name" not in folds.columns:
        return ""
    rows = folds[folds["gem"] == gem].sort_values(["history", "fold"])
    per = [f"{name} " + "/".join(format_number(e, "+.3g") if e == e else "tie" if t == 1 else "-"
                                 for e, t in zip(g["effect"], g["tied_share"]))
           for name, g in rows.groupby("history_name", sort=False)]
    folds = sorted(rows["fold"].astype(int).unique())
    return f"per history{', folds ' + '/'.join(map(str, folds)) if len(folds) > 1 else ''}: {', '.join(per)}" if per else ""


def calendar_line(r: Any) -> str:
    """The calendar part the deciding rule carried (histories that validate on the same dates share each
    period's luck) beside what the markets did in those windows (history_correlations.csv)."""
    corr = "".join(f", {seg} return correlation {format_number(_float(r, key), '.2f')}"
                   for seg, key in (("validation", "return_corr_val"), ("test", "return_corr_test"))
                   if _float(r, key) == _float(r, key))
    return (f"calendar part shared by the histories: variance {format_number(_float(r, 'var_calendar'))} on "
            f"{format_number(_float(r, 'calendar_df'))} df over {format_number(_float(r, 'calendar_periods'), 'g')} "
            f"calendar periods{corr}")


def format_verdict_table(df: pd.DataFrame, placebo: pd.DataFrame | None = None, redundancy: pd.DataFrame | None = None,
                         *, verbose: bool = True, fold_effects: pd.DataFrame | None = None) -> str:
    """The verdicts for a terminal: the aligned table, each gem's verdict line (per history with
    several) and with `verbose` its reason, the placebo arms and redundancy findings."""
    header = ["gem", "verdict", "effect", "CI", "Holm p", "decided by", "MDE", "held-out", "family", "seeds", "effect",
              "mean", "CI", "Holm p", "TOST p", "market CI", "excess/loss"]
    rows = [[str(r["gem"]), str(r["verdict"]), format_number(r.get("decided_effect"), "+.3g"),
             format_interval(r.get("decided_ci_low"), r.get("decided_ci_high")),
             format_number(r.get("decided_p_adjusted"), ".2g"), str(r.get("decided_by")), format_number(r.get("mde")),
             format_number(r.get("test_effect"), "+.3g"), format_number(r.get("family_size"), "g"),
             format_number(r.get("n_seeds"), "g"), format_number(r.get("effect"), "+.3g"),
             format_number(r.get("mean_effect"), "+.3g"), format_interval(r.get("ci_low"), r.get("ci_high")),
             format_number(r.get("p_adjusted"), ".2g"), format_number(r.get("tost_p_adjusted"), ".2g"),
             market_interval(r), format_number(r.get("excess_median"))] for _, r in df.iterrows()]
    lines = text_table(header, rows, {2: "the test that decided the word:", 9: "seeds alone:"})
    lines.append("")
    for _, r in df.iterrows():
        lines.append(verdict_line(r))
        if history_effects_line(fold_effects, r["gem"]):
            lines.append(f"    {history_effects_line(fold_effects, r['gem'])}")
        if math.isfinite(_float(r, "var_calendar")):  # NaN: no calendar part (one history, or none shared)
            lines.append(f"    {calendar_line(r)}")
        if verbose:
            lines.append(f"    why: {short_why(r)}")
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


FOLD_REPORT_COLUMNS = ("gem", "history_name", "fold", "start", "end", "effect", "ci_low", "ci_high", "ci_level", "seeds", "pairs",
                       "tied_share", "pooled_effect", "pooled_ci_low", "pooled_ci_high")
"""The report's per-fold table (one row per gem and fold, of each price history by its name where
there are several); every column is in fold_effects.csv."""


def _fold_table(folds: pd.DataFrame | None) -> list[str]:
    """Report lines: one row per gem and walk-forward fold, beside the pooled estimate the
    verdict used (fold_effects.csv)."""
    if folds is None or not len(folds):
        return []
    per = "Per history and fold" if "history_name" in folds.columns else "Per fold"
    return ["", f"{per} (`fold_effects.csv`; `seeds` the informative pairs of `pairs`, the interval at the level the "
                "period rule read it; `pooled_*` the verdict's pooled estimate and interval):", "",
            markdown_table(folds, list(FOLD_REPORT_COLUMNS))]


def _periods_section(v: pd.DataFrame, folds: pd.DataFrame | None = None) -> list[str]:
    """The verdicts over periods with the per-fold table, the held-out check and the learner's skill in
    context (docs/analysis.md "Verdicts over periods")."""
    if not len(v) or "folds" not in v.columns:
        return []
    k = int(v["folds"].max()) if v["folds"].notna().any() else 1
    h = int(v["histories"].max()) if "histories" in v.columns and v["histories"].notna().any() else 1
    lines = ["", "### Over periods and out of sample", ""]
    lines.append(f"{h} price histories x {k} fold{'s' if k > 1 else ''}: each history's effect over its folds, then "
                 "random effects over the histories (HKSJ at the Holm level) decide; `mde_floor` is what no number of "
                 "seeds beats." if h > 1 else
                 f"{k} walk-forward validation periods: the pooled test decides (random effects, HKSJ at the Holm "
                 "level; `mde_floor` is what no number of seeds beats)." if k > 1 else
                 "One validation period: every verdict is conditional on it (`data.folds` runs more).")
    lines.append("A `keep wired` / `harmful` stays final only where the untouched test segment agrees (one-sided at "
                 "alpha / m), else it reads `not confirmed on held-out data`; the test segment chooses nothing else "
                 "(docs/analysis.md \"The held-out confirmation\").")
    cols = ["gem", "verdict", "folds", "fold_effects", "pooled_effect", "pooled_ci_low", "pooled_ci_high", "pooled_df",
            "tau2", "i2", "mde", "mde_floor", "test_effect", "test_ci_low", "test_ci_high", "held_out"]
    per_period = ("fold_", "pooled", "tau", "i2", "mde")
    if k > 1 or h > 1:  # the per-fold string of verdicts.csv is the table below
        cols.remove("fold_effects")
    lines += ["", markdown_table(v, cols if k > 1 or h > 1 else [c for c in cols if not c.startswith(per_period)])]
    lines += _fold_table(folds)
    skill = v["skill"].dropna().astype(str) if "skill" in v.columns else pd.Series(dtype=str)
    if len(skill) and skill.iloc[0]:
        lines += ["", f"**Skill in context:** {skill.iloc[0]}."]
    return lines


def _window_words(settings: dict[str, Any]) -> str:
    """The verdict metric's epoch window, in words, from the analysis settings."""
    from tune_gems.analysis.rules.settings import Thresholds

    return Thresholds.of_settings(settings).window_text()


LEAD_COLUMNS = ("gem", "verdict", "decided_by", "decided_effect", "decided_ci_low", "decided_ci_high",
                "decided_ci_level", "decided_p_adjusted", "mde", "test_effect", "held_out", "family_size")
"""The numbers a user decides by, which verdicts.csv, the terminal and report.md lead with: the
word, the estimate, interval and Holm p of the test that decided it, that rule's MDE, the held-out
effect and finding, the family's size; the per-seed and per-fold detail follows."""

SEEDS_ALONE = {"seed_verdict": "seeds: verdict", "effect": "seeds: effect", "ci_low": "seeds: ci_low",
               "ci_high": "seeds: ci_high", "p_adjusted": "seeds: Holm p"}
"""The seed rule's own columns as report.md's tables head them, after the deciding test's."""
REPORT_VERDICT_COLUMNS = (*LEAD_COLUMNS, "n_seeds", "tied_share", *SEEDS_ALONE.values())
"""The report's verdict summary; the full evidence is verdicts.csv."""


def lead_verdict_columns(v: pd.DataFrame) -> pd.DataFrame:
    """verdicts.csv with LEAD_COLUMNS first, every other column after in its order."""
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
    lines.append("Settings: " + ", ".join(f"`{k}={v}`" for k,
                                          v in settings.items()) + ". How to read this report: `docs/analysis.md`.")
    lines += ["", *lead] if (lead := lead_section(images)) else []  # plots to read first (render/figures.py)
    lines += ["", "## Experiments read", ""]
    rows = []
    for label, path in zip(exp.labels, exp.paths):
        o = out[out["experiment"] == label]["outcome"].value_counts()
        studies = [k for k in exp.studies if k == label or k.startswith(f"{label}/")]
        rows.append({"experiment": label, "folder": str(path), "trials": int(o.sum()), "ok": int(o.get("ok", 0)),
                     "failed": int(o.get("failed", 0)), "diverged": int(o.get("diverged", 0)),
                     "optuna study": ", ".join(studies) or "none"})
    lines.append(markdown_table(pd.DataFrame(rows)))

    v = result.verdicts
    lines += ["", "## Verdicts", ""]
    lines.append(  # the rule in full: docs/analysis.md "Verdicts"
        "Designed comparisons only (members that differ in one contrast alone, paired by seed), the validation alpha "
        f"Sharpe averaged over {_window_words(settings)}, ties left out; Holm over the design's family (`family_size`). Each "
        "row leads with the word and the estimate, interval and Holm p of the test that decided it (`decided_by`: the "
        "pooled test over periods or histories, the seeds with one history's market noise, or the held-out test "
        "segment that withheld a discovery; none for `insufficient data`), that rule's MDE and the held-out effect; "
        "the seed rule's own numbers follow under `seeds:`. How each stage decides: `docs/analysis.md`."
    )
    for note in getattr(result, "notes", []):
        lines += ["", f"Note: {note}."]
    lines += ["", markdown_table(v.rename(columns=SEEDS_ALONE), list(REPORT_VERDICT_COLUMNS)), "",
              "Every column of the evidence (seed verdict, design, interval level, market-noise interval, TOST p, "
              "seeds needed, test effect, measured excess, redundancy) is in `verdicts.csv`.", ""]
    lines.extend(f"- {verdict_line(r)}\n  - {long_reason(r)}" for _, r in v.iterrows())
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


FACTOR_REPORT_COLUMNS = ("kind", "factor", "contrast", "verdict", "reading", "decided_by", "decided_effect",
                         "decided_ci_low", "decided_ci_high", "decided_p_adjusted", "mde", "mde_floor", "n_seeds",
                         "tied_share", "seeds: effect", "seeds: ci_low", "seeds: ci_high", "seeds: Holm p")
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
             markdown_table(judged.rename(columns=SEEDS_ALONE), list(FACTOR_REPORT_COLUMNS))]
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
