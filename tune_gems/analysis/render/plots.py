"""Every PNG of the analysis, one function per figure, on its own Agg canvas (never pyplot: no backend
switch in a notebook). Each data artist's `gid` names the table row it draws, so a test reads a
figure back; forest plots draw the verdicts' own intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Polygon
from matplotlib.ticker import MaxNLocator

from tune_gems.analysis import defaults
from tune_gems.analysis.rules.settings import INSUFFICIENT
from tune_gems.analysis.verdicts.readings import INSUFFICIENT_BY
from tune_gems.contracts.config_label import ARM_SUFFIX, short_labels
from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST, GemEntry

FOREST_PNG = "gem_effects.png"
SHARPE_PNG = "sharpe_distributions.png"
MAGNITUDES_PNG = "gem_magnitudes.png"
IMPORTANCES_PNG = "importances.png"
_MODE_STYLE = {"measure": ("tab:blue", "-"), "wire": ("tab:red", "--")}


def new_figure(w: float, h: float) -> Figure:
    """A figure on its own Agg canvas (never pyplot: no backend switch in a notebook)."""
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def legend_below(fig: Figure, handles: list, fontsize: float = 7, columns: int = 6) -> None:
    """One legend under the panels, read row by row (matplotlib fills a legend column by column)."""
    cols = min(len(handles), columns)
    rows = -(-len(handles) // cols) if cols else 0
    order = [handles[r * cols + c] for c in range(cols) for r in range(rows) if r * cols + c < len(handles)]
    fig.legend(handles=order, loc="outside lower center", ncols=cols, fontsize=fontsize, frameon=False)


def group_labels(final: pd.DataFrame) -> pd.Series:
    """Each member's configuration as the Sharpe tables name it (` | arm <arm>` in a multi-arm trial)."""
    label = final["config_label"].astype(str)
    if "arm" not in final.columns:
        return label
    multi = final.groupby(["experiment", "trial_id"])["arm"].transform("nunique") > 1
    return label.where(~multi, label + ARM_SUFFIX + final["arm"].astype(str))


def sharpe_distributions(final: pd.DataFrame) -> Figure | None:
    """Per configuration each included final member's Sharpe and the median, validation and test, a row
    per period; a seed's members across arms joined by a line (paired: compare lines, not clouds)."""
    if final is None or not len(final):
        return None
    final = final.assign(_group=group_labels(final).to_numpy(), _history=_history_ids(final),
                         fold=final["fold"].fillna(0).astype(int) if "fold" in final.columns else 0)
    names = history_labels(final)
    labels = sorted(final["_group"].unique())
    short = dict(zip(labels, short_labels(labels)))
    periods = sorted(set(zip(final["_history"], final["fold"])))
    n_folds = final["fold"].nunique()
    pos_of = {lab: len(labels) - i for i, lab in enumerate(labels)}  # the first label on top
    fig = new_figure(12, 1.4 + (0.4 * len(labels) + 0.9) * len(periods))
    axes = fig.subplots(len(periods), 2, squeeze=False, sharey=True)
    pair_key = [k for k in ("experiment", "trial_id", "seed_index") if k in final.columns]
    for j, (history, fold) in enumerate(periods):
        f = final[(final["_history"] == history) & (final["fold"] == fold)]
        key = f"{history}/{fold}" if len(names) > 1 else f"{fold}"
        where = period_text(names, history, fold, n_folds)
        for ax, col, title in zip(axes[j], ("val_sharpe", "test_sharpe"), ("validation", "test")):
            if col not in f.columns:
                continue
            v = f[col].astype(float)
            f_ok = f[np.isfinite(v)]
            if len(pair_key) == 3:
                for seed_key, seed in f_ok.groupby(pair_key):
                    if seed["_group"].nunique() > 1:
                        seed = seed.assign(_y=seed["_group"].map(pos_of)).sort_values("_y")
                        (line,) = ax.plot(seed[col].astype(float), seed["_y"], color="grey", lw=0.6, alpha=0.5, zorder=1)
                        line.set_gid(f"seed:{key}:{col}:{':'.join(map(str, seed_key))}")
            for lab in labels:
                d = f_ok.loc[f_ok["_group"] == lab, col].astype(float).to_numpy()
                if not d.size:
                    continue
                pts = ax.scatter(d, np.full(d.size, pos_of[lab]), s=14, alpha=0.7, color="tab:blue", zorder=2)
                pts.set_gid(f"members:{key}:{col}:{lab}")
                ax.plot([np.median(d)] * 2, [pos_of[lab] - 0.3, pos_of[lab] + 0.3], color="black", lw=2, zorder=3)
            ax.set_yticks([pos_of[lab] for lab in labels], [short[lab] for lab in labels], fontsize=8)
            ax.axvline(0.0, color="grey", lw=0.8)
            ax.set_xlabel(f"{title} Sharpe, annualised (final epoch, per member)", fontsize=8)
            ax.set_title(f"{title}, {where}" if where else title, fontsize=9)
    legend_below(fig, [Line2D([], [], color="tab:blue", marker="o", ls="", ms=4, label="member"),
                       Line2D([], [], color="black", lw=2, label="median"),
                       Line2D([], [], color="grey", lw=0.8, label="one seed across its trial's arms (paired)")], fontsize=8)
    fig.suptitle("Sharpe per configuration at the final epoch", fontsize=11)
    return fig


