"""`tune-gems confirm EXP`: re-test each gem's chosen configuration once, on fresh seeds and paths.

Why (issue 21): a search keeps its best trial, and the best of many noisy trials is inflated;
with paths shared across trials a configuration can also win by suiting those paths. So the
winner is trained again, once, beside its control, on data the search never saw:

- **the choice** (`analysis.confirmation.choose_per_gem`): per gem, the finished trial wiring it
  with the largest `verdict_gain_<gem>` (the verdict's statistic; `gain_<gem>` for older results);
- **fresh member seeds and seed indices**: trial seed past every seed of the discovery (member
  seeds are a hash of the trial seed and the seed index, so they share nothing with it), and
  seed indices (`first_seed_index`) past every index the discovery used, a disjoint block per gem;
- **fresh synthetic paths** (`data.synthetic.paths: per_seed`): the path of seed index s is
  `data.synthetic.seed + s`, so with the discovery's largest `data.synthetic.seed` and the fresh
  indices every path is one the discovery never trained on. On one price history (a file or
  `paths: shared`) the history is necessarily the same: the report says the confirmation is
  conditional on it;
- **the gem's own comparison** (`arm_designs.confirmation_arms`): the chosen configuration as
  `proposal` beside itself with only that gem measured (`control`, also named `without-<gem>`),
  the comparison the gem's verdict makes; every other wired gem stays wired on both sides, so a
  confirmation trial holds pairs for its own gem only, and each gem's final verdict rests on its
  own fresh trial (the same data, epochs and everything else of the chosen trial).

**With power** (issue 30, item 7): each gem's confirmation trains the seeds per arm that make its
MDE at most the discovery's, by the same rule and in the same units (`search_choice.
confirmation_power`, `rules.power.mde`), and says so before training; `--seeds` that cannot
give a finite interval or reach that MDE, or a design no seed count can bring there (a floor of
periods, or of one history's market noise), is refused in one line before anything is trained or
claimed, so the search's one confirmation is never spent on a run that cannot decide. **On one
price history** the confirmation inherits the history's luck of the configuration the search
chose for it, so its final verdict needs the selection-adjusted gate (`search_choice.
one_history_final`: the market-noise part, or over periods the pooled interval, at the verdict's
level / the trials the search chose among; no market-noise interval, nothing final).

The confirmation runs once per search: `EXP/confirmed.json` records it (claimed before the first
trial trains, removed again if the confirmation fails or is stopped by Ctrl-C or SIGTERM), and a
second `confirm` of the search is refused whatever its `--out`, so a search cannot be
re-confirmed until a run passes. While it trains, `confirm` holds the search folder's one-writer
lock (tune_gems.contracts.output_lock): a second `confirm` (or a `sweep --resume`) is refused
naming its pid, and a confirmation killed outright (SIGKILL, a lost machine) leaves a "running"
record and a `.confirmation.tmp-*` folder that the next `confirm` finds unheld and clears.
Its folder (default `EXP/confirmation`) is never overwritten.

What it reads is verified first, fail-closed (tune_gems.contracts.run_record): the search's
marker must record the checksums of its `spec.yaml` (and of its data file), and both must
match; a marker missing, unreadable or without them, an edited spec or a changed data file is
refused in one line, since the confirmation would otherwise train another configuration than
the discovery's while its table shows the two side by side. `confirmed.json` is read only as a
regular file (non-blocking, bounded); a verdict gain of +inf in the trials table (no run
reports one: divergence scores -inf) is refused as a forged table. It is
an experiment folder like a sweep's (trials/history/members/arms parquet, eval_returns, gems.json,
so `tune-gems analyze EXP/confirmation` gives its full tables), plus `choices.json` (what was
chosen and the fresh seeds), `confirmation.csv` (discovery and confirmation side by side, with
the shrinkage), `verdicts.csv` (the confirmation's verdicts, the final ones), `report.md` and
`tensorboard/<trial id>` (each confirmation trial's epochs, tagged as `train` tags them). While it
trains it prints a line per finished trial with an ETA, as a sweep does.

The parts: the plan (tune_gems.commands.confirm_plan), the record and its clean-up
(tune_gems.commands.confirm_record), the training (tune_gems.commands.confirm_trials); this module
checks what it reads, runs them in order and writes the summary.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tune_gems.analysis.verdicts.search_choice import confirmation_power
from tune_gems.commands.confirm_plan import MIN_SEEDS, Plan, fresh_paths, plan_confirmation
from tune_gems.commands.confirm_record import (FIELD, KIND, check_not_confirmed, claim_confirmation, clear_stale,
                                               stops_raise, write_record)
from tune_gems.commands.confirm_trials import run_plans
from tune_gems.config.schema import Config
from tune_gems.config.yaml_io import MAX_YAML_BYTES
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import MARKER_FILE, check_top_entries, marker_kind, marker_state
from tune_gems.contracts.paths import check_input_path
from tune_gems.contracts.run_record import check_data_unchanged, check_stored_unchanged, require_record
from tune_gems.contracts.result_files import SPEC_FILE, TRIALS_FILE
from tune_gems.contracts.safe_files import read_regular
from tune_gems.stats.metrics import GEM_GAIN_PREFIX, VERDICT_GAIN_PREFIX
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import load_spec
from tune_gems.sweep.results import write_tables
from tune_gems.sweep.storage import ExperimentStore

DEFAULT_OUT = "confirmation"
CHOICES_FILE = "choices.json"
TABLE_FILE = "confirmation.csv"
VERDICTS_FILE = "verdicts.csv"
REPORT_FILE = "report.md"
RECORD_FIX = ("a confirmation re-trains exactly what the search recorded, so it needs the search's records intact: "
              "restore them, or run the search again")


@dataclass
class ConfirmOutcome:
    """What a confirmation published: its folder, the side-by-side table, its verdicts (the final
    ones) and the notes that concern no single gem."""

    out: Path
    table: pd.DataFrame
    verdicts: pd.DataFrame
    notes: list[str]


def confirm(experiment: str | Path, out: str | Path | None = None, *, population: int | None = None,
            log: Callable[[str], None] = print, threads: str | None = None, **settings: Any) -> ConfirmOutcome:
    """Confirm the search in `experiment` (see the module docstring); `settings` are the
    analysis settings (alpha, rope, last_k, ...), used for both the discovery and the
    confirmation verdicts. Everything is checked before training (the search's records first,
    fail-closed); the folder appears whole. `threads`: the CLI's thread count in words
    (tune_gems.commands.cpu_threads), logged first once the checks passed."""
    from tune_gems.analysis.analyze import analyze, check_settings
    from tune_gems.contracts.outputs import check_output_folder

    exp = Path(experiment)
    check_input_path(exp, FIELD, DataError)
    check_settings(**settings)
    if population is not None and (isinstance(population, bool) or population < MIN_SEEDS):
        raise ConfigError(f"--seeds: a confirmation needs at least {MIN_SEEDS} seeds per arm, got {population}")
    spec_file = exp / SPEC_FILE
    if not spec_file.is_file():
        raise DataError(f"{exp}: not a sweep folder (missing {SPEC_FILE}); confirm re-tests a search")
    check_top_entries(exp, FIELD)  # confirm writes here (its record, its lock): no link or FIFO is written through
    OutputLock(exp, FIELD).check_free()  # a sweep or another confirmation writing the search is named first
    check_not_confirmed(exp)
    spec = _recorded_spec(exp)
    if spec.design == "none":
        raise ConfigError(f"{spec_file}: design: confirm needs a designed search (design: wire_search), not none")
    default = out is None
    out_path = check_output_folder(exp / DEFAULT_OUT if default else Path(out), kind=KIND, field="--out",
                                   inputs=[exp], allow_inside=[exp] if default else ())
    discovery = analyze(exp, **settings)
    gems = list(discovery.verdicts["gem"])
    trials = discovery.experiment.trials
    _check_gains_finite(trials, gems, exp)
    plans, notes, build = plan_confirmation(spec, trials, discovery.experiment.members, gems, population)
    if not plans:
        raise DataError(f"{exp}: no finished trial of the search wired any gem; nothing to confirm")
    th = check_settings(**settings)
    power = confirmation_power(discovery.verdicts, trials, [p.gem for p in plans], one_history=not fresh_paths(spec),
                               alpha=th.alpha, power=th.power, seeds=population,
                               default_seeds=spec.base_config().trainer.population)  # refuses before anything is claimed
    plans, notes, build = plan_confirmation(spec, trials, discovery.experiment.members, gems,
                                            {p.gem: p.seeds for p in power})
    if threads:
        log(f"tune-gems confirm: threads: {threads}")
    for p in power:
        log(f"tune-gems confirm: {p.gem}: {p.note}")
    lock = OutputLock(exp, FIELD).acquire()  # a second confirmation started meanwhile is refused here
    try:
        with stops_raise():
            return _run_confirmation(exp, out_path, default, spec, Planned(plans, notes, build, power), discovery, log,
                                     settings)
    finally:
        lock.release()


@dataclass(frozen=True)
class Planned:
    """What a confirmation will train: its `plans` (one trial per gem), the `notes` for the gems it
    cannot confirm and the search as a whole, the function that `build`s a plan's config and each
    gem's `power` plan (`search_choice.confirmation_power`)."""

    plans: list[Plan]
    notes: list[str]
    build: Callable[[Plan], Config]
    power: list


