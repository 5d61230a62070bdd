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
confirmation_power`, `rule_mde.rule_mde`), and says so before training; `--seeds` that cannot
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
the shrinkage), `verdicts.csv` (the confirmation's verdicts, the final ones) and `report.md`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tune_gems.analysis.search_choice import Choice, choose_per_gem, confirmation_power
from tune_gems.design.arm_sets import also_named, arm_aliases, confirmation_arms, with_arms
from tune_gems.config.schema import Config
from tune_gems.config.dotted import flatten
from tune_gems.config.yaml_io import MAX_YAML_BYTES
from tune_gems.contracts.errors import ConfigError, DataError, OutputInUseError
from tune_gems.contracts.output_lock import OutputLock
from tune_gems.contracts.outputs import MARKER_FILE, check_top_entries, marker_kind, marker_state
from tune_gems.contracts.paths import check_input_path
from tune_gems.contracts.run_record import check_data_unchanged, check_stored_unchanged, require_record
from tune_gems.stats.metrics import GEM_GAIN_PREFIX, MEMBER_IDS, VERDICT_GAIN_PREFIX, epoch_metrics, member_metrics
from tune_gems.contracts.result_files import EVAL_RETURNS_FILE, SPEC_FILE, TRIALS_FILE
from tune_gems.contracts.safe_files import entry_kind, read_regular, write_atomic
from tune_gems.sweep.results import TERMINATED, SweepTables, write_tables
from tune_gems.sweep.spec import FIRST_SEED_INDEX, SweepSpec
from tune_gems.sweep.spec_load import load_spec, trial_config
from tune_gems.sweep.storage import ExperimentStore

KIND = "confirm"
DEFAULT_OUT = "confirmation"
CHOICES_FILE = "choices.json"
TABLE_FILE = "confirmation.csv"
VERDICTS_FILE = "verdicts.csv"
REPORT_FILE = "report.md"
CONFIRMED_FILE = "confirmed.json"
"""In the search's folder: the record that it was confirmed (where, when, what was chosen)."""
MIN_SEEDS = 2
"""Fewest seeds per arm a confirmation may ask for (one seed gives no paired test)."""
RECORD_MAX_BYTES = 1 << 16
"""Largest `confirmed.json` read (one line per gem: a few hundred bytes)."""
FIELD = "EXPERIMENT_DIR"
RECORD_FIX = ("a confirmation re-trains exactly what the search recorded, so it needs the search's records intact: "
              "restore them, or run the search again")


@dataclass(frozen=True)
class Plan:
    """One confirmation trial: the gem, the discovery trial it re-tests, its fresh trial seed,
    first seed index and (with per-seed synthetic paths) the synthetic seed its paths count from."""

    gem: str
    trial_id: str
    seed: int
    first_seed_index: int
    synthetic_seed: int | None
    choice: Choice
    population: int = 0

    @property
    def path_seed(self) -> int | None:
        """The first fresh path (path of seed index s: synthetic seed + s); None on one history."""
        return None if self.synthetic_seed is None else self.synthetic_seed + self.first_seed_index

    @property
    def discovery_trial(self) -> str:
        return self.choice.trial_id


def searched_keys(spec: SweepSpec) -> list[str]:
    """The config keys the search set per trial (gem modes and weights, search.params)."""
    keys = [k for g in spec.search.gems for k in (f"gems.{g}.mode", f"gems.{g}.weight")]
    return keys + list(spec.search.params)


def _fresh_bases(trials: pd.DataFrame, members: pd.DataFrame) -> tuple[int, int, int | None]:
    """(first unused trial seed, first unused seed index, largest synthetic seed) of the
    discovery: a path is synthetic seed + seed index, so fresh indices over the largest
    synthetic seed give paths past every discovery path."""
    seeds = pd.to_numeric(trials.get("seed", pd.Series(dtype=float)), errors="coerce").dropna()
    seed_base = int(seeds.max()) + 1 if len(seeds) else 1
    syn = pd.to_numeric(trials.get("data.synthetic.seed", pd.Series(dtype=float)), errors="coerce").dropna()
    top_index = pd.to_numeric(members.get("seed_index", members.get("member", pd.Series(dtype=float))),
                              errors="coerce").max()
    index_base = int(top_index) + 1 if pd.notna(top_index) else 0
    return seed_base, index_base, (int(syn.max()) if len(syn) else None)


def fresh_paths(spec: SweepSpec) -> bool:
    """Whether a confirmation of this search trains on paths the search never saw (synthetic
    per-seed paths); otherwise it is on the search's one price history."""
    data = spec.base_config().data
    return data.source == "synthetic" and data.synthetic.paths == "per_seed"


def plan_confirmation(spec: SweepSpec, trials: pd.DataFrame, members: pd.DataFrame, gems: list[str],
                      population: int | dict[str, int] | None = None) -> tuple[list[Plan], list[str], Callable[[Plan], Config]]:
    """The confirmation trials (one per gem the search wired), the notes for the others, and the
    function that builds a plan's config (the chosen trial's, fresh seeds, the spec's design).
    `population`: seeds per arm, for every gem or per gem (default: the spec's); each gem's block
    of fresh seed indices follows the previous one's."""
    choices, notes = choose_per_gem(trials, gems, searched_keys(spec))
    seed_base, index_base, synthetic_seed = _fresh_bases(trials, members)
    base = spec.base_config()
    per_seed = fresh_paths(spec)
    sizes = [int(population.get(c.gem, base.trainer.population)) if isinstance(population, dict)
             else int(population or base.trainer.population) for c in choices]
    starts = [index_base + sum(sizes[:j]) for j in range(len(choices))]
    plans = [Plan(c.gem, f"confirm-{c.gem}", seed_base + j, starts[j],
                  (base.data.synthetic.seed if synthetic_seed is None else synthetic_seed) if per_seed else None, c,
                  sizes[j])
             for j, c in enumerate(choices)]

    def build(plan: Plan) -> Config:
        params = {**plan.choice.params, "seed": plan.seed, FIRST_SEED_INDEX: plan.first_seed_index}
        if plan.synthetic_seed is not None:
            params["data.synthetic.seed"] = plan.synthetic_seed
        if population is not None or plan.population != base.trainer.population:
            params["trainer.population"] = plan.population
        cfg = trial_config(spec.config, params)
        return with_arms(cfg, confirmation_arms(cfg, plan.gem), f"confirmation of {plan.gem}")

    if not per_seed:
        notes.append("one price history (a file or synthetic paths: shared): the confirmation has fresh seeds on "
                     "the same history, so it is conditional on that history")
    return plans, notes, build


def _trial_tables(trainer, plan: Plan, experiment: str) -> dict[str, Any]:
    """One trainer's rows for the experiment tables (the shapes `sweep.results.collect_tables` writes)."""
    from tune_gems.design.arms import resolved_settings

    cfg = trainer.cfg
    label = cfg.label()
    arm_names = trainer.arms.names if cfg.arms is not None else ()
    cols = epoch_metrics(cfg.plugins, arm_names)
    ids = {"experiment": experiment, "trial_id": plan.trial_id, "config_label": label}
    history = [{**ids, **{m: r.get(m) for m in cols}} for r in trainer.history]
    members = [{**ids, **{k: r.get(k) for k in MEMBER_IDS}, **{m: r.get(m) for m in member_metrics(cfg.plugins)}}
               for r in trainer.member_history]
    last = trainer.history[-1] if trainer.history else {}
    trial = {"experiment": experiment, "trial_id": plan.trial_id, "status": TERMINATED, "error": None,
             "epochs_done": len(trainer.history), "config_label": label, "seed": cfg.seed,
             **flatten(cfg.to_dict()), **{m: last.get(m, math.nan) for m in cols},
             "objective": last.get(f"{VERDICT_GAIN_PREFIX}{plan.gem}", math.nan), "node_id": None, "gpu_ids": None}
    aliases = arm_aliases(cfg)  # the control is also without-<gem> (arm_designs.confirmation_arms)
    arms = [{"trial_id": plan.trial_id, "arm": a.name, **({"also_named": also_named(aliases, a.name)} if aliases else {}),
             **resolved_settings(a.config)} for a in trainer.arms.arms]
    baselines = [{"experiment": experiment, "trial_id": plan.trial_id, **b} for b in trainer.baselines().to_dict("records")]
    with tempfile.TemporaryDirectory() as d:
        trainer.window.write(d)
        returns = (Path(d) / EVAL_RETURNS_FILE).read_bytes()
    return dict(trial=trial, history=history, members=members, arms=arms, baselines=baselines, returns=returns)


def run_plans(plans: list[Plan], build: Callable[[Plan], Config], experiment: str, log: Callable[[str], None]) -> SweepTables:
    """Train every plan once, in turn, in this process; the experiment tables of all of them."""
    from tune_gems.gems import manifest
    from tune_gems.design.arms import run_arms
    from tune_gems.design.resources import check_training_fits
    from tune_gems.trainer.train_command import train_epochs
    from tune_gems.trainer.trainer import Trainer

    configs = [build(p) for p in plans]
    arms = [run_arms(cfg) for cfg in configs]  # each run's arms, expanded once
    for cfg, run in zip(configs, arms):  # every config and its memory checked before the first trains
        check_training_fits(cfg, members=run.members)
    parts: dict[str, list] = {"trial": [], "history": [], "members": [], "arms": [], "baselines": []}
    returns: dict[str, bytes] = {}
    for plan, cfg, run in zip(plans, configs, arms):
        last = plan.first_seed_index + plan.population - 1
        log(f"tune-gems confirm: {plan.gem}: trial {plan.discovery_trial}'s configuration ({cfg.label()}) against "
            f"itself with {plan.gem} measured; fresh seed {plan.seed}, seed indices {plan.first_seed_index}-{last}"
            + (f", paths {plan.path_seed}-{plan.path_seed + plan.population - 1}" if plan.path_seed is not None else ""))
        trainer = Trainer(cfg, log=log, arms=run)
        train_epochs(trainer)
        rows = _trial_tables(trainer, plan, experiment)
        for key in parts:
            parts[key].extend(rows[key] if isinstance(rows[key], list) else [rows[key]])
        returns[plan.trial_id] = rows["returns"]
    plugins = list(configs[0].plugins) if configs else []
    return SweepTables(trials=pd.DataFrame(parts["trial"]), history=pd.DataFrame(parts["history"]),
                       members=pd.DataFrame(parts["members"]), arms=pd.DataFrame(parts["arms"]),
                       baselines=pd.DataFrame(parts["baselines"]), gems=manifest(plugins), eval_returns=returns)


@dataclass
class ConfirmOutcome:
    out: Path
    table: pd.DataFrame
    verdicts: pd.DataFrame
    notes: list[str]


def confirm(experiment: str | Path, out: str | Path | None = None, *, population: int | None = None,
            log: Callable[[str], None] = print, **settings: Any) -> ConfirmOutcome:
    """Confirm the search in `experiment` (see the module docstring); `settings` are the
    analysis settings (alpha, rope, last_k, ...), used for both the discovery and the
    confirmation verdicts. Everything is checked before training (the search's records first,
    fail-closed); the folder appears whole."""
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
    _check_not_confirmed(exp)
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
    for p in power:
        log(f"tune-gems confirm: {p.gem}: {p.note}")
    lock = OutputLock(exp, FIELD).acquire()  # a second confirmation started meanwhile is refused here
    try:
        with _stops_raise():
            return _run_confirmation(exp, out_path, default, spec, plans, notes, build, gems, discovery, log, settings,
                                     power)
    finally:
        lock.release()


def _run_confirmation(exp: Path, out_path: Path, default: bool, spec: SweepSpec, plans: list[Plan], notes: list[str],
                      build: Callable[[Plan], Config], gems: list[str], discovery, log: Callable[[str], None],
                      settings: dict[str, Any], power: list) -> "ConfirmOutcome":
    """Train the plans and publish the folder, holding the search's lock (`confirm`)."""
    from tune_gems.analysis.search_choice import candidate_count, format_confirmation, one_history_final, side_by_side
    from tune_gems.analysis.report import format_verdict_table
    from tune_gems.analysis.analyze import analyze
    from tune_gems.contracts.outputs import check_output_folder, publish_folder, write_marker

    if _check_not_confirmed(exp):  # under the lock: a "running" record is a dead confirmation's
        _clear_stale(exp, out_path, log)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    record = _claim_confirmation(exp, out_path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.tmp-", dir=out_path.parent))
    try:
        write_marker(tmp, KIND)
        name = f"{discovery.experiment.labels[0]}-confirmation"
        write_tables(ExperimentStore(str(tmp.parent), tmp.name), run_plans(plans, build, name, log))
        confirmed = analyze(tmp, **settings)
        gains = {p.gem: _final(confirmed.experiment.history, p.trial_id, f"{VERDICT_GAIN_PREFIX}{p.gem}") for p in plans}
        per_gem = {n.split(":", 1)[0]: n.split(": ", 1)[1] for n in notes if ":" in n and n.split(":", 1)[0] in gems}
        final = None if fresh_paths(spec) else one_history_final(
            confirmed.verdicts, {p.gem: candidate_count(discovery.experiment.trials, p.gem) for p in plans})
        table = side_by_side([p.choice for p in plans], discovery.verdicts, confirmed.verdicts, gains, per_gem,
                             power=power, final=final)
        general = [n for n in notes if n.split(":", 1)[0] not in gems]
        (tmp / CHOICES_FILE).write_text(json.dumps([asdict(p) for p in plans], indent=2, default=str) + "\n")
        table.to_csv(tmp / TABLE_FILE, index=False)
        confirmed.verdicts.to_csv(tmp / VERDICTS_FILE, index=False)
        text = format_confirmation(table)
        (tmp / REPORT_FILE).write_text(_report(exp, text, format_verdict_table(confirmed.verdicts, confirmed.placebo,
                                                                               confirmed.redundancy), general))
        check_output_folder(out_path, kind=KIND, field="--out", inputs=[exp], allow_inside=[exp] if default else ())
        publish_folder(tmp, out_path, kind=KIND)
        _write_record(record, out_path, plans)
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


@contextlib.contextmanager
def _stops_raise():
    """SIGTERM (and SIGHUP) raise SystemExit(128 + signal) while a confirmation trains, so its
    clean-up runs (the temporary folder removed, the "running" record withdrawn) as for Ctrl-C;
    only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    caught = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, stop) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _clear_stale(exp: Path, out: Path, log: Callable[[str], None]) -> None:
    """Remove what a confirmation killed outright left (its lock is free, so it is dead): the
    "running" record, and its temporary folders beside `out` (those holding nothing, or carrying
    confirm's marker and nothing else than it writes); anything else stays."""
    (exp / CONFIRMED_FILE).unlink(missing_ok=True)
    cleared = 0
    for tmp in sorted(out.parent.glob(f".{out.name}.tmp-*")) if out.parent.is_dir() else []:
        if entry_kind(tmp) != "folder":
            continue
        if marker_kind(tmp) == KIND or not any(tmp.iterdir()):
            shutil.rmtree(tmp, ignore_errors=True)
            cleared += 1
    log(f"tune-gems confirm: a confirmation of {exp} was killed before it finished (its lock is free); "
        f"cleared its record{f' and {cleared} temporary folder(s)' if cleared else ''}, starting again")


def _check_not_confirmed(exp: Path) -> bool:
    """DataError when the search was confirmed already, or is being confirmed by a live process;
    True when a "running" record of a dead confirmation is there (its lock is free: the next
    confirmation clears it), False when there is no record. The record is read only as a
    regular file (never through a link, non-blocking, bounded): a FIFO or a link to /dev/zero
    in its place is refused, not waited on."""
    record = exp / CONFIRMED_FILE
    kind = entry_kind(record)
    if kind is None:
        return False
    if kind != "file":
        raise DataError(f"{record} is a {kind}, not the record tune-gems writes; remove it (confirm keeps its record there)")
    try:
        info = json.loads(read_regular(record, RECORD_MAX_BYTES, None, DataError, follow=False))
        where, status = info.get("out", "?"), info.get("status")
    except (ValueError, AttributeError):
        where, status = "?", None
    if status == "running":
        try:
            OutputLock(exp, FIELD).check_free()
        except OutputInUseError:
            raise DataError(f"{record}: a confirmation of this search is running (into {where}); wait for it") from None
        return True
    raise DataError(f"{record}: this search was confirmed already (into {where}); a search is confirmed once, "
                    "and that confirmation's verdict is the final one")


def _claim_confirmation(exp: Path, out: Path) -> Path:
    """Create EXP/confirmed.json exclusively (two confirms of one search at once: one wins)."""
    from datetime import datetime, timezone

    record = exp / CONFIRMED_FILE
    try:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        _check_not_confirmed(exp)
        raise
    with os.fdopen(fd, "w") as f:
        json.dump({"out": str(out), "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
                   "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}, f)
    return record


def _write_record(record: Path, out: Path, plans: list[Plan]) -> None:
    from datetime import datetime, timezone

    text = json.dumps({"out": str(out), "status": "done", "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "trials": {p.gem: {"discovery_trial": p.discovery_trial, "confirmation_trial": p.trial_id,
                                          "seed": p.seed, "first_seed_index": p.first_seed_index,
                                          "first_path": p.path_seed} for p in plans}}, indent=2)
    write_atomic(record, text + "\n")  # no-follow temporary file, then a rename (safe_files)


def _final(history: pd.DataFrame, trial_id: str, column: str) -> float:
    h = history[history["trial_id"] == trial_id]
    if not len(h) or column not in h.columns:
        return math.nan
    return float(h.sort_values("epoch")[column].iloc[-1])


def _report(exp: Path, table: str, verdicts: str, notes: list[str]) -> str:
    lines = [f"# Confirmation of {exp}", "",
             "Each gem's chosen configuration (the search's best `verdict_gain_<gem>`), trained once more beside its "
             "control on fresh member seeds and fresh synthetic paths. `discovery gain` is the chosen trial's own "
             "(selected, so inflated) gain; `confirmation gain` the same statistic on the fresh run; `shrinkage` their "
             "difference. Each gem's confirmation trained the seeds that make its MDE at most the discovery's (same "
             "rule, same units: `discovery_mde`, `confirmation_mde`, `confirmation_seeds`). The final verdict is the "
             "confirmation's; on one price history it must also survive the selection-adjusted gate (`final_rule`) "
             "(docs/analysis.md, \"Search, then confirm\" and \"Confirmation power\").", "",
             "```", table, "```", "", "## Confirmation verdicts", "", "```", verdicts, "```"]
    lines += [f"\nNote: {n}." for n in notes]
    return "\n".join(lines) + "\n"
