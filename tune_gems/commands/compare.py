"""`tune-gems compare A B`: two experiments (sweep, train or confirmation folders) side by side,
each analysed on its own, with the keys their specs differ in. Writes nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tune_gems.contracts.errors import DataError
from tune_gems.contracts.paths import check_input_path
from tune_gems.contracts.result_files import CONFIG_FILE, SPEC_FILE, TRIALS_FILE

VERDICT_COLUMNS = ("verdict", "seeds", "decided_by", "effect", "ci_low", "ci_high")
"""Each gem's final word and decided estimate and interval, as each side's analysis states them."""
SHARPE_COLUMNS = ("n_members", "val_sharpe_mean", "val_sharpe_std", "test_sharpe_mean")
RUN_ONLY_KEYS = ("name", "storage", "description")
"""Spec keys that name where a run went, not what it did: left out of the differences."""


@dataclass
class Comparison:
    labels: tuple[str, str]
    differences: list[tuple[str, Any, Any]]
    verdicts: pd.DataFrame
    sharpe: pd.DataFrame
    headlines: tuple[str, str]


def _resolved(tree: Any, is_spec: bool) -> dict[str, Any]:
    """The tree with its defaults filled in (as stored where it no longer validates)."""
    from tune_gems.config.load import build_config

    if not isinstance(tree, dict):
        return {}
    try:
        if not is_spec:
            return {"config": build_config(dict(tree)).to_dict()}
        from tune_gems.sweep.spec import SweepSpec
        from tune_gems.sweep.spec_load import import_spec_plugins

        import_spec_plugins(tree, SPEC_FILE)
        spec = SweepSpec.model_validate(tree)
        return {**spec.model_dump(mode="json"), "config": spec.base_config().to_dict()}
    except Exception:  # noqa: BLE001 - an unresolvable tree is compared as stored
        return tree if is_spec else {"config": tree}


def run_settings(folder: Path) -> dict[str, Any]:
    """A run's settings as dotted spec keys, defaults filled in: spec.yaml, config.yaml, or a trials table."""
    from tune_gems.config.dotted import flatten
    from tune_gems.config.yaml_io import safe_load_yaml

    for name, is_spec in ((SPEC_FILE, True), (CONFIG_FILE, False)):
        path = folder / name
        if path.is_file():
            try:
                tree = safe_load_yaml(path.read_text())
            except Exception as err:  # noqa: BLE001 - a broken file is the user's, named here
                raise DataError(f"{path}: not a readable YAML file ({type(err).__name__})") from None
            return flatten(_resolved(tree, is_spec))
    if (folder / TRIALS_FILE).is_file():
        return trial_settings(folder / TRIALS_FILE)
    return {}


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        v = v.item()
    return None if isinstance(v, float) and math.isnan(v) else v


def trial_settings(path: Path) -> dict[str, Any]:
    """`config.<key>` per config column of a trials table: the shared value, else the values joined."""
    from tune_gems.analysis.pairs.pairing import config_columns
    from tune_gems.config.dotted import flatten
    from tune_gems.config.load import load_config

    try:
        trials = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises many types for a broken file
        raise DataError(f"{path}: not a readable parquet file ({type(err).__name__})") from None
    top = [k for k in flatten(load_config(None).to_dict()) if "." not in k and k in trials.columns]  # seed, device, ...
    out: dict[str, Any] = {}
    for col in [*top, *config_columns(trials)]:
        distinct = list({repr(v): v for v in map(_plain, trials[col])}.values())
        out[f"config.{col}"] = distinct[0] if len(distinct) == 1 else " | ".join(map(str, distinct))
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, A's value, B's value) per key set differently; beside a train run only `config.` keys."""
    keys = set(a) | set(b)
    if not all(any(k.split(".")[0] != "config" for k in side) for side in (a, b)):
        keys = {k for k in keys if k.startswith("config.")}
    out = []
    for key in sorted(keys):
        if key.split(".")[0] in RUN_ONLY_KEYS:
            continue
        if a.get(key) != b.get(key):
            out.append((key, a.get(key), b.get(key)))
    return out


def _side_by_side(left: pd.DataFrame, right: pd.DataFrame, key: str, cols: tuple[str, ...], labels: tuple[str, str]) -> pd.DataFrame:
    parts = []
    for df, label in zip((left, right), labels):
        have = [c for c in cols if c in df.columns]
        parts.append(df[[key, *have]].rename(columns={c: f"{c} [{label}]" for c in have}).set_index(key))
    order = list(dict.fromkeys([*left[key], *right[key]]))  # each analysis's own order (gems: the registry's)
    return parts[0].join(parts[1], how="outer").loc[order].reset_index()


def decided(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per gem: its word and decided estimate and interval, read from the verdict table."""
    from tune_gems.analysis.render.plot_tables import final_verdict_table

    return final_verdict_table(verdicts).rename(columns={"contrast": "gem"})


def compare(a: str | Path, b: str | Path, **settings: Any) -> Comparison:
    from tune_gems.stats.baseline_headline import baseline_comparison
    from tune_gems.analysis.analyze import analyze
    from tune_gems.stats.baseline_headline import baseline_headline

    a, b = Path(a), Path(b)
    for side in (a, b):
        check_input_path(side, "compare", DataError)
    if a.expanduser().resolve() == b.expanduser().resolve():
        raise DataError(f"compare: {a} and {b} are the same folder; compare two different runs (analyze gives one alone)")
    labels = (a.name or str(a), b.name or str(b))
    labels = labels if labels[0] != labels[1] else ("A", "B")
    results = [analyze(p, **settings) for p in (a, b)]  # each on its own: nothing pooled
    return Comparison(
        labels=labels,
        differences=differences(run_settings(a), run_settings(b)),
        verdicts=_side_by_side(*(decided(r.verdicts) for r in results), "gem", VERDICT_COLUMNS, labels),
        sharpe=_side_by_side(results[0].sharpe_variance, results[1].sharpe_variance, "config_label", SHARPE_COLUMNS, labels),
        headlines=tuple(baseline_headline(baseline_comparison(r.experiment)) for r in results),  # type: ignore[arg-type]
    )


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3g}"
    return "-" if v is None else str(v)


def _text_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)"
    rows = [list(map(str, df.columns)), *([_cell(v) for v in r] for r in df.itertuples(index=False))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_comparison(c: Comparison) -> str:
    la, lb = c.labels
    diff = [f"  {k}: {la}={_cell(va)}  {lb}={_cell(vb)}" for k, va, vb in c.differences] or ["  (none: the same settings)"]
    lines = [f"compare {la} vs {lb} (each analysed on its own)", "", f"settings that differ ({len(c.differences)}):", *diff, ""]
    for label, headline in zip(c.labels, c.headlines):
        lines.append(f"{label}: {headline or 'no baselines table'}")
    lines += ["", "verdicts:", _text_table(c.verdicts), "", "Sharpe per configuration (final epoch):", _text_table(c.sharpe)]
    return "\n".join(lines)