def gem_magnitude_curves(traj: pd.DataFrame, rel_threshold: float = defaults.REL_THRESHOLD,
                         gems: Sequence[GemEntry] = LEGACY_MANIFEST) -> Figure | None:
    """Per gem (`gems`, a column each): its mean value and value / C51 loss over epochs, per mode."""
    if traj is None or not len(traj):
        return None
    fig = new_figure(4.0 * len(gems), 6.5)
    axes = fig.subplots(2, len(gems), squeeze=False)
    for j, gem in enumerate(g.name for g in gems):
        g = traj[traj["gem"] == gem]
        for i, (col, ylabel) in enumerate((("mean", "gem value"), ("rel_mean", "gem / C51 loss"))):
            ax = axes[i, j]
            for mode, gm in g.groupby("mode"):
                color, ls = _MODE_STYLE.get(mode, ("tab:grey", ":"))
                ax.plot(gm["epoch"], gm[col].astype(float), color=color, ls=ls, marker="o", ms=3, label=mode)
            if col == "rel_mean":
                ax.axhline(rel_threshold, color="black", lw=0.8, ls=":", label=f"threshold {rel_threshold:g}")
            vals = g[col].astype(float)
            if len(vals) and (vals > 0).all() and vals.max() > vals.min():
                ax.set_yscale("log")
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(ylabel)
            if i == 0:
                ax.set_title(g["metric"].iloc[0] if len(g) else f"{gem} (no data)")
            if len(g) or col == "rel_mean":
                ax.legend(fontsize=8)
    return fig


IMPORTANCE_FEW_TRIALS = 20
"""Fewer complete trials draw a caveat: an evaluator fitted to a handful can put 0.99 on one by chance."""


def importance_bars(imp: pd.DataFrame, few: int = IMPORTANCE_FEW_TRIALS) -> Figure | None:
    """Parameter importances, a panel per study, the caveat on one of fewer than `few` complete trials."""
    if imp is None or not len(imp):
        return None
    imp = imp[imp["param"].notna()]
    if not len(imp):
        return None
    studies = list(dict.fromkeys(imp["study"]))
    n_rows = max(len(imp[imp["study"] == s]) for s in studies)
    fig = new_figure(6.0 * len(studies), 1.6 + 0.4 * n_rows)
    axes = np.atleast_1d(fig.subplots(1, len(studies)))
    for ax, s in zip(axes, studies):
        d = imp[imp["study"] == s].sort_values("importance")
        bars = ax.barh(d["param"].astype(str), d["importance"].astype(float), color="tab:green", label="importance")
        for bar, param in zip(bars.patches, d["param"].astype(str)):
            bar.set_gid(f"importance:{s}:{param}")
        n = int(d["n_complete"].max()) if "n_complete" in d.columns and d["n_complete"].notna().any() else 0
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("importance (Optuna's default evaluator; sums to 1 per study)")
        ax.set_title(f"{s}: {n} complete trial(s)", fontsize=10)
        if n < few:
            ax.text(0.98, 0.04, f"caveat: only {n} complete trial(s) (fewer than {few}):\nimportances this few "
                    "trials give are unstable", transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
                    color="tab:red", bbox=dict(facecolor="white", edgecolor="tab:red", alpha=0.9), gid="caveat")
        ax.legend(fontsize=7, loc="upper right")
    return fig


HELD_OUT_OFFSET = 0.25  # how far below its contrast's row the held-out re-estimate is drawn


def _interval(ax, lo: float, hi: float, y: float, span: float, color: str, gid: str, lw: float,
              label: str | None = None) -> None:
    """An interval at height y clipped to +-span, an arrow at an unbounded end."""
    (line,) = ax.plot([float(np.clip(lo, -span, span)), float(np.clip(hi, -span, span))], [y, y], color=color, lw=lw,
                      label=label)
    line.set_gid(gid)
    for v in (lo, hi):
        if not np.isfinite(v):
            edge = float(np.clip(v, -span, span))
            ax.annotate("", xy=(edge, y), xytext=(edge * 0.9, y), arrowprops=dict(arrowstyle="->", color=color))


