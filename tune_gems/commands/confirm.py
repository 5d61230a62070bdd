"""`tune-gems confirm EXP` (docs/analysis.md "Search, then confirm"): the best of many noisy trials is inflated, so each
gem's winner trains once more beside its control on fresh seeds and paths, at the seeds per arm that make its MDE at
most the discovery's; its verdicts are final. Once per search, under its lock, while its records match its marker; this
module checks, runs confirm_plan, confirm_record and confirm_trials, and writes the summary."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tune_gems.analysis.verdicts.search_choice import confirmation_power
from tune_gems.commands.confirm_plan import MIN_SEEDS, Plan, fresh_paths, plan_confirmation
from tune_gems.commands.confirm_record import FIELD, KIND, Confirmed, SealOpening, stops_raise, taken_seeds
from tune_gems.commands.confirm_trials import run_plans
from tune_gems.config.schema import Config
from tune_gems.config.yaml_io import MAX_YAML_BYTES
from tune_gems.contracts.errors import ConfigError, DataError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import MARKER_FILE, check_top_entries, marker_kind, marker_state
from tune_gems.contracts.paths import check_input_path
from tune_gems.contracts.run_record import check_data_unchanged, check_stored_unchanged, check_tables_unchanged, require_record
from tune_gems.contracts.result_files import SPEC_FILE, TABLE_FILES, TRIALS_FILE
from tune_gems.contracts.safe_files import read_regular
from tune_gems.stats.metrics import VERDICT_GAIN_PREFIX
from tune_gems.sweep.console import tie_note
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.spec_load import load_spec
from tune_gems.sweep.results import write_tables
from tune_gems.sweep.storage import ExperimentStore

DEFAULT_OUT = "confirmation"
FINAL_OUT = "final-confirmation"
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
    label: str = ""


def confirm(experiment: str | Path, out: str | Path | None = None, *, population: int | None = None,
            log: Callable[[str], None] = print, threads: str | None = None, final: bool = False,
            not_pre_registered: bool = False, **settings: Any) -> ConfirmOutcome:
    """Confirm the search in `experiment`, checking everything first (fail-closed); the folder appears
    whole. `final`: train once on the sealed rows as test (docs/analysis.md "The sealed segment");
    again only `not_pre_registered`, labelled so."""
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
    record = SealOpening(exp, not_pre_registered) if final else Confirmed(exp)
    record.check()
    if not record.pre_registered:  # every line of this run says so
        log = (lambda line, log=log: log(f"[not pre-registered] {line}"))
    spec = _recorded_spec(exp)
    record.verify(spec.base_config())
    if spec.design == "none":
        raise ConfigError(f"{spec_file}: design: confirm needs a designed search (design: wire_search), not none")
    default = out is None
    out_path = check_output_folder(exp / (FINAL_OUT if final else DEFAULT_OUT) if default else Path(out), kind=KIND, field="--out",
                                   inputs=[exp], allow_inside=[exp] if default else ())
    discovery = analyze(exp, **settings)
    gems = list(discovery.verdicts["gem"])
    trials = discovery.experiment.trials
    taken = taken_seeds(exp)
    plans, notes, build = plan_confirmation(spec, trials, discovery.experiment.members, gems, population, taken)
    if not plans:
        raise DataError(f"{exp}: no finished trial of the search wired any gem; nothing to confirm")
    th = check_settings(**settings)
    power = confirmation_power(discovery.verdicts, trials, [p.gem for p in plans], one_history=not fresh_paths(spec),
                               alpha=th.alpha, power=th.power, seeds=population,
                               default_seeds=spec.base_config().trainer.population)  # refuses before anything is claimed
    plans, notes, build = plan_confirmation(spec, trials, discovery.experiment.members, gems,
                                            {p.gem: p.seeds for p in power}, taken)
    if threads:
        log(f"tune-gems confirm: threads: {threads}")
    no_signal = tie_note(trials, spec.objective.metric)
    if no_signal:  # the sweep's closing warning, again before anything trains (and under the table)
        notes = [*notes, f"the search had {no_signal}"]
        log(f"tune-gems confirm: warning: the search had {no_signal}; its chosen trials are re-tested all the same")
    for p in power:
        log(f"tune-gems confirm: {p.gem}: {p.note}")
    lock = OutputLock(exp, FIELD).acquire()  # a second confirmation started meanwhile is refused here
    try:
        with stops_raise():
            return _run_confirmation(exp, out_path, default, spec, Planned(plans, notes, build, power), discovery, log,
                                     settings, record)
    finally:
        lock.release()


@dataclass(frozen=True)
class Planned:
    """What a confirmation will train (one trial per gem), the notes for what it cannot confirm, the
    config builder and each gem's `power` plan."""

    plans: list[Plan]
    notes: list[str]
    build: Callable[[Plan], Config]
    power: list


