"""Text renderings: markdown tables, the terminal verdict table and `report.md`.

Written by hand (no `tabulate` dependency). Numbers use 4 significant digits; missing values
are left blank in markdown and shown as `-` in the terminal.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd


def _cell(v: Any, digits: int = 4) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return ""
        return f"{v:.{digits}g}"
    try:
        if pd.isna(v):
            return ""
    except (TypeError, ValueError):
        pass
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, columns: Iterable[str] | None = None, digits: int = 4) -> str:
    """A GitHub-markdown table of `df` (selected `columns`, in order); `_None._` if empty."""
    cols = [c for c in (columns or df.columns) if c in df.columns]
    if not len(df) or not cols:
        return "_None._"
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(_cell(r[c], digits) for c in cols) + " |")
    return "\n".join(lines)


def _num(v: Any, fmt: str = ".3g") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if not np.isfinite(f) else format(f, fmt)


def _interval(lo: Any, hi: Any) -> str:
    return "-" if _num(lo) == "-" and _num(hi) == "-" else f"[{_num(lo)}, {_num(hi)}]"


def format_verdict_table(df: pd.DataFrame) -> str:
    """The verdict table for a terminal: one aligned row per gem, then each gem's reason."""
    header = ["gem", "verdict", "measured rel", "n meas", "n wired", "val diff", "CI", "p", "test diff"]
    rows = [header]
    for _, r in df.iterrows():
        rows.append(
            [
                str(r["gem"]),
                str(r["verdict"]),
                _num(r.get("measured_rel_mean")),
                _num(r.get("measured_n"), "g"),
                _num(r.get("wired_n"), "g"),
                _num(r.get("sharpe_diff"), "+.3g"),
                _interval(r.get("ci_low"), r.get("ci_high")),
                _num(r.get("p_value"), ".2g"),
                _num(r.get("test_sharpe_diff"), "+.3g"),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.extend(f"{r['gem']}: {r['verdict']} - {r['reason']}" for _, r in df.iterrows())
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
    out["best range"] = [_interval(a, b) for a, b in zip(sv[f"{prefix}_best_min"], sv[f"{prefix}_best_max"])]
    out["IQM"] = sv[f"{prefix}_iqm"]
    out["IQM CI"] = [_interval(a, b) for a, b in zip(sv[f"{prefix}_iqm_ci_low"], sv[f"{prefix}_iqm_ci_high"])]
    return out


def render_report(result: Any, images: dict[str, str], settings: dict[str, Any]) -> str:
    """`report.md` of an analysis result (see run.AnalysisResult); `images`: title -> file."""
    exp = result.experiment
    out = result.trial_outcomes
    lines = ["# tune-gems analysis", ""]
    lines.append(
        "Settings: " + ", ".join(f"`{k}={v}`" for k, v in settings.items())
        + ". How to read this report: `docs/analysis.md`."
    )
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

    v = result.verdicts
    lines += ["", "## Verdicts", ""]
    lines.append(
        "Validation Sharpe decides; test Sharpe is shown beside and never used (the search never "
        "saw it). `sharpe_diff` = wired minus measured."
    )
    lines += ["", markdown_table(v, ["gem", "verdict", "measured_rel_mean", "measured_n", "wired_n",
                                     "test", "n_pairs", "wired_members", "measured_members",
                                     "sharpe_diff", "ci_low", "ci_high", "p_value",
                                     "test_sharpe_diff", "n_excluded"]), ""]
    lines.extend(f"- **{r['gem']}** ({r['metric']}): **{r['verdict']}**: {r['reason']}" for _, r in v.iterrows())

    excl = out[out["outcome"] != "ok"]
    lines += ["", "## Failed and diverged trials", ""]
    lines.append(
        f"{int((out['outcome'] == 'failed').sum())} failed, {int((out['outcome'] == 'diverged').sum())} "
        f"diverged of {len(out)} trials. Their Sharpe is excluded from every statistic (never "
        "averaged in); they are counted per configuration in the table below."
    )
    if len(excl):
        lines += ["", markdown_table(excl, ["experiment", "trial_id", "config_label", "status", "outcome",
                                           "final_epoch", "reason"])]

    sv = result.sharpe_variance
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
    lines += ["", markdown_table(result.importances)]
    if "Parameter importances" in images:
        lines += ["", f"![Parameter importances]({images['Parameter importances']})"]
    return "\n".join(lines) + "\n"
