"""The whole analysis: compute every table (`analyze`) and write them out (`run_analysis`), into a
temporary folder published at the end, so a failure never leaves half-written results."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

# the table of contents, in reading order: read -> pair -> decide -> describe -> render
from tune_gems.analysis.read.calendars import validation_calendar
from tune_gems.analysis.read.labels import history_names
from tune_gems.analysis.read.load import Experiment, load_experiment
from tune_gems.analysis.read.outcomes import last_evaluated_epochs, trial_outcomes
from tune_gems.analysis.pairs.pairing import build_cells
from tune_gems.analysis.pairs.excess import add_excess_columns
from tune_gems.analysis.rules.settings import Thresholds
from tune_gems.analysis.verdicts.verdict_market_noise import EvalReturnsLookup
from tune_gems.analysis.verdicts.redundancy import redundancy_table
from tune_gems.analysis.verdicts.gem_verdicts import gem_verdict_tables, placebo_verdicts, verdict_metric
from tune_gems.analysis.verdicts.held_out import skill_context
from tune_gems.analysis.verdicts.factors import factor_table
from tune_gems.analysis.verdicts.family import DesignFamily, Sources
from tune_gems.analysis.verdicts.fold_effects import fold_dates, fold_effects_table
from tune_gems.analysis.verdicts.walk_forward import experiment_overlap, state_uncorrected
from tune_gems.analysis.describe.variance import sharpe_variance, split_arms
from tune_gems.analysis.describe.magnitudes import gem_magnitudes, gem_trajectories
from tune_gems.analysis.describe.importance import param_importances
from tune_gems.analysis.describe.objective import objective_notes
from tune_gems.analysis.describe.history_returns import history_correlations, median_correlations
from tune_gems.analysis.render import plots
from tune_gems.analysis.render.figures import analysis_figures, plot_tables
from tune_gems.analysis.render.report import lead_verdict_columns, render_factor_section, render_report
from tune_gems.contracts.errors import DataError
from tune_gems.contracts.result_files import CONFIG_FILE, SPEC_FILE
from tune_gems.contracts.run_record import check_recorded_run

DEFAULT_OUT = "analysis"
CSV_FILES = {name: f"{name}.csv" for name in (
    "sharpe_variance", "gem_magnitudes", "gem_trajectories", "verdicts", "fold_effects", "factors", "placebo",
    "redundancy", "importances", "trial_outcomes", "history_correlations")}
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
    placebo: pd.DataFrame = field(default_factory=pd.DataFrame)
    redundancy: pd.DataFrame = field(default_factory=pd.DataFrame)
    factors: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Every factor of the design judged with the gems as one family (`factors.factor_table`)."""
    fold_effects: pd.DataFrame = field(default_factory=pd.DataFrame)
    """One row per gem and walk-forward fold: the period rule's per-fold effects beside the
    verdict's pooled estimate (`fold_effects.fold_effects_table`; empty with one fold)."""
    history_correlations: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Each pair of price histories' return correlation per validation window and test segment
    (`describe.history_returns`; empty with one history)."""
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    family: DesignFamily | None = None
    """The design's family the verdicts and factors were decided in (its pairs are what the plots draw)."""
    out_dir: Path | None = None
    files: list[str] = field(default_factory=list)


def check_settings(thresholds: Thresholds | None = None, **settings: Any) -> Thresholds:
    """The checked settings (`Thresholds` with `settings` replacing its fields by name): a
    setting that is NaN, infinite or out of range is refused in one line naming the option."""
    return Thresholds.build(thresholds, **settings)


def analyze(experiment: Experiment | str | Path | Iterable[str | Path], *, thresholds: Thresholds | None = None,
            selection: dict[str, int] | None = None, **settings: Any) -> AnalysisResult:
    """Compute every table from an `Experiment` (or folders to load); writes nothing. `settings` replace
    fields of `thresholds` by name, checked before anything is read. `selection`: per gem the
    configurations a confirmation's search chose among, for selection-adjusted final verdicts."""
    th = check_settings(thresholds, **settings)
    if not isinstance(experiment, Experiment):  # the stored spec/config the analysis reads, verified first
        experiment = experiment if isinstance(experiment, (str, Path)) else list(experiment)
        for folder in [experiment] if isinstance(experiment, (str, Path)) else experiment:
            check_recorded_run(folder, stored=(SPEC_FILE, CONFIG_FILE))
    exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    t, h, m = exp.trials, exp.history, exp.members
    th.check_window(last_evaluated_epochs(t, m), ", ".join(map(str, exp.paths)) or "the experiment")  # a window the runs cannot hold: refused
    arms, gems = exp.arms, list(exp.gems)
    cells = build_cells(t, m, arms)
    excess = add_excess_columns(cells.long, gems)
    red = redundancy_table(cells, gems, thresholds=th, excess=excess)
    lookup = EvalReturnsLookup(exp.paths, exp.labels, t)
    sources = Sources(lookup, selection, experiment_overlap(exp.folds.table),
                      partial(validation_calendar, exp.folds.dates, exp.histories), history_names(exp.histories))
    verdicts, fold_rows, family = gem_verdict_tables(cells, gems, th, m, redundancy=red, sources=sources)
    verdicts = state_uncorrected(verdicts, exp.folds.uncorrected)  # several folds, no layout: said, not dropped
    verdicts["skill"] = skill_context(exp)
    correlations = history_correlations(exp.histories, exp.folds.dates, exp.paths, exp.labels)
    if len(correlations) and "histories" in verdicts.columns:  # beside the calendar part the rule estimated
        for key, value in median_correlations(correlations).items():
            verdicts[key] = pd.Series(value, index=verdicts.index).where(verdicts["histories"] >= 2)
    verdicts = lead_verdict_columns(verdicts)  # the numbers a user decides by first 
    placebo = placebo_verdicts(cells, gems, m, thresholds=th)
    column, metric_note = verdict_metric(m)
    factors = state_uncorrected(factor_table(cells, gems, thresholds=th, column=column, family=family),  # decided once
                                exp.folds.uncorrected)
    notes = list(cells.notes) + ([metric_note] if metric_note else []) + objective_notes(exp.paths, exp.labels, exp.trials)
    return AnalysisResult(
        experiment=exp, trial_outcomes=trial_outcomes(t, m),
        sharpe_variance=sharpe_variance(*reversed(split_arms(t, m)), n_boot=th.n_boot, confidence=th.confidence,
                                        seed=th.seed),
        gem_magnitudes=gem_magnitudes(h, t, m, cells, gems), gem_trajectories=gem_trajectories(h, t, m, cells, gems),
        verdicts=verdicts, importances=param_importances(exp.studies), placebo=placebo, redundancy=red, factors=factors,
        fold_effects=fold_effects_table(fold_rows, verdicts, fold_dates(exp.folds.dates)),
        history_correlations=correlations, settings=th.settings(), notes=notes, family=family)


