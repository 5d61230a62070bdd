"""The whole analysis: compute every table (`analyze`) and write them out (`run_analysis`).

`run_analysis` writes into a temporary folder next to the destination and renames it into
place at the end, so a failure never leaves half-written results, and it refuses to replace a
non-empty folder unless told to (`OutputExistsError`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from tune_gems.analysis import defaults, plots
from tune_gems.analysis.importance import param_importances
from tune_gems.analysis.load import Experiment, load_experiment
from tune_gems.analysis.magnitudes import gem_magnitudes, gem_trajectories
from tune_gems.analysis.report import render_report
from tune_gems.analysis.variance import final_members, sharpe_variance, trial_outcomes
from tune_gems.analysis.verdicts import gem_verdicts
from tune_gems.errors import OutputExistsError

DEFAULT_OUT = "analysis"
CSV_FILES = {
    "sharpe_variance": "sharpe_variance.csv",
    "gem_magnitudes": "gem_magnitudes.csv",
    "gem_trajectories": "gem_trajectories.csv",
    "verdicts": "verdicts.csv",
    "importances": "importances.csv",
    "trial_outcomes": "trial_outcomes.csv",
}
REPORT_FILE = "report.md"


@dataclass
class AnalysisResult:
    """Every table of one analysis, as DataFrames, plus where they were written (if they were)."""

    experiment: Experiment
    trial_outcomes: pd.DataFrame
    sharpe_variance: pd.DataFrame
    gem_magnitudes: pd.DataFrame
    gem_trajectories: pd.DataFrame
    verdicts: pd.DataFrame
    importances: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    out_dir: Path | None = None
    files: list[str] = field(default_factory=list)


def analyze(
    experiment: Experiment | str | Path | Iterable[str | Path],
    *,
    rel_threshold: float = defaults.REL_THRESHOLD,
    confidence: float = defaults.CONFIDENCE,
    n_boot: int = defaults.N_BOOT,
    min_members: int = defaults.MIN_MEMBERS,
    statistic: str = defaults.STATISTIC,
    seed: int = defaults.SEED,
) -> AnalysisResult:
    """Compute every table from an `Experiment` (or folders to load); writes nothing."""
    exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    t, h, m = exp.trials, exp.history, exp.members
    boot = dict(n_boot=n_boot, confidence=confidence, seed=seed)
    settings = dict(rel_threshold=rel_threshold, confidence=confidence, n_boot=n_boot,
                    min_members=min_members, statistic=statistic, seed=seed)
    return AnalysisResult(
        experiment=exp,
        trial_outcomes=trial_outcomes(t, m),
        sharpe_variance=sharpe_variance(m, t, **boot),
        gem_magnitudes=gem_magnitudes(h, t, m),
        gem_trajectories=gem_trajectories(h, t, m),
        verdicts=gem_verdicts(t, h, m, rel_threshold=rel_threshold, min_members=min_members,
                              statistic=statistic, **boot),
        importances=param_importances(exp.studies),
        settings=settings,
    )


def default_out_dir(paths: str | Path | Iterable[str | Path]) -> Path:
    """`<first experiment folder>/analysis`."""
    first = paths if isinstance(paths, (str, Path)) else next(iter(paths))
    return Path(first) / DEFAULT_OUT


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputExistsError(f"{out}: folder exists and is not empty; refusing to overwrite it")


def write_result(result: AnalysisResult, out_dir: str | Path, *, overwrite: bool = False,
                 plot: bool = True) -> AnalysisResult:
    """Write the CSVs, PNGs and report.md of `result` into `out_dir` (all or nothing)."""
    out = Path(out_dir)
    _check_out(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; give it a normal folder's mode
    try:
        files = []
        for attr, name in CSV_FILES.items():
            getattr(result, attr).to_csv(tmp / name, index=False)
            files.append(name)
        images: dict[str, str] = {}
        if plot:
            final = final_members(result.experiment.members, result.experiment.trials)
            figures = {
                ("Sharpe distributions", plots.SHARPE_PNG): plots.sharpe_distributions(final[final["included"]]),
                ("Gem magnitudes", plots.MAGNITUDES_PNG): plots.gem_magnitude_curves(
                    result.gem_trajectories, result.settings.get("rel_threshold", defaults.REL_THRESHOLD)),
                ("Parameter importances", plots.IMPORTANCES_PNG): plots.importance_bars(result.importances),
            }
            for (title, name), fig in figures.items():
                if plots.save(fig, tmp / name):
                    images[title] = name
                    files.append(name)
        (tmp / REPORT_FILE).write_text(render_report(result, images, result.settings), encoding="utf-8")
        files.append(REPORT_FILE)
        _check_out(out, overwrite)  # re-check: something may have appeared meanwhile
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result.out_dir = out
    result.files = files
    return result


def run_analysis(
    paths: str | Path | Iterable[str | Path],
    out_dir: str | Path | None = None,
    *,
    overwrite: bool = False,
    plot: bool = True,
    rel_threshold: float = defaults.REL_THRESHOLD,
    confidence: float = defaults.CONFIDENCE,
    n_boot: int = defaults.N_BOOT,
    min_members: int = defaults.MIN_MEMBERS,
    statistic: str = defaults.STATISTIC,
    seed: int = defaults.SEED,
) -> AnalysisResult:
    """Load the experiment folder(s), analyse, write everything into `out_dir`; return the tables.

    `out_dir` defaults to `<first folder>/analysis`. A non-empty `out_dir` raises
    `OutputExistsError` unless `overwrite=True` (checked before any work). Bad input folders
    raise `DataError` before anything is written.
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths)
    _check_out(out, overwrite)
    result = analyze(paths, rel_threshold=rel_threshold, confidence=confidence, n_boot=n_boot,
                     min_members=min_members, statistic=statistic, seed=seed)
    return write_result(result, out, overwrite=overwrite, plot=plot)
