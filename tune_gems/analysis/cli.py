"""The analysis's command line: `tune-gems analyze`'s options (`add_arguments`) and the scripts in
`analysis/`, each a thin door (`main(door)`, `DOORS`) that parses, checks and prints; exit status 2
with one line on stderr for bad input, as everywhere in tune-gems."""

from __future__ import annotations

import argparse
import sys

from tune_gems.analysis import defaults
from tune_gems.contracts.errors import ConfigError, TuneGemsError


def _parser(description: str, out: bool) -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(description=description), out)


def add_arguments(p: argparse.ArgumentParser, out: bool = True) -> argparse.ArgumentParser:
    """The analysis options, shared by `tune-gems analyze` and the scripts in analysis/."""
    p.add_argument("experiments", nargs="+", metavar="EXPERIMENT_DIR", help="experiment folder(s) of a sweep")
    if out:
        p.add_argument("--out", default=None, help="output folder (default: <first experiment>/analysis)")
        p.add_argument("--overwrite", action="store_true",
                       help="replace an output folder that an earlier analysis wrote (never anything else)")
        p.add_argument("--no-plots", action="store_true", help="write no PNG files")
        p.add_argument("--calibrate", action="store_true",
                       help="instead of the report: simulate null and planted-effect datasets shaped like "
                            "EXPERIMENT_DIR and print the false keep/harmful rate and the power (writes nothing)")
        p.add_argument("--n-sim", type=int, default=defaults.N_SIM,
                       help=f"simulated datasets per calibration setting (default {defaults.N_SIM}, at least 100)")
        add_verbose(p)
    return add_settings(p)


