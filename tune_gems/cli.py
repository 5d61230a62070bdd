"""The `tune-gems` command line: train, sweep, analyze.

Bad input (a TuneGemsError) prints one line on stderr naming the field or file and exits 2,
before anything is written. Subcommands import their engines lazily, so `train` never imports
Ray.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tune_gems.analysis.scripts import add_arguments as add_analysis_arguments
from tune_gems.errors import TuneGemsError

EXIT_BAD_INPUT = 2


def _split_config_and_overrides(items: list[str]) -> tuple[str | None, list[str]]:
    """`[CONFIG.yaml] [key=value ...]`: the first item is a config file unless it has '='."""
    if items and "=" not in items[0]:
        return items[0], items[1:]
    return None, items


def _cmd_train(args: argparse.Namespace) -> int:
    from tune_gems.config import load_config

    path, overrides = _split_config_and_overrides(args.items)
    for item in overrides:
        if "=" not in item:
            raise TuneGemsError(f"{item}: expected key=value (only the first argument may be a config file)")
    cfg = load_config(path, overrides)  # validated before torch is even imported

    from tune_gems.trainer.run import run_training

    run_training(cfg, Path(args.out) if args.out else None, resume=args.resume)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tune_gems.sweep.run import run_sweep

    run_sweep(args.spec, overrides=args.overrides, storage=args.storage, name=args.name, resume=args.resume)
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from tune_gems.analysis.scripts import run_report

    run_report(args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tune-gems", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train P seeds of the DQN on one device")
    t.add_argument("items", nargs="*", metavar="[CONFIG.yaml] [key=value]", help="config file and/or overrides")
    t.add_argument("--out", help="result folder (default runs/train-<time>)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    t.set_defaults(fn=_cmd_train)

    s = sub.add_parser("sweep", help="run a Ray Tune + Optuna sweep from a spec")
    s.add_argument("spec", help="sweep spec YAML (see sweeps/)")
    s.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the spec")
    s.add_argument("--storage", help="where experiments live: a local path or a URI Ray understands")
    s.add_argument("--name", help="experiment name (folder under storage)")
    s.add_argument("--resume", action="store_true", help="finish an interrupted sweep (Tuner.restore)")
    s.set_defaults(fn=_cmd_sweep)

    a = sub.add_parser("analyze", help="Sharpe variance, gem magnitudes and a verdict per gem")
    add_analysis_arguments(a, out=True)
    a.set_defaults(fn=_cmd_analyze)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # key=value overrides may come after options (`sweep SPEC --name x a.b=1`): argparse stops
    # collecting positionals at the first option, so gather the stragglers here
    args, extra = parser.parse_known_args(argv)
    stray = [x for x in extra if x.startswith("-") or "=" not in x or args.command == "analyze"]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if args.command == "train":
        args.items += extra
    elif args.command == "sweep":
        args.overrides += extra
    try:
        return args.fn(args)
    except TuneGemsError as e:
        print(f"tune-gems: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("tune-gems: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
