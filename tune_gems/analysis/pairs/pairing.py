"""Designed comparisons (docs/analysis.md "Effects only from designs"): a gem's effect only between
members identical apart from its mode at the same seed; anything else is confounded and gets no
verdict. The unit is the member seed; units sharing a synthetic market path are merged."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from tune_gems.stats.inference import worst_outcome_difference
from tune_gems.analysis.read.labels import trial_gem_modes
from tune_gems.analysis.read.outcomes import KEY, trial_outcomes
from tune_gems.contracts.errors import DataError

DEFAULT_ARM = "default"
CELL = ["experiment", "trial_id", "arm", "history", "fold", "seed_index"]
"""A member of a comparison: a (history, fold) is its own context, so differences pair only
within one fold of one history, and a unit's are averaged over them (seed-paired across them)."""
ARM_KEY = ["experiment", "trial_id", "arm"]
USED_OUTCOMES = ("ok", "diverged")
"""Trials whose members enter the comparisons: diverged ones count (divergence is an outcome);
failed or unfinished trials do not (their members have no comparable result)."""


def _norm(v) -> str:
    """One canonical text per config value, so equal settings compare equal across files."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return repr(float(v))
    if isinstance(v, (float, np.floating)):
        return "null" if math.isnan(v) else repr(float(v))
    s = str(v).strip()
    low = s.lower()
    if low in ("true", "false"):
        return low
    if low in ("nan", "none", "null", ""):
        return "null"
    try:
        return repr(float(s))
    except ValueError:
        return low


def config_columns(trials: pd.DataFrame) -> list[str]:
    """Columns of trials.parquet that are config leaves: dotted names, except the arms spec."""
    return [c for c in trials.columns if "." in c and not c.startswith("arms.")]


def parse_arm_name(name: str) -> dict[str, str] | None:
    """Settings encoded in a factorial arm name (`gems.g10.mode=wire,model.spectral_norm=true`)."""
    parts = [p for p in str(name).split(",") if p]
    out = {}
    for p in parts:
        if "=" not in p:
            return None
        k, v = p.split("=", 1)
        if "." not in k:
            return None
        out[k.strip()] = v.strip()
    return out or None


def _index_column(m: pd.DataFrame, column: str, what: str) -> pd.Series:
    """Integer column `column` of the members (0 where the column is absent), or a DataError."""
    x = pd.to_numeric(m[column], errors="coerce") if column in m.columns else pd.Series(0, index=m.index)
    if x.isna().any() or not np.all(np.mod(x.astype(float), 1) == 0) or (x < 0).any():
        raise DataError(f"members: column {column} must hold integers >= 0 ({what})")
    return x.astype(int)


def with_arm_columns(members: pd.DataFrame) -> pd.DataFrame:
    """Members with `arm`, `seed_index`, `fold` and `history`, defaulted where older results lack them."""
    m = members.copy()
    m["fold"] = _index_column(m, "fold", "the member's walk-forward fold")
    m["history"] = _index_column(m, "history", "the member's price history")
    if "arm" not in m.columns:
        m["arm"] = DEFAULT_ARM
    m["arm"] = m["arm"].astype(object).where(m["arm"].notna(), DEFAULT_ARM).astype(str)
    if "seed_index" not in m.columns:
        m["seed_index"] = m["member"]
    idx = pd.to_numeric(m["seed_index"], errors="coerce").where(m["seed_index"].notna(), m["member"])
    if idx.isna().any() or not np.all(np.mod(idx.astype(float), 1) == 0):
        raise DataError("members: column seed_index must hold integers (the member's seed index within its arm)")
    m["seed_index"] = idx.astype(int)
    return m


@dataclass
class Cells:
    """The members that enter comparisons: `table` one row per cell with its config keys as text, `long`
    the member-epoch rows; `shared_path`: some unit's market path is shared by every seed."""

    table: pd.DataFrame
    long: pd.DataFrame
    keys: list[str]
    shared_path: bool
    notes: list[str] = field(default_factory=list)


