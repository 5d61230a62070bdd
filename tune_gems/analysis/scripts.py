"""Command-line entry points behind the thin scripts in `analysis/`.

Each returns an exit status: 0 on success, 2 on bad input (one line on stderr naming the
folder or file, as everywhere in tune-gems).
"""

from __future__ import annotations

import argparse
import sys

from tune_gems.analysis import defaults
from tune_gems.errors import TuneGemsError


def _parser(description: str, out: bool) -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(description=description), out)


def add_arguments(p: argparse.ArgumentParser, out: bool = True) -> argparse.ArgumentParser:
    """The analysis options, shared by `tune-gems analyze` and the scripts in analysis/."""
    p.add_argument("experiments", nargs="+", metavar="EXPERIMENT_DIR", help="experiment folder(s) of a sweep")
    if out:
        p.add_argument("--out", default=None, help="output folder (default: <first experiment>/analysis)")
        p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
        p.add_argument("--no-plots", action="store_true", help="write no PNG files")
    p.add_argument("--rel-threshold", type=float, default=defaults.REL_THRESHOLD,
                   help=f"measured |gem / C51 loss| below this -> delete (default {defaults.REL_THRESHOLD:g})")
    p.add_argument("--confidence", type=float, default=defaults.CONFIDENCE,
                   help=f"two-sided confidence of intervals (default {defaults.CONFIDENCE})")
    p.add_argument("--n-boot", type=int, default=defaults.N_BOOT,
                   help=f"bootstrap resamples (default {defaults.N_BOOT})")
    p.add_argument("--min-members", type=int, default=defaults.MIN_MEMBERS,
                   help=f"fewest members / seed pairs per side to compare (default {defaults.MIN_MEMBERS})")
    p.add_argument("--statistic", choices=("iqm", "mean"), default=defaults.STATISTIC,
                   help="location statistic of unpaired comparisons (default iqm)")
    p.add_argument("--seed", type=int, default=defaults.SEED, help="bootstrap seed (default 0)")
    return p


def _thresholds(a: argparse.Namespace) -> dict:
    return dict(rel_threshold=a.rel_threshold, confidence=a.confidence, n_boot=a.n_boot,
                min_members=a.min_members, statistic=a.statistic, seed=a.seed)


def _run(fn) -> int:
    try:
        fn()
    except TuneGemsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def run_report(a: argparse.Namespace) -> None:
    """Write the full analysis for parsed arguments and print the verdict table."""
    from tune_gems.analysis.report import format_verdict_table
    from tune_gems.analysis.run import run_analysis

    res = run_analysis(a.experiments, a.out, overwrite=a.overwrite, plot=not a.no_plots, **_thresholds(a))
    print(format_verdict_table(res.verdicts))
    print(f"\nwrote {res.out_dir}/report.md")


def report_main(argv: list[str] | None = None) -> int:
    """Write the full analysis (CSVs, PNGs, report.md) and print the verdict table."""
    a = _parser("Analyse finished sweep(s): tables, plots, report.md and verdicts.", out=True).parse_args(argv)
    return _run(lambda: run_report(a))


def verdicts_main(argv: list[str] | None = None) -> int:
    """Print the verdict per gem with its evidence (writes nothing)."""
    from tune_gems.analysis.load import load_experiment
    from tune_gems.analysis.report import format_verdict_table
    from tune_gems.analysis.verdicts import gem_verdicts

    a = _parser("Print the verdict per gem of finished sweep(s).", out=False).parse_args(argv)

    def go() -> None:
        e = load_experiment(a.experiments)
        print(format_verdict_table(gem_verdicts(e.trials, e.history, e.members, **_thresholds(a))))

    return _run(go)


def sharpe_variance_main(argv: list[str] | None = None) -> int:
    """Print the Sharpe variance table per configuration (writes nothing)."""
    from tune_gems.analysis.load import load_experiment
    from tune_gems.analysis.report import markdown_table
    from tune_gems.analysis.variance import sharpe_variance

    a = _parser("Print Sharpe variance per configuration of finished sweep(s).", out=False).parse_args(argv)

    def go() -> None:
        e = load_experiment(a.experiments)
        sv = sharpe_variance(e.members, e.trials, n_boot=a.n_boot, confidence=a.confidence, seed=a.seed)
        print(markdown_table(sv))

    return _run(go)