def _final_label(r: pd.Series) -> str:
    """A row's label: the contrast and its word, then which test decided it (and what is missing)."""
    if not np.isfinite(r["effect"]):
        how = f"{r['decided_by']}: no estimate"
    elif pd.isna(r["ci_low"]) or pd.isna(r["ci_high"]):
        how = str(r["decided_by"]).removeprefix(INSUFFICIENT_BY) if r["verdict"] == INSUFFICIENT else (
            f"{r['decided_by']}, no interval")
    else:
        how = r["decided_by"]
    return f"{r['contrast']}: {r['verdict']}\n({how})"


def final_verdicts(table: pd.DataFrame) -> Figure | None:
    """The decisive picture: per contrast its word, deciding test, estimate and interval, and the
    held-out re-estimate below; a word without an interval is a hollow marker."""
    if table is None or not len(table):
        return None
    vals = table[["effect", "ci_low", "ci_high", "held_out_effect", "held_out_ci_low", "held_out_ci_high"]].to_numpy(float)
    rope = float(table["rope"].iloc[0]) if np.isfinite(table["rope"].iloc[0]) else 0.0
    span = _span(vals.ravel(), rope)
    fig = new_figure(8.5, 1.8 + 0.75 * len(table))
    ax = fig.subplots()
    ax.axvspan(-rope, rope, color="tab:green", alpha=0.12, label=f"ROPE +-{rope:g}")
    ax.axvline(0.0, color="black", lw=0.8)
    for i, (_, r) in enumerate(table.iterrows()):
        y = len(table) - 1 - i
        color = "tab:blue" if r["kind"] == "gem" else "tab:grey"
        if np.isfinite(r["effect"]):
            bounded = pd.notna(r["ci_low"]) and pd.notna(r["ci_high"])
            if bounded:
                _interval(ax, r["ci_low"], r["ci_high"], y, span, color, f"decided:{r['contrast']}", 2.5)
            (pt,) = ax.plot([_clip(r["effect"], span)], [y], "o", color=color if bounded else "tab:grey", ms=6,
                            mfc=None if bounded else "white")
            pt.set_gid(f"decided_effect:{r['contrast']}" if bounded else f"insufficient:{r['contrast']}")
        if np.isfinite(r["held_out_effect"]):
            yh = y - HELD_OUT_OFFSET
            if pd.notna(r["held_out_ci_low"]) and pd.notna(r["held_out_ci_high"]):
                _interval(ax, r["held_out_ci_low"], r["held_out_ci_high"], yh, span, "tab:orange",
                          f"held_out:{r['contrast']}", 1.2)
            (pt,) = ax.plot([_clip(r["held_out_effect"], span)], [yh], "D", color="tab:orange", ms=4, mfc="white")
            pt.set_gid(f"held_out_effect:{r['contrast']}")
    ax.set_yticks(range(len(table)), [_final_label(r) for _, r in table.iloc[::-1].iterrows()], fontsize=8)
    ax.set_xlim(-span, span)
    ax.set_ylim(-0.7, len(table) - 0.3)
    metrics = [m for m in table["metric"] if m]
    ax.set_xlabel(f"wired - measured: {metric_axis(metrics[0] if metrics else defaults.METRIC)}; each interval at its "
                  "own level (family-wise)", fontsize=8)
    none = "" if np.isfinite(table["effect"].to_numpy(float)).any() else (
        " (no contrast has an estimate: no designed comparison, or every pair tied)")
    ax.set_title("Final verdicts: each contrast's word and the interval that decided it\n(the held-out test "
                 "segment's re-estimate below it: shown, never decided on)" + none, fontsize=10)
    handles = [Patch(color="tab:green", alpha=0.12, label=f"ROPE +-{rope:g}"),
               Line2D([], [], color="tab:blue", lw=2.5, marker="o", label="the estimate and interval that decided"),
               Line2D([], [], color="tab:orange", lw=1.2, marker="D", mfc="white", label="held-out test segment")]
    if (table["effect"].notna() & table["ci_low"].isna()).any():
        handles.append(Line2D([], [], color="tab:grey", marker="o", mfc="white", ls="",
                              label="insufficient data: no interval"))
    if (table["kind"] != "gem").any():
        handles.append(Line2D([], [], color="tab:grey", lw=2.5, marker="o", label="null arm (placebo, A/A)"))
    ax.legend(handles=handles, fontsize=8, loc="best")
    return fig