def _arm_settings(trials: pd.DataFrame, members: pd.DataFrame, arms: pd.DataFrame | None) -> tuple[pd.DataFrame, list[str]]:
    """One row per (experiment, trial_id, arm) with every config key (canonical text)."""
    notes: list[str] = []
    cols = config_columns(trials)
    base = trials[KEY + cols].copy()
    modes = trial_gem_modes(trials)  # older results: the gem modes from the config label
    for g in [c for c in modes.columns if c not in KEY]:
        col = f"gems.{g}.mode"
        if col not in base.columns:
            base = base.merge(modes[KEY + [g]].rename(columns={g: col}), on=KEY, how="left")
    present = members[ARM_KEY].drop_duplicates()
    rows = present.merge(base, on=KEY, how="left")
    if arms is not None and len(arms):
        a = arms.copy()
        if "trial_id" not in a.columns:  # a train run's arms.csv alone
            a["trial_id"] = None
        a["trial_id"] = a["trial_id"].astype(object).where(a["trial_id"].notna(), None)
        a["arm"] = a["arm"].astype(str)
        # a train run's table has no trial_id: it applies to the run's one trial
        single = a["trial_id"].isna()
        if single.any():
            tids = trials.groupby("experiment")["trial_id"].first()
            a.loc[single, "trial_id"] = a.loc[single, "experiment"].map(tids)
        a["trial_id"] = a["trial_id"].astype(str)
        arm_cols = [c for c in a.columns if "." in c]
        merged = rows.merge(a[ARM_KEY + arm_cols], on=ARM_KEY, how="left", suffixes=("", "__arm"))
        for c in arm_cols:
            if c + "__arm" in merged.columns:
                merged[c] = merged[c + "__arm"].where(merged[c + "__arm"].notna(), merged[c])
                merged = merged.drop(columns=c + "__arm")
        rows = merged
        missing = rows.merge(a[ARM_KEY].assign(_in=1), on=ARM_KEY, how="left")["_in"].isna()
        unknown = rows[missing.to_numpy() & (rows["arm"] != DEFAULT_ARM).to_numpy()]
    else:
        unknown = rows[rows["arm"] != DEFAULT_ARM]
    # no arms table row: a factorial arm's name carries its settings
    rows = rows.astype(object)
    drop = []
    for i in unknown.index:
        parsed = parse_arm_name(rows.at[i, "arm"])
        if parsed is None:
            drop.append(i)
            continue
        for k, v in parsed.items():
            rows.at[i, k] = v
    if drop:
        notes.append(f"{len(drop)} arm(s) without settings (no arms table row, name not key=value): left out")
        rows = rows.drop(index=drop)
    keys = sorted(c for c in rows.columns if c not in ARM_KEY)
    for c in keys:
        rows[c] = rows[c].map(_norm)
    return rows.reset_index(drop=True), keys, notes


class _Union:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def build_cells(trials: pd.DataFrame, members: pd.DataFrame, arms: pd.DataFrame | None = None) -> Cells:
    """Members of ok or diverged trials as comparison cells, with their configs and units."""
    members = with_arm_columns(members)
    out = trial_outcomes(trials, members)
    used = out.loc[out["outcome"].isin(USED_OUTCOMES), KEY + ["outcome", "final_epoch"]]
    m = members.merge(used, on=KEY, how="inner")
    settings, keys, notes = _arm_settings(trials, m, arms)
    cells = m.groupby(CELL, sort=True).agg(seed=("seed", "first"), final_epoch=("final_epoch", "first"),
                                           outcome=("outcome", "first")).reset_index()
    cells = cells.merge(settings, on=ARM_KEY, how="inner")
    cells["final_epoch"] = cells["final_epoch"].astype(int)
    cells["cell"] = np.arange(len(cells))
    # units: the member seed; merged across seeds that share a per-seed market path
    uf = _Union()
    per_seed = cells.get("data.synthetic.paths", pd.Series("'shared'", index=cells.index)).astype(str).str.contains("per_seed")
    source = cells.get("data.source", pd.Series("synthetic", index=cells.index)).astype(str)
    synth = source.str.contains("synthetic")
    path_seed = cells.get("data.synthetic.seed", pd.Series("0", index=cells.index)).astype(str)
    for i in range(len(cells)):
        u = ("seed", str(cells["seed"].iat[i]))
        uf.find(u)
        if per_seed.iat[i] and synth.iat[i]:
            try:
                path = int(float(path_seed.iat[i])) + int(cells["seed_index"].iat[i])
            except ValueError:
                continue
            uf.union(u, ("path", path))
    cells["unit"] = [str(uf.find(("seed", str(s)))) for s in cells["seed"]]
    cells["own_path"] = (per_seed & synth).to_numpy()  # the cell's seed index has its own market path
    shared_path = bool(len(cells)) and not bool((per_seed & synth).all())
    long = m.merge(cells[CELL + ["cell"]], on=CELL, how="inner")
    return Cells(table=cells, long=long, keys=keys, shared_path=shared_path, notes=notes)


