"""The end of a sweep: which trials Tune finished (its stored state), the Optuna journal tidied
and joined, the result tables written, the summary printed, and the SweepOutcome returned (with
the command that continues an interrupted sweep)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tune_gems.contracts.result_files import JOURNAL_FILE
from tune_gems.sweep.console import closing_table
from tune_gems.sweep.results import UNFINISHED, collect_tables, write_tables
from tune_gems.sweep.resume import resume_command
from tune_gems.sweep.search import close_orphaned_trials, optuna_trial_numbers
from tune_gems.sweep.spec import SweepSpec
from tune_gems.sweep.storage import ExperimentStore


@dataclass
class SweepOutcome:
    """What `run_sweep` returns: the experiment folder, its three result tables, and whether Ctrl-C
    stopped it early (then `resume_command` continues it)."""

    experiment: str  # folder (path or URI)
    trials: pd.DataFrame
    history: pd.DataFrame
    members: pd.DataFrame
    interrupted: bool = False
    resume_command: str = ""


def print_summary(trials: pd.DataFrame, experiment: str, mode: str = "max") -> None:
    table = closing_table(trials, mode)  # the best objective first (tune_gems.sweep.console)
    # flushed at once: a driver attached to a running cluster can exit without flushing stdout
    print(f"\n{table}\n\nresults: {experiment}/{{trials,history,members}}.parquet\nanalyze: tune-gems analyze {experiment}", flush=True)


def finish_sweep(results, spec: SweepSpec, store: ExperimentStore, name: str, spec_path: Path) -> SweepOutcome:
    """Tables and summary from Tune's ResultGrid `results`; an interrupted sweep's unfinished trials
    are marked UNFINISHED and left (with their Optuna trials) to `--resume`."""
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
    print_summary(trials, store.uri, spec.objective.mode)
    command = resume_command(spec_path, store, name)
    if interrupted:
        n = int((trials["status"] == UNFINISHED).sum()) if len(trials) else 0
        print(f"tune-gems sweep: interrupted with {n} trial(s) unfinished; continue with: {command}", flush=True)
    return SweepOutcome(store.uri, trials, history, members, interrupted, command)


def stored_trial_statuses(store: ExperimentStore) -> dict[str, str]:
    """{trial_id: status} from Tune's newest persisted experiment state (what `--resume` will
    read). Tune writes it one last time when a sweep is interrupted, with the unfinished trials
    RUNNING or PENDING, then marks its in-memory trials TERMINATED while cleaning up: so the
    file, not the ResultGrid, tells an interrupted trial from a finished one."""
    import json

    import pyarrow.fs as pafs

    try:
        infos = store.fs.get_file_info(pafs.FileSelector(store.root, recursive=False))
        states = sorted(i.path for i in infos if i.base_name.startswith("experiment_state-") and i.base_name.endswith(".json"))
        if not states:
            return {}
        with store.fs.open_input_stream(states[-1]) as f:
            data = json.loads(f.read())
        out = {}
        for entry in data.get("trial_data", []):
            trial = json.loads(entry[0])
            out[str(trial["trial_id"])] = str(trial["status"])
        return out
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}