def save(fig: Figure | None, path: Path) -> bool:
    """Write `fig` as PNG; False (nothing written) when there was nothing to draw."""
    if fig is None:
        return False
    fig.savefig(path, format="png")
    return True

# --- the seeds themselves: seed pairs and learning curves -------------------------------------


MIN_WIDTH = 6.5  # inches: a one-panel figure still has room for its title
MAX_CURVE_PANELS = 12  # learning-curve panels at most (trials x periods), the best trials first
CURVE_COLUMNS = 4  # learning-curve panels a row: a trial's periods wrap onto rows
FOLD_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
FOLD_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
METRIC_WORDS = {"val_alpha_sharpe": "validation alpha Sharpe", "val_sharpe": "validation Sharpe",
                "test_alpha_sharpe": "test alpha Sharpe", "test_sharpe": "test Sharpe"}


def metric_axis(column: str, last_k: int | None = None, sep: str = " ") -> str:
    """An axis label with units (Sharpe ratios annualised); `sep` "\n" puts them on their own line."""
    words = METRIC_WORDS.get(column, column)
    window = f", mean of the last {last_k} epochs" if last_k else ""
    return f"{words}{sep}(annualised{window})"


def fold_color(fold: int) -> str:
    return FOLD_COLORS[int(fold) % len(FOLD_COLORS)]


def history_color(position: int, histories: int) -> tuple:
    """The colour of the history at `position` of `histories` (tab10, tab20 beyond ten)."""
    cmap = colormaps["tab10" if histories <= 10 else "tab20"]
    return cmap(position % cmap.N)


def _history_ids(table: pd.DataFrame) -> pd.Series:
    """Each row's price history (0 in a table without the column: one history)."""
    return table["history"].fillna(0).astype(int) if "history" in table.columns else pd.Series(0, index=table.index)


def history_labels(table: pd.DataFrame) -> dict[int, str]:
    """Each history id of a table with its name (`history_name`, else `history <id>`)."""
    ids = _history_ids(table)
    names = table["history_name"].astype(str) if "history_name" in table.columns else "history " + ids.astype(str)
    return dict(sorted(zip(ids, names)))


def period_text(names: dict[int, str], history: int, fold: int, folds: int) -> str:
    """A validation period as the reasons name it (`sp500 fold 1`; `sp500`, `fold 1` or '' with fewer)."""
    return " ".join([names[history]] * (len(names) > 1) + [f"fold {fold}"] * (folds > 1))


