"""The `tune-gems` command line: train, sweep, analyze.
Bad input is one line and exit 2 before anything is written; any other exception is a bug, one line
and exit 1 (`--debug` or TUNE_GEMS_DEBUG=1: inline). CPU variables are checked before torch loads."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
import typing
from pathlib import Path

from tune_gems.analysis.cli import add_arguments as add_analysis_arguments
from tune_gems.commands.cpu_threads import THREADS_FLAG, set_cpu_threads, trial_threads
from tune_gems.contracts.cpu_environment import THREADS_PER_CPU_MAX, check_cpu_environment, pin_cpu_code_path, thread_count
from tune_gems.contracts.errors import TuneGemsError

EXIT_BAD_INPUT = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: a command whose reader closed the pipe."""
DEBUG_ENV = "TUNE_GEMS_DEBUG"


def _cmd_train(args: argparse.Namespace) -> int:
    from tune_gems.config.load import load_config

    path, overrides = (args.items[0], args.items[1:]) if args.items and "=" not in args.items[0] else (None, args.items)
    for item in overrides:
        if "=" not in item:
            raise TuneGemsError(f"{item}: expected key=value (only the first argument may be a config file)")
    if args.resume:
        if not args.out:
            raise TuneGemsError("--resume needs --out: the run folder to continue")
        from tune_gems.trainer.train_command import resume_config

        cfg = resume_config(Path(args.out), path, overrides)  # the stored config; differing keys refused
    else:
        cfg = load_config(path, overrides)  # validated before torch is even imported

    if args.dry_run:
        return _train_dry_run(cfg, args.out, args.resume, args.thread_choice)
    from tune_gems.trainer.train_command import run_training
    from tune_gems.trainer.stop_signals import TrainingStopped

    try:
        run_training(cfg, Path(args.out) if args.out else None, resume=args.resume, threads=_threads_words(args))
    except TrainingStopped as stopped:  # SIGTERM/SIGINT: stopped at an epoch boundary, checkpoint written
        print(str(stopped), file=sys.stderr, flush=True)
        return stopped.exit_code
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tune_gems.sweep.console import keep_every_line, quiet_reporter
    from tune_gems.sweep.local_ray import prepare_loopback

    prepare_loopback()  # before Ray is imported: a Ray started here listens on loopback only
    keep_every_line()
    quiet_reporter(args.verbose)
    if args.dry_run and args.thread_choice is not None:  # the plan's time is measured with these threads
        print(f"tune-gems sweep: threads: {args.thread_choice.line()}", flush=True)
    from tune_gems.sweep.driver import run_sweep

    outcome = run_sweep(args.spec, overrides=args.overrides, storage=args.storage, name=args.name, resume=args.resume,
        verbose=args.verbose, dry_run=args.dry_run)
    if outcome is None:  # --dry-run: the plan is printed
        return 0
    if outcome.interrupted:
        print(f"tune-gems: interrupted; continue with: {outcome.resume_command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from tune_gems.analysis.cli import run_report

    run_report(args)
    return 0


DRY_RUN_HELP = (
    "check everything, then print the members, trials, data split, memory estimate and a measured time estimate; "
    "write nothing but the resolved config, to a temporary file it names"
)


def _train_dry_run(cfg, out: str | None, resume: bool, threads=None) -> int:
    from tune_gems.trainer.dry_run import train_plan
    from tune_gems.trainer.train_command import check_train_out

    folder = check_train_out(out, resume)  # the real command's check of --out, first as there
    print("\n".join(train_plan(cfg, folder, resume, threads=threads.line() if threads else None)), flush=True)
    return 0


SPEC_KEYS_HEADING = "sweep spec keys (a spec's `config:` section holds the config keys):"


def _cmd_config(args: argparse.Namespace) -> int:
    """`tune-gems config [PREFIX] [--plugin MODULE ...]`: every config and sweep spec key."""
    from tune_gems.config.schema import Config
    from tune_gems.config.load import config_model
    from tune_gems.config.keys import format_rows, key_rows
    from tune_gems.gems import registry
    from tune_gems.sweep.spec import SweepSpec

    from tune_gems.stats.metrics import check_plugin_columns

    plugins = tuple(args.plugin or ())
    if plugins:  # validated as `train` validates them: a gem listed here is one a run accepts
        registry.import_plugins(list(plugins), validate=check_plugin_columns)
    tables = [key_rows(config_model(plugins) if plugins else Config), key_rows(SweepSpec)]
    if args.prefix:
        tables = [[r for r in rows if r.key == args.prefix or r.key.startswith(args.prefix.rstrip(".") + ".")] for rows in tables]
        if not any(tables):
            raise TuneGemsError(f"{args.prefix}: no config or sweep spec key starts with it (tune-gems config lists them all)")
    config_rows, spec_rows = tables
    parts = [format_rows(config_rows)] if config_rows else []
    if spec_rows:
        parts.append(f"{SPEC_KEYS_HEADING}\n{format_rows(spec_rows)}")
    print("\n\n".join(parts), flush=True)
    return 0


def _add_config_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser("config", help="list the config and sweep spec keys with type, default and description")
    c.add_argument("prefix", nargs="?", help="only keys under this one (e.g. trainer, gems.g6, search, tracking)")
    c.add_argument("--plugin", action="append", metavar="MODULE", help="also list the gems of this plug-in module")
    c.set_defaults(fn=_cmd_config)
    return c


class _VersionAction(argparse.Action):
    """`--version`: this package's, Python's, torch's, Ray's and Optuna's versions and the git
    commit (tune_gems.commands.versions), computed when asked (it runs git)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> typing.NoReturn:
        from tune_gems.commands.versions import version_text

        print(version_text(), flush=True)
        parser.exit()


def _cmd_compare(args: argparse.Namespace) -> int:
    from tune_gems.analysis.analyze import check_settings
    from tune_gems.analysis.cli import analysis_settings
    from tune_gems.commands.compare import compare, format_comparison

    settings = analysis_settings(args)
    check_settings(**settings)  # a bad option is named before the folders are counted or read
    if len(args.experiments) != 2:
        raise TuneGemsError(f"compare: give exactly two experiment folders, got {len(args.experiments)}")
    print(format_comparison(compare(*args.experiments, **settings)), flush=True)
    return 0


def _add_compare_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="two experiments (sweep or train folders) side by side: settings, verdicts, Sharpe")
    add_analysis_arguments(c, out=False)
    _add_threads_option(c)
    c.set_defaults(fn=_cmd_compare)
    return c


def _cmd_confirm(args: argparse.Namespace) -> int:
    from tune_gems.analysis.verdicts.search_choice import format_confirmation
    from tune_gems.analysis.cli import analysis_settings
    from tune_gems.commands.confirm import confirm
    from tune_gems.contracts.errors import ConfigError

    if args.not_pre_registered and not args.final:
        raise ConfigError("--not-pre-registered: labels a second opening of the seal; it goes with --final")
    res = confirm(args.experiment, args.out, population=args.seeds, log=lambda line: print(line, flush=True),
                  threads=_threads_words(args), final=args.final, not_pre_registered=args.not_pre_registered,
                  **analysis_settings(args))
    if res.label:
        print(f"final confirmation on the sealed rows, {res.label}")
    print(format_confirmation(res.table))
    for note in res.notes:
        print(f"note: {note}")
    print(f"\nwrote {res.out}/report.md")
    return 0


def _add_confirm_parser(sub) -> None:
    from tune_gems.analysis.cli import add_settings

    c = sub.add_parser("confirm", help="re-test each gem's chosen configuration once, on fresh seeds and paths")
    c.add_argument("experiment", metavar="EXPERIMENT_DIR", help="folder of a finished wire_search sweep")
    c.add_argument("--out", default=None, help="output folder (default: EXPERIMENT_DIR/confirmation; never overwritten)")
    c.add_argument("--seeds", type=int, default=None,
                   help="seeds per arm of each confirmation run (default: the fewest whose MDE is at most the "
                        "discovery's; refused when too few to decide)")
    c.add_argument("--final", action="store_true",
                   help="open the search's sealed rows (data.sealed) once: train on fresh seeds, test on them "
                        "(default --out: EXPERIMENT_DIR/final-confirmation)")
    c.add_argument("--not-pre-registered", action="store_true",
                   help="with --final: open a seal opened before, every output labelled not pre-registered")
    add_settings(c)
    _add_threads_option(c)
    c.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback of an internal error inline")
    c.set_defaults(fn=_cmd_confirm)


THREADS_HELP = (
    "CPU threads of this run's torch and BLAS work (default: the user's OMP_NUM_THREADS or MKL_NUM_THREADS, else "
    f"one, as each of a sweep's trials; at most {THREADS_PER_CPU_MAX} per CPU of the machine)"
)


def _threads_words(args: argparse.Namespace) -> str | None:
    choice = getattr(args, "thread_choice", None)
    return choice.line() if choice is not None else None


def _add_threads_option(p: argparse.ArgumentParser, help: str = THREADS_HELP) -> None:
    p.add_argument(THREADS_FLAG, type=int, default=None, metavar="N", help=help)


def _set_threads(args: argparse.Namespace) -> None:
    """Set this process's CPU threads (`args.thread_choice`; a sweep's dry run: a trial's by default)."""
    threads = getattr(args, "threads", None)
    args.thread_choice = None
    if threads is not None:  # the value first, before the spec is read for a sweep's default
        thread_count(threads, THREADS_FLAG)
    if args.command == "sweep" and args.dry_run:
        from tune_gems.sweep.spec_load import load_spec

        cpu = load_spec(Path(args.spec), list(args.overrides)).resources.cpu
        args.thread_choice = set_cpu_threads(threads, default=lambda: trial_threads(cpu))
    elif args.command in ("train", "analyze", "compare", "confirm", "plan"):  # CPU work in this process
        args.thread_choice = set_cpu_threads(threads)
    elif threads is not None:
        raise TuneGemsError(f"{THREADS_FLAG}: a sweep's trials get their threads from resources.cpu (Ray sets one "
                            f"per CPU); {THREADS_FLAG} applies to --dry-run")


def _cmd_plan(args: argparse.Namespace) -> int:
    from tune_gems.analysis.plan import format_plan, plan
    from tune_gems.analysis.cli import analysis_settings

    print(format_plan(plan(args.experiments, target_mde=args.target_mde, **analysis_settings(args))), flush=True)
    return 0


def _add_plan_parser(sub) -> argparse.ArgumentParser:
    from tune_gems.analysis.cli import add_settings

    c = sub.add_parser("plan", help="from a finished pilot with folds: the designs that reach a target MDE, and their cost")
    c.add_argument("experiments", nargs="+", metavar="EXPERIMENT_DIR", help="folder(s) of the finished pilot")
    c.add_argument("--target-mde", type=float, default=None,
                   help="the effect the design must detect at the stated power (default: --rope)")
    add_settings(c)
    c.set_defaults(fn=_cmd_plan)
    return c


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose usage error is one line and exit 2 like every bad input (a mistyped choice with
    its closest one); `--help` prints the full usage."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"tune-gems: error: {' '.join(message.split())}{_did_you_mean(message)} (see {self.prog} --help)",
              file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _did_you_mean(message: str) -> str:
    """`; did you mean 'sweep'?` for argparse's "invalid choice: 'swep' (choose from 'train', ...)"."""
    import difflib
    import re

    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not found:
        return ""
    close = difflib.get_close_matches(found.group(1), re.findall(r"'([^']*)'", found.group(2)), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tune-gems", description=__doc__.splitlines()[0])
    debug_help = "show the full traceback of an internal error inline (default: written to a file)"
    p.add_argument("--debug", action="store_true", help=debug_help)
    p.add_argument("--version", action=_VersionAction,
                   help="print the versions of tune-gems, Python, torch, Ray and Optuna and the git commit, then exit")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train P seeds of the DQN on one device")
    t.add_argument("items", nargs="*", metavar="[CONFIG.yaml] [key=value]", help="config file and/or overrides")
    t.add_argument("--out", help="result folder (default runs/train-<time>)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    t.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    _add_threads_option(t)
    t.set_defaults(fn=_cmd_train)

    s = sub.add_parser("sweep", help="run a Ray Tune + Optuna sweep from a spec")
    s.add_argument("spec", help="sweep spec YAML (see sweeps/)")
    s.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the spec")
    s.add_argument("--storage", help="where experiments live: a local path or a URI Ray understands")
    s.add_argument("--name", help="experiment name (folder under storage)")
    s.add_argument("--resume", action="store_true", help="finish an interrupted sweep (Tuner.restore)")
    s.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP + "; Ray is not started")
    _add_threads_option(s, "CPU threads of the dry run's measurement (--dry-run only; default: the user's OMP_NUM_THREADS "
                        "or MKL_NUM_THREADS, else a trial's: Ray's one thread per CPU of resources.cpu)")
    s.add_argument(
        "--verbose", action="store_true",
        help="also show each HEALTH_DIAG line's per-arm part, Tune's own status tables and result dumps, Ray's "
        "per-checkpoint lines, experiment-snapshot warnings, token-authentication notice and TensorBoard hint (default: "
        "tune-gems' lines, one HEALTH_DIAG line per trial and epoch prefixed with the trial id, a status line per "
        "finished trial)",
    )
    s.set_defaults(fn=_cmd_sweep)

    a = sub.add_parser("analyze", help="Sharpe variance, gem magnitudes and a verdict per gem")
    add_analysis_arguments(a, out=True)
    _add_threads_option(a)
    a.set_defaults(fn=_cmd_analyze)
    c = _add_config_parser(sub)
    cmp = _add_compare_parser(sub)
    pl = _add_plan_parser(sub)
    _add_threads_option(pl)
    for cmd in (t, s, a, c, cmp, pl):  # `tune-gems train --debug ...` as well as `tune-gems --debug train ...`
        cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    _add_confirm_parser(sub)
    return p


def _report_bug(err: BaseException, debug: bool) -> int:
    text = "".join(traceback.format_exception(err))
    first = (str(err).strip().splitlines() or [""])[0][:300]
    what = f"{type(err).__name__}: {first}" if first else type(err).__name__
    if debug:
        sys.stderr.write(text)
        print(f"tune-gems: internal error (a bug, please report it): {what}", file=sys.stderr)
        return EXIT_BUG
    try:
        fd, log = tempfile.mkstemp(prefix="tune-gems-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(f"tune-gems {' '.join(sys.argv[1:])}\n\n{text}")
        where = f"full traceback in {log}"
    except OSError:
        where = "the traceback could not be written; rerun with --debug"
    print(f"tune-gems: internal error (a bug, please report it): {what}; {where}", file=sys.stderr)
    return EXIT_BUG


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # key=value overrides may come after options (`sweep SPEC --name x a.b=1`): argparse stops
    # collecting positionals at the first option, so gather the stragglers here
    args, extra = parser.parse_known_args(argv)
    stray = [x for x in extra if x.startswith("-") or "=" not in x or args.command in ("analyze", "config", "compare", "plan")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if args.command == "train":
        args.items += extra
    elif args.command == "sweep":
        args.overrides += extra
    debug = bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        check_cpu_environment()  # before torch is imported: a value torch or OpenMP would crash on is one line
        _set_threads(args)  # once, before torch or a BLAS library is loaded (tune_gems.commands.cpu_threads)
        pin_cpu_code_path()  # before torch runs anything: the same CPU bits on AVX2 and AVX-512 machines
        return args.fn(args)
    except TuneGemsError as e:
        print(f"tune-gems: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("tune-gems: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`tune-gems config | head`): not a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's advice: no second error at exit
        return EXIT_BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 - the last line of defence
        return _report_bug(e, debug)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split("\n")).strip() or type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