def window_values(long: pd.DataFrame, column: str, end_epoch: pd.Series, k) -> pd.DataFrame:
    """Per cell, the mean of `column` over epochs (E - k, E] and whether it diverged by E or has no
    finite value there; `k` an int or a function of the end epochs."""
    e = long["cell"].map(end_epoch)
    ep = long["epoch"].astype(int)
    if callable(k):
        k = pd.Series(k(e.to_numpy(int)), index=e.index)
    vals = long[column].astype(float) if column in long.columns else pd.Series(np.nan, index=long.index)
    div_flag = long["diverged"].astype(bool) if "diverged" in long.columns else pd.Series(False, index=long.index)
    win = (ep > e - k) & (ep <= e)
    early = ep <= e
    g_win = pd.DataFrame({"cell": long["cell"], "v": vals.where(win)})
    mean = g_win.groupby("cell")["v"].mean()
    all_finite = pd.DataFrame({"cell": long["cell"][win], "f": np.isfinite(vals[win])}).groupby("cell")["f"].all()
    div = pd.DataFrame({"cell": long["cell"], "d": div_flag & early}).groupby("cell")["d"].any()
    out = pd.DataFrame(index=end_epoch.index)
    out["value"] = mean.reindex(out.index)
    fin = all_finite.reindex(out.index).fillna(False).astype(bool)
    out["diverged"] = div.reindex(out.index).fillna(False).astype(bool) | ~fin | ~np.isfinite(out["value"])
    return out


@dataclass
class Paired:
    """Per-unit paired differences of one factor (hi minus lo level) and how they were made."""

    diffs: np.ndarray  # one per unit (may be +-inf: divergence; 0: both diverged)
    units: list[str]
    n_pairs: int
    n_contexts: int
    n_trials: int
    cross_trial: bool
    hi_diverged: int
    lo_diverged: int
    hi_cells: int
    lo_cells: int
    note: str = ""
    fix: str = ""
    hi_values: np.ndarray | None = None  # per unit, the hi side's mean value (finite cells)
    lo_values: np.ndarray | None = None
    pairs: pd.DataFrame | None = None
    """The member pairs behind the differences, one row per (hi cell, lo cell) at a common seed
    in one context: context, seed, end_epoch (the window's last epoch), cell_hi, cell_lo. The
    market-noise interval (`market_evidence`) resamples their per-step returns."""
    n_seeds: int = 0
    """Distinct member seeds behind the pairs (more than the units when seeds share a path)."""
    per_seed_paths: bool = False
    """Every paired member trained on its seed index's own synthetic path."""
    n_histories: int = 1
    """Price histories the pairs span (each its own market; seed-paired across them)."""
    layout: Layout | None = None
    """Which cells pair, and how (`pair_layout`): from it the same pairs give the differences of
    another column or window (`revalue`) or of one fold (`by_fold`) without pairing again."""

    @property
    def n(self) -> int:
        return int(self.diffs.size)

    def units_text(self) -> str:
        """What the units are, in words: seeds with their own market paths, seeds merged because
        they share a path, or seeds on one shared market."""
        if self.per_seed_paths and self.n_seeds == self.n:
            return f"{self.n} seed(s), each on its own market path"
        if self.per_seed_paths:
            return f"{self.n} market path(s) ({self.n_seeds} member seeds; seeds on one path count once)"
        if self.n_histories > 1:
            return f"{self.n} member seed(s), each paired in {self.n_histories} price histories"
        return f"{self.n} member seed(s) on one market history (inference conditional on it)"

    def design(self) -> str:
        if not self.n:
            return "none"
        where = "across trials (identical configs, the same member seeds)" if self.cross_trial else "arms within trials"
        return (f"{where}: {self.n_contexts} context(s) in {self.n_trials} trial(s), {self.n_pairs} seed pair(s); "
                f"units: {self.units_text()}")


def _unit_mean(values: np.ndarray) -> float:
    """Mean of one unit's pair differences; +inf with -inf is a tie (0)."""
    with np.errstate(invalid="ignore"):
        m = float(np.mean(values))
    return 0.0 if math.isnan(m) else m


@dataclass(frozen=True)
class Layout:
    """How one factor's comparison pairs (the structure behind a `Paired`): the paired cells, one row
    per (hi, lo) cell pair, and the window and metric read."""

    cells: pd.DataFrame
    cell_pairs: pd.DataFrame
    factor: str
    hi: str
    lo: str
    column: str
    k: object
    worst: bool
    hi_cells: int
    lo_cells: int