def paired_seeds(pairs: pd.DataFrame, last_k: int | None = None) -> Figure | None:
    """Per gem a line per seed pair from measured to wired, coloured by fold (or history); a diverged
    member at the panel's bottom edge (the worst outcome)."""
    if pairs is None or not len(pairs):
        return None
    pairs = pairs.reset_index(drop=True)
    gems = list(dict.fromkeys(pairs["gem"]))
    names, hist = history_labels(pairs), _history_ids(pairs)
    slot = {h: i for i, h in enumerate(names)}
    folds = sorted(pairs["fold"].astype(int).unique())
    several = len(names) > 1
    fig = new_figure(max(MIN_WIDTH, 3.6 * len(gems) + 1.0), 5.2)
    axes = np.atleast_1d(fig.subplots(1, len(gems), squeeze=False)[0])
    for ax, gem in zip(axes, gems):
        g = pairs[pairs["gem"] == gem]
        finite = np.concatenate([g["measured"].to_numpy(float), g["wired"].to_numpy(float)])
        finite = finite[np.isfinite(finite)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
        pad = 0.08 * (hi - lo) if hi > lo else 0.5
        floor = lo - pad  # where a diverged member is drawn
        for i, r in g.iterrows():
            y = [floor if r["measured_diverged"] else r["measured"], floor if r["wired_diverged"] else r["wired"]]
            dashed = bool(r["measured_diverged"] or r["wired_diverged"])
            color = history_color(slot[hist[i]], len(names)) if several else fold_color(r["fold"])
            marker = FOLD_MARKERS[folds.index(int(r["fold"])) % len(FOLD_MARKERS)] if several else "o"
            (line,) = ax.plot([0, 1], y, color=color, alpha=0.6, lw=1.2, marker=marker, ms=3, ls="--" if dashed else "-")
            line.set_gid(f"pair:{gem}:{i}")
        ax.set_xlim(-0.25, 1.25)
        ax.set_ylim(floor - pad, hi + pad)
        ax.set_xticks([0, 1], ["measured", "wired"])
        ax.set_xlabel(f"{gem}'s mode (all else alike)", fontsize=9)
        ax.set_ylabel(metric_axis(str(g["metric"].iloc[0]), last_k, sep="\n"), fontsize=9)
        tied = float(g["tied"].mean())
        ax.set_title(f"{gem}: {len(g)} seed pair(s), {100 * tied:.0f}% tie{_overlap_note(g, floor)}", fontsize=9)
    if several:
        handles = [Line2D([], [], color=history_color(i, len(names)), lw=1.5, label=name)
                   for i, name in enumerate(names.values())]
        handles += [Line2D([], [], color="black", marker=FOLD_MARKERS[k % len(FOLD_MARKERS)], ls="", ms=4,
                           label=f"fold {f}") for k, f in enumerate(folds)] if len(folds) > 1 else []
    else:
        handles = [Line2D([], [], color=fold_color(f), marker="o", ms=3, label=f"fold {f}") for f in folds]
    if (pairs["measured_diverged"] | pairs["wired_diverged"]).any():
        handles.append(Line2D([], [], color="grey", ls="--", label="a side diverged (drawn at the bottom)"))
    legend_below(fig, handles, columns=5)
    fig.suptitle("Each seed pair of the verdict's comparison, measured to wired", fontsize=11)
    return fig


def _overlap_note(g: pd.DataFrame, floor: float) -> str:
    """Why fewer lines show than there are pairs: equal pairs (ties, members that never traded) overlap."""
    ends = zip(np.where(g["measured_diverged"], floor, g["measured"].astype(float)),
               np.where(g["wired_diverged"], floor, g["wired"].astype(float)))
    distinct = len({(round(float(a), 9), round(float(b), 9)) for a, b in ends})
    if distinct == len(g):
        return ""
    return f"\n{distinct} distinct line(s): equal pairs overlap"


FLAT_AT_ZERO = "flat at 0"  # what a learning-curve panel whose every median is exactly 0 says of itself


def _flat_reason(panel: pd.DataFrame) -> str:
    """Why a panel whose every median is exactly 0 looks empty ('' when it is not flat)."""
    med = panel["median"].to_numpy(float)
    if not len(panel) or not np.isfinite(med).all() or (med != 0).any():
        return ""
    idle = panel["never_traded"].to_numpy(float) if "never_traded" in panel.columns else np.array([np.nan])
    if np.isfinite(idle).any():
        return (f"{FLAT_AT_ZERO}: the median seed never traded\n({100 * float(np.nanmean(idle)):.0f}% of seed-epochs "
                "with turnover 0)")
    return f"{FLAT_AT_ZERO}: the median seed's Sharpe is exactly 0\nat every epoch (no position held)"


def learning_curves(curves: pd.DataFrame, titles: dict[tuple[str, str], str] | None = None) -> Figure | None:
    """Per trial (in `titles`' order) and period, each arm's median over seeds per epoch with the IQR
    band; one legend where every trial has the same arms."""
    if curves is None or not len(curves):
        return None
    names, hist = history_labels(curves), _history_ids(curves)
    periods = sorted(set(zip(hist.tolist(), curves["fold"].astype(int).tolist())))
    have = list(dict.fromkeys(zip(curves["experiment"], curves["trial_id"])))
    ranked = [k for k in (titles or {}) if k in have] + [k for k in have if k not in (titles or {})]
    n = max(1, MAX_CURVE_PANELS // len(periods))  # the best trials, every period of each
    trials, left_out = ranked[:n], max(0, len(ranked) - n)
    several = len(names) > 1
    n_folds = len({f for _, f in periods})
    cols = min(len(periods), CURVE_COLUMNS)
    per_trial = -(-len(periods) // cols)  # rows of panels per trial
    fig = new_figure(4.0 * cols + 0.6, 2.7 * per_trial * len(trials) + 1.2)
    axes = fig.subplots(per_trial * len(trials), cols, squeeze=False)
    column = str(curves["metric"].iloc[0])
    flat, legends = 0, []
    for i, (exp, trial) in enumerate(trials):
        t = curves[(curves["experiment"] == exp) & (curves["trial_id"] == trial)]
        arms = list(dict.fromkeys(t["arm"]))
        labels = t.drop_duplicates("arm").set_index("arm")["config_label"].reindex(arms).astype(str).tolist()
        shown = dict(zip(arms, short_labels(labels) if len(arms) > 1 else labels))
        legends.append([f"{arm}: {shown[arm]}" if shown[arm] != arm else arm for arm in arms])
        for j in range(len(periods), per_trial * cols):
            axes[i * per_trial + j // cols, j % cols].remove()
        for j, (h, fold) in enumerate(periods):
            ax = axes[i * per_trial + j // cols, j % cols]
            period = t[(t["fold"] == fold) & (hist[t.index] == h)]
            for k, arm in enumerate(arms):
                c = period[period["arm"] == arm].sort_values("epoch")
                if not len(c):
                    continue
                color = f"C{k % 10}"
                gid = f"{trial}:{arm}:{h}/{fold}" if several else f"{trial}:{arm}:{fold}"
                (line,) = ax.plot(c["epoch"], c["median"], color=color, marker="o", ms=3, label=legends[-1][k])
                line.set_gid(f"curve:{gid}")
                band = ax.fill_between(c["epoch"].to_numpy(float), c["q25"].to_numpy(float), c["q75"].to_numpy(float),
                                       color=color, alpha=0.12, lw=0)
                band.set_gid(f"band:{gid}")
            ax.axhline(0.0, color="grey", lw=0.6)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch", fontsize=8)
            ax.set_ylabel(metric_axis(column, sep="\n"), fontsize=7)
            why = _flat_reason(period)
            flat += bool(why)
            where = period_text(names, h, fold, n_folds)
            ax.set_title("\n".join(x for x in ((titles or {}).get((exp, trial), f"trial {trial}"), where, why) if x),
                         fontsize=8)
    one_legend = all(x == legends[0] for x in legends)
    for i in range(len(trials)) if not one_legend else ():
        axes[i * per_trial, 0].legend(fontsize=6, loc="best")
    if one_legend:
        legend_below(fig, axes[0, 0].get_legend_handles_labels()[0], columns=max(cols, 2))  # as wide as the panels
    more = f"; {left_out} more trial(s) in learning_curves.csv" if left_out else ""
    flat_note = f"\n{flat} of {len(trials) * len(periods)} panel(s) {FLAT_AT_ZERO} (see each panel's title)" if flat else ""
    fig.suptitle(f"Learning curves per arm: median over seeds, band = interquartile range{more}{flat_note}", fontsize=11)
    return fig

# --- rliable-style profiles of a gem's comparison ---------------------------------------------


SIDE_STYLE = {"measured": ("tab:blue", "-"), "wired": ("tab:red", "--")}


def performance_profiles(profile: pd.DataFrame, metric: str = "val_alpha_sharpe", last_k: int | None = None) -> Figure | None:
    """Per gem: the share of seeds above each tau, measured and wired (above everywhere: better at every tau)."""
    if profile is None or not len(profile):
        return None
    gems = list(dict.fromkeys(profile["gem"]))
    fig = new_figure(max(MIN_WIDTH, 3.8 * len(gems) + 0.8), 4.0)
    axes = np.atleast_1d(fig.subplots(1, len(gems), squeeze=False)[0])
    for ax, gem in zip(axes, gems):
        g = profile[profile["gem"] == gem]
        for side, s in g.groupby("side", sort=False):
            color, ls = SIDE_STYLE.get(side, ("tab:grey", ":"))
            (line,) = ax.step(s["tau"], s["share_above"], where="post", color=color, ls=ls,
                              label=f"{side} ({int(s['n'].iloc[0])} seeds)")
            line.set_gid(f"profile:{gem}:{side}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("tau: " + metric_axis(metric, last_k, sep="\n"), fontsize=8)
        ax.set_ylabel("share of seeds with value > tau")
        ax.set_title(f"{gem}: performance profile", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Performance profiles of each gem's comparison (a diverged seed is below every tau)", fontsize=10)
    return fig


IMPROVEMENT_BARS = (("probability", "all members (rliable: unpaired)", "tab:orange"),
                    ("paired_probability", "seed pairs (paired: what the design compares)", "tab:red"))


def improvement_bars(imp: pd.DataFrame) -> Figure | None:
    """Per gem: P(wired > measured) as bars from 0.5, over all members (rliable) and over the seed pairs."""
    if imp is None or not len(imp):
        return None
    fig = new_figure(8.0, 1.8 + 0.8 * len(imp))
    ax = fig.subplots()
    y = np.arange(len(imp))[::-1].astype(float)
    height = 0.36
    for k, (col, what, color) in enumerate(IMPROVEMENT_BARS):
        for yi, (_, r) in zip(y, imp.iterrows()):
            p = float(r[col])
            at = yi + (0.5 - k) * height
            (bar,) = ax.barh([at], [p - 0.5], left=0.5, height=height * 0.9, color=color,
                             label=what if yi == y[0] else None).patches
            bar.set_gid(f"poi:{col}:{r['gem']}")
            note = f"{p:.2f}" + (f" ({int(r['n_pairs'])} pairs, {100 * float(r['tied_share']):.0f}% tie)" if k else "")
            ax.annotate(note, xy=(p, at), xytext=(4 if p >= 0.5 else -4, 0), textcoords="offset points",
                        ha="left" if p >= 0.5 else "right", va="center", fontsize=8)
    ax.axvline(0.5, color="black", lw=0.8, label="0.5: no difference")
    ax.set_yticks(y, imp["gem"].astype(str).tolist())
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("probability of improvement P(wired > measured), ties half, averaged over the validation periods")
    ax.set_title("Probability of improvement (a description of the seed pairs; the verdict is the test)", fontsize=10)
    legend_below(fig, ax.get_legend_handles_labels()[0], fontsize=8)
    return fig

# --- walk-forward folds: the per-fold forest plot ---------------------------------------------


DIAMOND_HALF_HEIGHT = 0.3


def _span(values: np.ndarray, rope: float) -> float:
    fin = values[np.isfinite(values)]
    return max(float(np.abs(fin).max()) if fin.size else 1.0, rope) * 1.25 or 1.0


def _clip(v: float, span: float) -> float:
    return float(np.clip(v, -span, span))


def _row_label(r: pd.Series, where: str) -> str:
    dates = f" ({r['start']}..{r['end']})" if "start" in r and "end" in r and pd.notna(r["start"]) and r["start"] else ""
    ties = f", {100 * float(r['tied_share']):.0f}% tie" if "tied_share" in r and pd.notna(r["tied_share"]) else ""
    seeds = int(r["pairs"]) if "pairs" in r and pd.notna(r["pairs"]) else int(r["seeds"])
    empty = "" if pd.notna(r["effect"]) or ties.endswith("100% tie") else ", no estimate"
    return f"{where}{dates}: {seeds} seeds{ties}{empty}"


def _draw_pooled(ax, p: pd.Series, gem: str, span: float) -> str:
    """The pooled estimate at y = 0: a diamond over its interval, or a hollow one without; its label."""
    lo, e, hi = (float(p[c]) for c in ("ci_low", "effect", "ci_high"))
    if not np.isfinite(e):
        return "pooled: no estimate"
    if np.isnan(lo) or np.isnan(hi):  # too few periods, or a variance whose interval cannot be estimated
        (mark,) = ax.plot([_clip(e, span)], [0], "D", color="tab:red", ms=7, mfc="white", label="pooled (no interval)")
        mark.set_gid(f"pooled:{gem}")
        return f"pooled: {p['verdict']}, no interval" if isinstance(p.get("verdict"), str) else "pooled (no interval)"
    lo, e, hi = (_clip(v, span) for v in (lo, e, hi))
    h = DIAMOND_HALF_HEIGHT
    diamond = Polygon([(lo, 0), (e, h), (hi, 0), (e, -h)], closed=True, color="tab:red", alpha=0.8,
                      label="pooled: the verdict's interval")
    diamond.set_gid(f"pooled:{gem}")
    ax.add_patch(diamond)
    return "pooled"


FOREST_COLUMNS = 2  # gems a row of the per-fold forest plot


def fold_forest(per_fold: pd.DataFrame, pooled: pd.DataFrame, *, rope: float, metric: str = "val_alpha_sharpe",
                title: str = "wired - measured") -> Figure | None:
    """Per gem a row per fold (of each history) with effect and interval, the pooled diamond below and the ROPE band."""
    if per_fold is None or not len(per_fold):
        return None
    pooled = pooled if pooled is not None else pd.DataFrame(columns=["gem", "effect", "ci_low", "ci_high"])
    per_fold = per_fold.assign(gem=per_fold["gem"] if "gem" in per_fold.columns else "", _history=_history_ids(per_fold))
    pooled = pooled.assign(gem=pooled["gem"] if "gem" in pooled.columns else "").set_index("gem")
    names, n_folds = history_labels(per_fold), per_fold["fold"].nunique()
    gems = list(dict.fromkeys(per_fold["gem"]))
    vals = np.concatenate([per_fold[["effect", "ci_low", "ci_high"]].to_numpy(float).ravel(),
                           pooled[["effect", "ci_low", "ci_high"]].to_numpy(float).ravel()])
    span = _span(vals, rope)
    n_rows = int(per_fold.groupby("gem").size().max()) + 1
    cols = min(len(gems), FOREST_COLUMNS)
    grid = -(-len(gems) // cols)
    fig = new_figure(8.5 * cols, (1.4 + 0.4 * n_rows) * grid + 0.4)
    axes = fig.subplots(grid, cols, squeeze=False).ravel()
    for ax in axes[len(gems):]:
        ax.remove()
    for ax, gem in zip(axes, gems):
        rows = per_fold[per_fold["gem"] == gem].sort_values(["_history", "fold"])
        ax.axvspan(-rope, rope, color="tab:green", alpha=0.12, label=f"ROPE +-{rope:g}")
        ax.axvline(0.0, color="black", lw=0.8)
        labels = []
        for y, (_, r) in zip(range(len(rows), 0, -1), rows.iterrows()):
            lo, hi, e = (float(r[c]) for c in ("ci_low", "ci_high", "effect"))
            where = period_text(names, r["_history"], int(r["fold"]), n_folds) or f"fold {int(r['fold'])}"
            period = f"{r['_history']}/{int(r['fold'])}" if len(names) > 1 else f"{int(r['fold'])}"
            _interval(ax, lo, hi, y, span, "tab:blue", f"fold:{gem}:{period}", 2,
                      "effect per period, interval at its level" if y == len(rows) else None)
            ax.plot([_clip(e, span)], [y], "s", color="tab:blue", ms=5)
            labels.append((y, _row_label(r, where)))
        if gem in pooled.index:
            labels.append((0, _draw_pooled(ax, pooled.loc[gem], gem, span)))
        ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize=8)
        ax.set_xlim(-span, span)
        ax.set_ylim(-0.7, len(rows) + 0.7)
        ax.set_xlabel(f"{title}: {metric_axis(metric)}", fontsize=8)
        what = "effect per history and fold" if len(names) > 1 else "effect per walk-forward fold"
        ax.set_title(f"{gem}: {what}" if gem else what, fontsize=10)
    legend_below(fig, axes[0].get_legend_handles_labels()[0])
    return fig

# --- the confirmation's shrinkage -------------------------------------------------------------


SHRINKAGE_COLUMNS = ("gem", "discovery_gain", "confirmation_gain")


SHRINKAGE_OFFSET = 0.15
"""The discovery marker above its row, the confirmation's below: equal gains hide neither."""
FRESH_SEEDS_AND_PATHS = "fresh seeds and paths"
FRESH_SEEDS = "fresh seeds, the search's price history"


def confirmation_shrinkage(table: pd.DataFrame, fresh: str = FRESH_SEEDS_AND_PATHS) -> Figure | None:
    """Discovery and confirmation gain per confirmed gem (both finite); `fresh`: what it re-ran on."""
    if table is None or not len(table) or any(c not in table.columns for c in SHRINKAGE_COLUMNS):
        return None
    t = table[np.isfinite(table["discovery_gain"].astype(float)) & np.isfinite(table["confirmation_gain"].astype(float))]
    if not len(t):
        return None
    fig = new_figure(7.5, 1.8 + 0.6 * len(t))
    ax = fig.subplots()
    ys = np.arange(len(t))[::-1]
    for y, (_, r) in zip(ys, t.iterrows()):
        d, c = float(r["discovery_gain"]), float(r["confirmation_gain"])
        up, down = y + SHRINKAGE_OFFSET, y - SHRINKAGE_OFFSET
        ax.annotate("", xy=(c, down), xytext=(d, up), arrowprops=dict(arrowstyle="->", color="grey"))
        (pd_,) = ax.plot([d], [up], "o", color="tab:orange", ms=7)
        pd_.set_gid(f"discovery:{r['gem']}")
        (pc,) = ax.plot([c], [down], "D", color="tab:green", ms=7)
        pc.set_gid(f"confirmation:{r['gem']}")
        ax.annotate(f"shrinkage {d - c:+.3g}", xy=(max(d, c), y), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(ys, t["gem"].astype(str).tolist())
    lo = float(min(t["discovery_gain"].min(), t["confirmation_gain"].min(), 0.0))
    hi = float(max(t["discovery_gain"].max(), t["confirmation_gain"].max(), 0.0))
    pad = 0.35 * (hi - lo) if hi > lo else 0.5
    ax.set_xlim(lo - 0.1 * pad, hi + pad)
    ax.set_ylim(-0.7, len(t) - 0.3)
    ax.set_xlabel("verdict gain: pseudo-median of the per-seed paired gain, validation alpha Sharpe (annualised)")
    ax.set_title(f"Discovery (the search's chosen trial) vs confirmation ({fresh}), per gem", fontsize=10)
    ax.legend(handles=[Line2D([], [], color="tab:orange", marker="o", ls="", label="discovery gain (selected)"),
                       Line2D([], [], color="tab:green", marker="D", ls="", label="confirmation gain")],
              fontsize=8, loc="lower right")
    return fig