def default_out_dir(paths: str | Path | Iterable[str | Path]) -> Path:
    """`<first experiment folder>/analysis`."""
    first = paths if isinstance(paths, (str, Path)) else next(iter(paths))
    return Path(first) / DEFAULT_OUT


def check_out(out: str | Path, inputs: list[str | Path], overwrite: bool) -> Path:
    """The checked output folder (see module docstring); writes nothing. The default
    `<first experiment>/analysis` may lie inside that experiment; nothing else may."""
    from tune_gems.contracts.errors import OutputError
    from tune_gems.contracts.outputs import check_output_folder
    from tune_gems.contracts.paths import check_input_path

    check_input_path(out, "--out", OutputError)  # resolved below: a symlink loop is named, not a crash
    inputs = [Path(p) for p in inputs]
    allow = []
    if inputs and Path(out).expanduser().resolve() == default_out_dir(inputs).expanduser().resolve():
        allow = [inputs[0]]
    return check_output_folder(out, kind="analyze", field="--out", inputs=inputs, overwrite=overwrite,
                               allow_inside=allow)


def write_result(result: AnalysisResult, out_dir: str | Path, *, overwrite: bool = False,
                 plot: bool = True) -> AnalysisResult:
    """Write the CSVs, PNGs and report.md of `result` into `out_dir` (all or nothing)."""
    from tune_gems.contracts.outputs import (MARKER_FILES_KEY, clear_stale_temporaries, publish_folder,
                                             temporary_folder, update_marker, write_marker, written_files)

    out = check_out(out_dir, list(result.experiment.paths), overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_temporaries(out, "analyze")  # an analysis killed outright left its temporary folder
    tmp, held = temporary_folder(out)
    try:
        write_marker(tmp, "analyze")
        files = []
        for attr, name in CSV_FILES.items():
            getattr(result, attr).to_csv(tmp / name, index=False)
            files.append(name)
        tables = plot_tables(result)  # what the plots draw, written even without them (render/figures.py)
        for name, table in tables.items():
            table.to_csv(tmp / name, index=False)
            files.append(name)
        images: dict[str, str] = {}
        if plot:
            for (title, name), fig in analysis_figures(result, tables).items():
                if plots.save(fig, tmp / name):
                    images[title] = name
                    files.append(name)
        report = render_report(result, images, result.settings) + render_factor_section(result.factors, result.settings)
        (tmp / REPORT_FILE).write_text(report, encoding="utf-8")
        files.append(REPORT_FILE)
        update_marker(tmp, **{MARKER_FILES_KEY: written_files(tmp)})  # what a later --overwrite may delete
        check_out(out, list(result.experiment.paths), overwrite)  # re-check: something may have appeared
        publish_folder(tmp, out, kind="analyze", overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(held)
    result.out_dir = out
    result.files = files
    return result


def run_analysis(paths: str | Path | Iterable[str | Path], out_dir: str | Path | None = None, *,
                 overwrite: bool = False, plot: bool = True, **settings: Any) -> AnalysisResult:
    """Load, analyse and write into `out_dir` (default `<first folder>/analysis`); return the tables. The output folder,
    settings and inputs are checked before any work; `overwrite` replaces only a folder an analysis wrote."""
    from tune_gems.contracts.paths import check_input_path

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    for p in paths:  # a folder's name becomes the experiment's label: bounded and printable like an output's
        check_input_path(p, "experiment folder", DataError)
    thresholds = check_settings(**settings)
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths)
    check_out(out, paths, overwrite)
    result = analyze(paths, thresholds=thresholds)
    return write_result(result, out, overwrite=overwrite, plot=plot)