def _run_confirmation(exp: Path, out_path: Path, default: bool, spec: SweepSpec, planned: Planned, discovery,
                      log: Callable[[str], None], settings: dict[str, Any], record) -> "ConfirmOutcome":
    """Train the plans and publish the folder, holding the search's lock (`confirm`)."""
    from tune_gems.analysis.verdicts.search_choice import (FINAL_COLUMNS, candidate_count, format_confirmation,
                                                           one_history_final, side_by_side)
    from tune_gems.analysis.render.report import format_verdict_table
    from tune_gems.analysis.analyze import analyze
    from tune_gems.contracts.outputs import check_output_folder, publish_folder, temporary_folder, write_marker

    plans, notes, gems = planned.plans, planned.notes, list(discovery.verdicts["gem"])
    record.claim(out_path, log)
    tmp, held = temporary_folder(out_path)  # held while it trains: a later confirm tells it from a dead one's
    try:
        write_marker(tmp, KIND, **({"seal_opening": record.label} if record.label else {}))
        name = f"{discovery.experiment.labels[0]}-confirmation"
        write_tables(ExperimentStore(str(tmp.parent), tmp.name), run_plans(plans, planned.build, name, log, events_out=tmp,
                                                                             open_seal=record.opens_seal))
        # on one price history the rule's last stage is the search's selection (`rules.decision`)
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
        labelled = {"seal_opening": record.label} if record.label else {}
        table.assign(**labelled).to_csv(tmp / TABLE_FILE, index=False)
        confirmed.verdicts.drop(columns=FINAL_COLUMNS[1:], errors="ignore").assign(**labelled).to_csv(tmp / VERDICTS_FILE, index=False)
        text = format_confirmation(table)
        (tmp / REPORT_FILE).write_text(_report(exp, text, format_verdict_table(confirmed.verdicts, confirmed.placebo,
                                                                               confirmed.redundancy), general,
                                               fresh_paths(spec), record.label))
        check_output_folder(out_path, kind=KIND, field="--out", inputs=[exp], allow_inside=[exp] if default else ())
        publish_folder(tmp, out_path, kind=KIND)
        record.complete(out_path, plans, {n: (out_path / n).read_bytes() for n in (TABLE_FILE, VERDICTS_FILE)})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        record.withdraw(out_path)
        raise
    finally:
        os.close(held)
    return ConfirmOutcome(out_path, table, confirmed.verdicts, general, record.label)


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
    check_tables_unchanged(exp, marker, TABLE_FILES, RECORD_FIX)  # the seeds and folds it plans from are the search's
    return spec


def _final(history: pd.DataFrame, trial_id: str, column: str) -> float:
    h = history[history["trial_id"] == trial_id]
    if not len(h) or column not in h.columns:
        return math.nan
    return float(h.sort_values("epoch")[column].iloc[-1])


def _report(exp: Path, table: str, verdicts: str, notes: list[str], fresh: bool, label: str = "") -> str:
    data = "fresh synthetic paths" if fresh else "the search's own price data (so it is conditional on it)"
    sealed = [f"Final confirmation: its test segment is the search's sealed rows, {label}.", ""] if label else []
    lines = [f"# Confirmation of {exp}", "", *sealed,
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
