"""The end of a sweep: the journal tidied and joined, the tables written, the summary printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tune_gems.contracts.result_files import JOURNAL_FILE
from tune_gems.sweep.console import closing_table, tie_note
from tune_gems.sweep.results import UNFINISHED, collect_tables, write_tables
from tune_gems.sweep.resume import resume_command, stored_trial_statuses
from tune_gems.sweep.search import close_orphaned_trials, optuna_trial_numbers
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.storage import ExperimentStore


@dataclass
class SweepOutcome:
    """What `run_sweep` returns; `interrupted`: Ctrl-C stopped it (`resume_command` continues it)."""

    experiment: str  # folder (path or URI)
    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    interrupted: bool = False
    resume_command: str = ""


def print_summary(trials: pd.DataFrame, experiment: str, mode: str = "max", metric: str = "objective") -> None:
    table = closing_table(trials, mode)  # the best objective first (tune_gems.sweep.console)
    note = tie_note(trials, metric)
    table += f"\nnote: {note}" if note else ""
    # flushed at once: a driver attached to a running cluster can exit without flushing stdout
    print(f"\n{table}\n\nresults: {experiment}/{{trials,history,members}}.parquet\nanalyze: tune-gems analyze {experiment}", flush=True)


def finish_sweep(results, spec: SweepSpec, store: ExperimentStore, name: str, spec_path: Path) -> SweepOutcome:
    """Tables and summary from Tune's ResultGrid; unfinished trials are marked UNFINISHED for `--resume`."""
    statuses = stored_trial_statuses(store)
    interrupted = any(s not in ("TERMINATED", "ERROR") for s in statuses.values())
    journal = store.journal_path(JOURNAL_FILE)
    if journal.is_file() and not interrupted:  # unfinished trials are still Tune's: --resume finishes them
        closed = close_orphaned_trials(name, journal)
        if closed:
            print(f"tune-gems sweep: marked {closed} orphaned Optuna trial(s) FAIL (asked before a driver restart)", flush=True)
    tables = collect_tables(results, spec.config, name, statuses, spec.design)
    if journal.is_file() and len(tables.trials):  # the join key to the Optuna study
        numbers = optuna_trial_numbers(name, journal)
        tables.trials["optuna_trial"] = tables.trials["trial_id"].map(numbers).astype("Int64")
    write_tables(store, tables)
    trials, history, members = tables.trials, tables.history, tables.members
    store.push_journal(JOURNAL_FILE)
    print_summary(trials, store.uri, spec.objective.mode, spec.objective.metric)
    command = resume_command(spec_path, store, name)
    if interrupted:  # the command that continues it is printed once, by the caller (the CLI's last line)
        n = int((trials["status"] == UNFINISHED).sum()) if len(trials) else 0
        print(f"tune-gems sweep: interrupted with {n} trial(s) unfinished (status {UNFINISHED} in trials.parquet)", flush=True)
    return SweepOutcome(store.uri, trials, history, members, interrupted, command)