def paired(cells: Cells, factor: str, hi: str, lo: str, *, column: str, k, ignore: tuple[str, ...] = (),
           select: Callable[[pd.DataFrame], pd.Series] | None = None, worst: bool = True) -> Paired:
    """Per-unit differences of `column`'s window mean between cells at `factor` hi and lo, otherwise identical apart
    from `ignore`, paired by seed. With `worst` a diverged member is the worst outcome; otherwise it is left out."""
    t = cells.table
    if select is not None:
        t = t[select(t)]
    t = t[t[factor].isin([hi, lo])] if factor in t.columns else t.iloc[0:0]
    hi_cells = int((t[factor] == hi).sum()) if len(t) else 0
    lo_cells = int((t[factor] == lo).sum()) if len(t) else 0
    empty = Paired(np.zeros(0), [], 0, 0, 0, False, 0, 0, hi_cells, lo_cells)
    if not hi_cells or not lo_cells:
        return empty
    ctx_keys = [c for c in cells.keys if c != factor and c not in ignore]
    t = t.copy()
    t["context"] = (t["experiment"].astype(str) + "||" + t["history"].astype(str) + "||" + t["fold"].astype(str)
                    + "||" + t[ctx_keys].astype(str).agg("|".join, axis=1))
    # a context pairs only where both levels are present at a common seed
    both = t.groupby(["context", "seed"])[factor].nunique()
    good = both[both == 2].reset_index()[["context", "seed"]]
    if not len(good):
        empty.fix = _suggest_fix(t, factor, hi, lo, ctx_keys)
        empty.note = "confounded"
        return empty
    t = t.merge(good, on=["context", "seed"], how="inner")
    t["end_epoch"] = t.groupby("context")["final_epoch"].transform("min").to_numpy()  # a common epoch per context
    at = t[["context", "seed", "end_epoch", "cell", factor]]
    cell_pairs = at[at[factor] == hi].drop(columns=factor).merge(
        at[at[factor] == lo].drop(columns=factor), on=["context", "seed", "end_epoch"], suffixes=("_hi", "_lo"))
    return _values(cells, Layout(t, cell_pairs.reset_index(drop=True), factor, hi, lo, column, k, worst, hi_cells,
                                 lo_cells))


def revalue(pr: Paired, cells: Cells, column: str, k) -> Paired:
    """The same pairs' differences of another `column` over another window `k` (e.g. the test
    segment's metric at the final epoch): nothing is paired again."""
    if pr.layout is None:
        return pr
    lay = pr.layout
    return _values(cells, replace(lay, column=column, k=k))


def _split(pr: Paired, cells: Cells, by: list[str]) -> list[tuple[tuple[int, ...], Paired]]:
    """The same pairs restricted to each value of `by` (a (history, fold) is its own context, so not paired again)."""
    if pr.layout is None or not pr.n:
        return []
    lay = pr.layout
    out = []
    for key, sub in lay.cells.groupby(by, sort=True):
        keep = lay.cell_pairs["cell_hi"].isin(sub["cell"])
        part = _values(cells, replace(lay, cells=sub, cell_pairs=lay.cell_pairs[keep].reset_index(drop=True)))
        if part.n:
            out.append((tuple(int(x) for x in (key if isinstance(key, tuple) else (key,))), part))
    return out


def by_fold(pr: Paired, cells: Cells) -> list[tuple[int, Paired]]:
    """(fold, the same pairs' differences inside that fold) for every fold the pairs span, on one
    price history (several: `by_history_fold`)."""
    return [(key[0], part) for key, part in _split(pr, cells, ["fold"])]


def by_history_fold(pr: Paired, cells: Cells) -> list[tuple[tuple[int, int], Paired]]:
    """((history, fold), the same pairs' differences inside that fold of that history) for every
    (history, fold) the pairs span: the units the nested rule over histories pools (`rules.histories`)."""
    return [((key[0], key[1]), part) for key, part in _split(pr, cells, ["history", "fold"])]


def history_count(cells: Cells) -> int:
    """How many price histories the compared members span (1 without a `history` column)."""
    t = cells.table
    return int(t["history"].nunique()) if "history" in t.columns and len(t) else 1