def _run_confirmation(exp: Path, out_path: Path, default: bool, spec: SweepSpec, planned: Planned, discovery,
                      log: Callable[[str], None], settings: dict[str, Any]) -> "ConfirmOutcome":
    """Train the plans and publish the folder, holding the search's lock (`confirm`)."""
    from tune_gems.analysis.verdicts.search_choice import (
        FINAL_COLUMNS, candidate_count, format_confirmation, one_history_final, side_by_side,
    )
    from tune_gems.analysis.render.report import format_verdict_table
    from tune_gems.analysis.analyze import analyze
    from tune_gems.contracts.outputs import check_output_folder, publish_folder, write_marker

    plans, notes, gems = planned.plans, planned.notes, list(discovery.verdicts["gem"])
    if check_not_confirmed(exp):  # under the lock: a "running" record is a dead confirmation's
        clear_stale(exp, out_path, log)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    record = claim_confirmation(exp, out_path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.tmp-", dir=out_path.parent))
    try:
        write_marker(tmp, KIND)
        name = f"{discovery.experiment.labels[0]}-confirmation"
        write_tables(ExperimentStore(str(tmp.parent), tmp.name), run_plans(plans, planned.build, name, log, events_out=tmp))
        # on one price history the rule's last stage is the search's selection (`rules.selection`)
        selection = None if fresh_paths(spec) else {p.gem: candidate_count(discovery.experiment.trials, p.gem)
                                                    for p in plans}
        confirmed = analyze(tmp, selection=selection, **settings)
        gains = {p.gem: _final(confirmed.experiment.history, p.trial_id, f"{VERDICT_GAIN_PREFIX}{p.gem}") for p in plans}
        per_gem = {n.split(":", 1)[0]: n.split(": ", 1)[1] for n in notes if ":" in n and n.split(":", 1)[0] in gems}
        final = None if selection is None else one_history_final(confirmed.verdicts, selection)
        table = side_by_side([p.choice for p in plans], discovery.verdicts, confirmed.verdicts, gains, per_gem,
                             power=planned.power, final=final)
        general = [n for n in notes if n.split(":", 1)[0] not in gems]
        (tmp / CHOICES_FILE).write_text(json.dumps([asdict(p) for p in plans], indent=2, default=str) + "\n")
        table.to_csv(tmp / TABLE_FILE, index=False)
        confirmed.verdicts.drop(columns=FINAL_COLUMNS[1:], errors="ignore").to_csv(tmp / VERDICTS_FILE, index=False)
        text = format_confirmation(table)
        (tmp / REPORT_FILE).write_text(_report(exp, text, format_verdict_table(confirmed.verdicts, confirmed.placebo,
                                                                               confirmed.redundancy), general,
                                               fresh_paths(spec)))
        check_output_folder(out_path, kind=KIND, field="--out", inputs=[exp], allow_inside=[exp] if default else ())
        publish_folder(tmp, out_path, kind=KIND)
        write_record(record, out_path, plans)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not out_path.exists():  # nothing was published: the search is not confirmed
            record.unlink(missing_ok=True)
        raise
    return ConfirmOutcome(out_path, table, confirmed.verdicts, general)


def _recorded_spec(exp: Path) -> SweepSpec:
    """The search's spec, verified against its marker first (fail-closed: RECORD_FIX)."""
    spec_file = exp / SPEC_FILE
    marker, problem = marker_state(exp)
    where = str(exp / MARKER_FILE)
    require_record(marker, problem, where, files=[SPEC_FILE], fix=RECORD_FIX)
    if marker_kind(exp) != "sweep":
        raise DataError(f"{where}: marks a {marker_kind(exp)} folder, not a sweep's; confirm re-tests a search")
    check_stored_unchanged(marker, SPEC_FILE, read_regular(spec_file, MAX_YAML_BYTES, None, ConfigError), str(spec_file))
    spec = load_spec(spec_file)
    data = spec.base_config().data
    require_record(marker, problem, where, files=[SPEC_FILE], data=data, fix=RECORD_FIX)
    check_data_unchanged(marker, data, str(exp))
    return spec


def _check_gains_finite(trials: pd.DataFrame, gems: list[str], exp: Path) -> None:
    """DataError naming the trials table when a gem's gain (the choice's score) is +inf: no run
    reports one (a diverged trial scores -inf), so the table was changed, and a forged +inf
    would choose the configuration that gets confirmed."""
    for gem in gems:
        for col in (f"{VERDICT_GAIN_PREFIX}{gem}", f"{GEM_GAIN_PREFIX}{gem}"):
            if col not in trials.columns:
                continue
            values = pd.to_numeric(trials[col], errors="coerce")
            forged = trials.loc[values == math.inf, "trial_id"] if "trial_id" in trials.columns else values[values == math.inf]
            if len(forged):
                raise DataError(f"{exp / TRIALS_FILE}: {col} of trial {forged.iloc[0]} is +inf, which no run reports "
                                "(divergence scores -inf); the table was changed: restore it, or run the search again")


def _final(history: pd.DataFrame, trial_id: str, column: str) -> float:
    h = history[history["trial_id"] == trial_id]
    if not len(h) or column not in h.columns:
        return math.nan
    return float(h.sort_values("epoch")[column].iloc[-1])


def _report(exp: Path, table: str, verdicts: str, notes: list[str], fresh: bool) -> str:
    data = "fresh synthetic paths" if fresh else "the search's own price data (so it is conditional on it)"
    lines = [f"# Confirmation of {exp}", "",
             "Each gem's chosen configuration (the search's best `verdict_gain_<gem>`), trained once more beside its "
             f"control on fresh member seeds and {data}. `discovery gain` is the chosen trial's own "
             "(selected, so inflated) gain; `confirmation gain` the same statistic on the fresh run; `shrinkage` their "
             "difference. Each gem's confirmation trained the seeds that make its MDE at most the discovery's (same "
             "rule, same units: `discovery_mde`, `confirmation_mde`, `confirmation_seeds`). The final verdict is the "
             "confirmation's; on one price history it must also survive the selection-adjusted gate (`final_rule`) "
             "(docs/analysis.md, \"Search, then confirm\" and \"Confirmation power\").", "",
             "```", table, "```", "", "## Confirmation verdicts", "", "```", verdicts, "```"]
    lines += [f"\nNote: {n}." for n in notes]
    return "\n".join(lines) + "\n"