def add_verbose(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--verbose`, of the commands that print the verdicts: the renderer's `verbose` field."""
    p.add_argument("--verbose", action="store_true",
                   help="print each verdict's full chain of evidence (its why line) under its verdict line (default: "
                        "the verdict line alone; the chain is in verdicts.csv and report.md either way)")
    return p


def add_settings(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The verdict and bootstrap settings (shared with `tune-gems confirm`)."""
    p.add_argument("--alpha", type=float, default=defaults.ALPHA,
                   help=f"family-wise error rate of the verdicts, Holm over gems (default {defaults.ALPHA})")
    p.add_argument("--rope", type=float, default=defaults.ROPE,
                   help=f"equivalence margin of a gem's effect, in Sharpe units (default {defaults.ROPE})")
    p.add_argument("--rel-threshold", type=float, default=defaults.REL_THRESHOLD,
                   help=f"equivalence margin of a gem's excess over its null / C51 loss (default {defaults.REL_THRESHOLD:g})")
    p.add_argument("--last-k", type=int, default=defaults.LAST_K,
                   help=f"average the verdict metric over the last k epochs (default {defaults.LAST_K})")
    p.add_argument("--window", choices=defaults.WINDOWS, default=defaults.WINDOW,
                   help=f"which validation epochs the verdict metric averages: the last k, the last half of the run "
                        f"(at least k), or every epoch from --first-epoch on (default {defaults.WINDOW})")
    p.add_argument("--first-epoch", type=int, default=None,
                   help=f"first epoch of --window from-epoch, at most the last evaluated epoch (default "
                        f"{defaults.FIRST_EPOCH}; refused with another window)")
    p.add_argument("--min-periods", type=int, default=defaults.MIN_PERIODS,
                   help=f"fewest validation periods a pooled verdict decides with (default {defaults.MIN_PERIODS})")
    p.add_argument("--one-sided-keep", action="store_true",
                   help="test keep wired one-sided (effect > 0) at alpha; harmful is then not claimed")
    p.add_argument("--per-contrast-tau", action="store_true",
                   help="estimate the period spread per gem instead of once across the family's gems")
    p.add_argument("--power", type=float, default=defaults.POWER,
                   help=f"power of the stated minimum detectable effect (default {defaults.POWER})")
    p.add_argument("--placebo-weight", type=float, default=defaults.PLACEBO_WEIGHT,
                   help=f"a gem wired at or below this weight is a placebo arm (default {defaults.PLACEBO_WEIGHT:g})")
    p.add_argument("--confidence", type=float, default=defaults.CONFIDENCE,
                   help=f"two-sided confidence of the Sharpe-variance bootstrap intervals (default {defaults.CONFIDENCE})")
    p.add_argument("--n-boot", type=int, default=defaults.N_BOOT,
                   help=f"bootstrap resamples of the Sharpe-variance intervals (default {defaults.N_BOOT})")
    p.add_argument("--seed", type=int, default=defaults.SEED, help="bootstrap / simulation seed (default 0)")
    return p


def analysis_settings(a: argparse.Namespace) -> dict:
    """The analysis settings of parsed arguments (`add_settings`), as keyword arguments: the
    fields of `rules.settings.Thresholds` that `analyze` / `check_settings` build it from."""
    return dict(alpha=a.alpha, rope=a.rope, rel_threshold=a.rel_threshold, last_k=a.last_k, window=a.window,
                first_epoch=a.first_epoch, min_periods=a.min_periods, one_sided_keep=a.one_sided_keep,
                share_tau=not a.per_contrast_tau, power=a.power, placebo_weight=a.placebo_weight,
                confidence=a.confidence, n_boot=a.n_boot, seed=a.seed)


def _run(fn) -> int:
    try:
        fn()
    except TuneGemsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def run_calibration(a: argparse.Namespace) -> None:
    """Print the calibration of the verdict rule for the shape of the experiment(s) in `a`."""
    from tune_gems.analysis.calibrate.calibration import calibration_table, experiment_shapes, format_calibration
    from tune_gems.analysis.analyze import analyze, check_settings
    from tune_gems.analysis.calibrate.walk_forward_calibration import format_period_calibration

    thresholds = check_settings(**analysis_settings(a), n_sim=a.n_sim)  # the one record, built once
    res = analyze(a.experiments, thresholds=thresholds)
    shapes, note = experiment_shapes(res.verdicts, res.experiment.members)
    table = calibration_table(shapes, thresholds=thresholds)
    print(format_calibration(table, shapes, note, alpha=thresholds.alpha))
    print()
    print(format_period_calibration(period_table(res.verdicts, shapes, thresholds), alpha=thresholds.alpha))


def period_table(verdicts, shapes, thresholds):
    """The calibration over periods at the standard fold counts and the experiment's own; with folds a
    gem's spread is one fold's comparison's (`fold_sd_diff`), not the fold-averaged differences'."""
    from dataclasses import replace

    from tune_gems.analysis.calibrate.walk_forward_calibration import period_calibration_table

    own = int(verdicts["folds"].max()) if "folds" in verdicts.columns and verdicts["folds"].notna().any() else 1
    folds = tuple(sorted(set(defaults.CALIBRATION_FOLDS) | {own}))
    per_fold = verdicts.set_index("gem")["fold_sd_diff"] if "fold_sd_diff" in verdicts.columns else {}
    shapes = [replace(s, sd=float(per_fold[s.gem])) if s.gem in per_fold and per_fold[s.gem] > 0 else s for s in shapes]
    return period_calibration_table(shapes, thresholds=thresholds, folds=folds)


def run_report(a: argparse.Namespace) -> None:
    """`tune-gems analyze`: the full analysis (or, with --calibrate, the calibration) for parsed
    arguments; prints the verdicts."""
    if getattr(a, "calibrate", False):
        run_calibration(a)
        return
    from tune_gems.analysis.describe.objective import objective_notes
    from tune_gems.analysis.verdicts.factors import format_factor_table
    from tune_gems.analysis.render.report import format_verdict_table
    from tune_gems.analysis.analyze import run_analysis
    from tune_gems.stats.baseline_headline import baseline_comparison, baseline_headline

    res = run_analysis(a.experiments, a.out, overwrite=a.overwrite, plot=not a.no_plots, **analysis_settings(a))
    headline = baseline_headline(baseline_comparison(res.experiment))
    if headline:
        print(headline + "\n")
    print(format_verdict_table(res.verdicts, res.placebo, res.redundancy, verbose=a.verbose,
                               fold_effects=res.fold_effects))
    factors = format_factor_table(res.factors)
    if factors:
        print("\n" + factors)
    for note in objective_notes(res.experiment.paths, res.experiment.labels, res.experiment.trials):
        print(f"\nnote: {note}")
    print(f"\nwrote {res.out_dir}/report.md")


def _at_least(*checks: tuple[str, int, int]) -> None:
    """Refuse the first (flag, value, lowest) whose value is below its lowest, in one line."""
    for flag, value, lowest in checks:
        if value < lowest:
            raise ConfigError(f"{flag}: must be at least {lowest}, got {value}")


def _simulation_options(p: argparse.ArgumentParser, n_sim_help: str) -> argparse.ArgumentParser:
    """The options every calibration of a stated shape shares: datasets per row, the seed noise's
    distribution and the simulation seed."""
    p.add_argument("--n-sim", type=int, default=defaults.N_SIM, help=f"{n_sim_help} (default {defaults.N_SIM})")
    p.add_argument("--dist", choices=("normal", "t3"), default="normal", help="seed-noise distribution")
    p.add_argument("--seed", type=int, default=defaults.SEED, help=f"simulation seed (default {defaults.SEED})")
    return p


def report_main(argv: list[str] | None = None) -> int:
    """`python analysis/report.py`: the full analysis (CSVs, PNGs, report.md), printing the verdicts."""
    a = _parser("Analyse finished sweep(s): tables, plots, report.md and verdicts.", out=True).parse_args(argv)
    return _run(lambda: run_report(a))


def verdicts_main(argv: list[str] | None = None) -> int:
    """`python analysis/verdicts.py`: the verdict per gem with its evidence (writes nothing)."""
    from tune_gems.analysis.render.report import format_verdict_table
    from tune_gems.analysis.analyze import analyze

    a = add_verbose(_parser("Print the verdict per gem of finished sweep(s).", out=False)).parse_args(argv)

    def go() -> None:
        res = analyze(a.experiments, **analysis_settings(a))
        print(format_verdict_table(res.verdicts, res.placebo, res.redundancy, verbose=a.verbose,
                                   fold_effects=res.fold_effects))

    return _run(go)


def sharpe_variance_main(argv: list[str] | None = None) -> int:
    """`python analysis/sharpe_variance.py`: the Sharpe variance table per configuration (writes nothing)."""
    from tune_gems.analysis.read.load import load_experiment
    from tune_gems.analysis.text import markdown_table
    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.describe.variance import sharpe_variance

    a = _parser("Print Sharpe variance per configuration of finished sweep(s).", out=False).parse_args(argv)

    def go() -> None:
        th = check_settings(**analysis_settings(a))
        e = load_experiment(a.experiments)
        sv = sharpe_variance(e.members, e.trials, n_boot=th.n_boot, confidence=th.confidence, seed=th.seed)
        print(markdown_table(sv))

    return _run(go)


def calibrate_main(argv: list[str] | None = None) -> int:
    """`python analysis/calibrate.py EXPERIMENT_DIR`: the same as `tune-gems analyze --calibrate`."""
    p = _parser("Calibrate the verdict rule on datasets shaped like finished sweep(s).", out=False)
    p.add_argument("--n-sim", type=int, default=defaults.N_SIM, help="simulated datasets per setting")
    a = p.parse_args(argv)
    return _run(lambda: run_calibration(a))


def calibrate_periods_main(argv: list[str] | None = None) -> int:
    """`python analysis/calibrate_periods.py`: the calibration over periods for a stated shape (no
    experiment needed): the figures of docs/analysis.md."""
    from tune_gems.analysis.calibrate.calibration import Shape
    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.calibrate.walk_forward_calibration import format_period_calibration, period_calibration_table

    p = argparse.ArgumentParser(description="Calibrate the verdict rule over walk-forward periods for a stated shape.")
    p.add_argument("--seeds", type=int, default=16, help="seeds per arm (default 16)")
    p.add_argument("--gems", type=int, default=3, help="gems in the Holm family (default 3)")
    p.add_argument("--sd", type=float, default=1.0, help="sd of a per-seed difference, Sharpe units (default 1)")
    p.add_argument("--divergence", type=float, default=0.0, help="per-side divergence rate (default 0)")
    _simulation_options(p, "datasets per row")
    p.add_argument("--alpha", type=float, default=defaults.ALPHA, help=f"family-wise level (default {defaults.ALPHA})")
    p.add_argument("--rope", type=float, default=defaults.ROPE, help=f"equivalence margin (default {defaults.ROPE})")
    p.add_argument("--min-periods", type=int, default=defaults.MIN_PERIODS,
                   help=f"fewest periods a pooled verdict decides with (default {defaults.MIN_PERIODS})")
    p.add_argument("--one-sided-keep", action="store_true", help="the one-sided keep test")
    p.add_argument("--per-contrast-tau", action="store_true", help="the period spread per gem, not shared")
    p.add_argument("--sensitivity", action="store_true",
                   help="instead of the main grid: the scenarios where the rule's assumptions bend (tau unequal, "
                        "correlated contrasts or periods, ties) and what its options buy")
    a = p.parse_args(argv)

    def go() -> None:
        from tune_gems.analysis.calibrate.walk_forward_calibration import format_period_sensitivity, period_sensitivity_table

        thresholds = check_settings(alpha=a.alpha, rope=a.rope, n_sim=a.n_sim, seed=a.seed, min_periods=a.min_periods,
                                    one_sided_keep=a.one_sided_keep, share_tau=not a.per_contrast_tau)
        _at_least(("--seeds", a.seeds, 2), ("--gems", a.gems, 1))
        if not (a.sd > 0 and a.sd < float("inf")) or not (0 <= a.divergence < 0.5):
            raise ConfigError("--sd must be a positive number and --divergence in [0, 0.5)")
        shapes = [Shape(f"gem{i}", a.seeds, a.sd, a.divergence) for i in range(a.gems)]
        if a.sensitivity:
            print(format_period_sensitivity(period_sensitivity_table(shapes, thresholds=thresholds, dist=a.dist),
                                            alpha=thresholds.alpha))
            return
        table = period_calibration_table(shapes, thresholds=thresholds, dist=a.dist)
        print(format_period_calibration(table, alpha=thresholds.alpha))

    return _run(go)


def calibrate_factors_main(argv: list[str] | None = None) -> int:
    """`python analysis/calibrate_factors.py`: the factor table's calibration for a stated shape
    (gems and factors one Holm family; docs/analysis.md "Factors")."""
    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.calibrate.factor_calibration import factor_calibration_table, format_factor_calibration

    p = argparse.ArgumentParser(description="Calibrate the factor table (gems and factors one family).")
    p.add_argument("--gems", type=int, default=3, help="gems in the family (default 3)")
    p.add_argument("--factors", type=int, default=3, help="non-gem factors in the family (default 3)")
    p.add_argument("--seeds", type=int, default=16, help="seeds per arm (default 16)")
    p.add_argument("--rho", type=float, default=0.0, help="seed share across folds (default 0)")
    a = _simulation_options(p, "datasets per row").parse_args(argv)

    def go() -> None:
        _at_least(("--gems", a.gems, 0), ("--factors", a.factors, 1), ("--seeds", a.seeds, 2))
        th = check_settings(n_sim=a.n_sim, seed=a.seed)
        if not 0 <= a.rho < 1:
            raise ConfigError(f"--rho: must be in [0, 1), got {a.rho:g}")
        table = factor_calibration_table(a.gems, a.factors, a.seeds, th, rho=a.rho, dist=a.dist)
        print(format_factor_calibration(table))

    return _run(go)


def calibrate_confirm_main(argv: list[str] | None = None) -> int:
    """`python analysis/calibrate_confirm.py`: the calibration of `tune-gems confirm` on one price
    history (docs/analysis.md, "Confirmation power")."""
    from dataclasses import replace

    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.calibrate.one_history_calibration import (
        OneHistoryShape, format_one_history, one_history_table,
    )

    p = argparse.ArgumentParser(description="Calibrate the confirmation's final gate on one price history.")
    p.add_argument("--confirm-seeds", type=int, default=16, help="fresh seeds of the confirmation (default 16)")
    a = _simulation_options(p, "simulated searches per row").parse_args(argv)

    def go() -> None:
        _at_least(("--confirm-seeds", a.confirm_seeds, 2))
        check_settings(n_sim=a.n_sim, seed=a.seed)
        shape = replace(OneHistoryShape(), confirm_seeds=a.confirm_seeds)
        print(format_one_history(one_history_table(shape, n_sim=a.n_sim, dist=a.dist, seed=a.seed)))

    return _run(go)


def calibrate_decisions_main(argv: list[str] | None = None) -> int:
    """`python analysis/calibrate_decisions.py`: the folds' and histories' decision components, through
    the rule's own functions (docs/analysis.md)."""
    import time

    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.calibrate.decision_calibration import TABLES, table_text

    p = argparse.ArgumentParser(description="Calibrate the fold overlap, the held-out confirmation, several "
                                            "price histories and the isolation of a heterogeneous contrast.")
    p.add_argument("--n-sim", type=int, default=defaults.N_SIM, help=f"simulated families per cell (default {defaults.N_SIM})")
    p.add_argument("--seed", type=int, default=defaults.SEED, help=f"simulation seed (default {defaults.SEED})")
    p.add_argument("--table", choices=TABLES, action="append", help="print only these tables (repeatable; default all)")
    a = p.parse_args(argv)

    def go() -> None:
        thresholds = check_settings(n_sim=a.n_sim, seed=a.seed)
        for name in a.table or TABLES:
            start = time.perf_counter()
            print(table_text(name, thresholds))
            print(f"({name}: {time.perf_counter() - start:.0f} s)\n", flush=True)

    return _run(go)


DOORS = {"report": report_main, "verdicts": verdicts_main, "sharpe_variance": sharpe_variance_main,
         "calibrate": calibrate_main, "calibrate_periods": calibrate_periods_main,
         "calibrate_factors": calibrate_factors_main, "calibrate_confirm": calibrate_confirm_main,
         "calibrate_decisions": calibrate_decisions_main}
"""The scripts in analysis/ by name (`analysis/<door>.py`), each the function that runs it."""


def main(door: str, argv: list[str] | None = None) -> int:
    """Run the script `analysis/<door>.py` on `argv` (default: the command line); its exit status."""
    return DOORS[door](argv)