def _values(cells: Cells, lay: Layout) -> Paired:
    """The per-unit differences of `lay.column` over the pairs of a layout (`paired`'s second half)."""
    t, factor, hi, lo = lay.cells, lay.factor, lay.hi, lay.lo
    vals = window_values(cells.long[cells.long["cell"].isin(t["cell"])], lay.column,
                         pd.Series(t["end_epoch"].to_numpy(), index=t["cell"].to_numpy()), lay.k)
    t = t.join(vals, on="cell")
    agg = t.groupby(["context", "seed", factor]).agg(
        value=("value", "mean"), diverged=("diverged", "any"), unit=("unit", "first"))
    w = agg.xs(hi, level=factor)
    m = agg.xs(lo, level=factor)
    j = w.add_suffix("_hi").join(m.add_suffix("_lo"), how="inner")
    hi_v, lo_v = j["value_hi"].to_numpy(float), j["value_lo"].to_numpy(float)
    hi_div, lo_div = j["diverged_hi"].to_numpy(bool), j["diverged_lo"].to_numpy(bool)
    d = worst_outcome_difference(hi_v, lo_v, hi_div, lo_div) if lay.worst else np.where(hi_div | lo_div, np.nan, hi_v - lo_v)
    j = j.assign(d=d)
    if not lay.worst:
        j = j[np.isfinite(j["d"])]
    units = j.groupby("unit_hi")
    diffs = np.array([_unit_mean(g["d"].to_numpy()) for _, g in units])
    hv = np.array([np.nanmean(np.where(g["diverged_hi"], np.nan, g["value_hi"])) if (~g["diverged_hi"]).any() else np.nan
                   for _, g in units])
    lv = np.array([np.nanmean(np.where(g["diverged_lo"], np.nan, g["value_lo"])) if (~g["diverged_lo"]).any() else np.nan
                   for _, g in units])
    trial_of = t.set_index("cell")[["experiment", "trial_id"]].astype(str).agg("|".join, axis=1)
    cell_pairs = lay.cell_pairs
    # across trials only where a pair's two members are in different trials (a context may hold
    # several trials, e.g. every trial's control arm, whose pairs are each within its trial)
    cross = bool((cell_pairs["cell_hi"].map(trial_of) != cell_pairs["cell_lo"].map(trial_of)).any())
    own = cells.table.get("own_path")
    per_seed_paths = bool(own is not None and own[cells.table["cell"].isin(t["cell"])].all())
    return Paired(diffs=diffs, units=[str(u) for u, _ in units], n_pairs=int(len(j)),
                  n_contexts=int(j.index.get_level_values("context").nunique()),
                  n_trials=int(t[["experiment", "trial_id"]].drop_duplicates().shape[0]), cross_trial=cross,
                  hi_diverged=int(j["diverged_hi"].sum()), lo_diverged=int(j["diverged_lo"].sum()),
                  hi_cells=lay.hi_cells, lo_cells=lay.lo_cells, hi_values=hv, lo_values=lv, pairs=cell_pairs,
                  n_seeds=int(j.index.get_level_values("seed").nunique()), per_seed_paths=per_seed_paths,
                  n_histories=int(t["history"].nunique()), layout=lay)


def _suggest_fix(t: pd.DataFrame, factor: str, hi: str, lo: str, ctx_keys: list[str]) -> str:
    """What would make the comparison possible: the closest hi/lo arms and what else differs."""
    arms = t.drop_duplicates(["context"] + [factor] + ["experiment", "trial_id", "arm"])
    his, los = arms[arms[factor] == hi], arms[arms[factor] == lo]
    best = None
    for _, a in his.iterrows():
        for _, b in los.iterrows():
            diff = [c for c in ctx_keys if a[c] != b[c]]
            if best is None or len(diff) < len(best[2]):
                best = (a, b, diff)
    if best is None:
        return ""
    a, b, diff = best
    if not diff and a["experiment"] == b["experiment"]:
        return (f"trials {a['trial_id']} and {b['trial_id']} share a configuration but no member seed: give them "
                f"the same `seed`, or run both as arms of one trial")
    if not diff:
        return "the only matching configurations are in different experiment folders: run them in one sweep"
    shown = ", ".join(f"{c} ({a[c]} vs {b[c]})" for c in diff[:4]) + (" ..." if len(diff) > 4 else "")
    return (f"arm {a['arm']!r} of trial {a['trial_id']} ({factor}={hi}) differs from the closest {lo} arm "
            f"({b['arm']!r} of trial {b['trial_id']}) also in {shown}: add an arm to trial {a['trial_id']} "
            f"equal to {a['arm']!r} with {factor}={lo}")
