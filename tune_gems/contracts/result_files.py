"""The names of the files a run writes and of the id columns of its tables, in one place.

A leaf module (it imports nothing of tune_gems), shared by the writers (`tune_gems.sweep`,
`tune_gems.trainer.train_command`) and the reader (`tune_gems.analysis.read.load`), so a renamed file cannot
leave the analysis looking for the old name. docs/results.md describes every file.
"""

from __future__ import annotations

# -- a sweep's experiment folder ---------------------------------------------------------------
SPEC_FILE = "spec.yaml"
TRIALS_FILE = "trials.parquet"
HISTORY_FILE = "history.parquet"
MEMBERS_FILE = "members.parquet"
ARMS_PARQUET = "arms.parquet"
FOLDS_PARQUET = "folds.parquet"
HISTORIES_PARQUET = "histories.parquet"
BASELINES_PARQUET = "baselines.parquet"
JOURNAL_FILE = "optuna_journal.log"
JOURNAL_LOCK_SUFFIX = ".lock"
"""Optuna's journal lock beside the journal (optuna.storages.journal's LOCK_FILE_SUFFIX)."""
EVAL_RETURNS_DIR = "eval_returns"
"""Per trial, `<EVAL_RETURNS_DIR>/<trial_id>.npz` (`trial_eval_returns`): the EVAL_RETURNS_FILE of
its last checkpoint."""

# -- a sweep trial's checkpoint and reports (written by sweep/trainable.py, read by sweep/results.py)
CHECKPOINT_HISTORY_FILE = "history.json"
"""Beside a trial's checkpoint: every epoch's history and member rows up to it."""
MEMBERS_KEY = "members_json"
"""The key of a Tune report that carries the epoch's member rows as one JSON string."""
BASELINES_KEY = "baselines_json"
"""The key of a trial's first report that carries its baselines table as JSON records."""
FOLDS_KEY = "folds_json"
"""The key of a trial's first report that carries its walk-forward fold table (Trainer.fold_table())."""
HISTORIES_KEY = "histories_json"
"""The key of a trial's first report that carries its price-history table (Trainer.history_table())."""

# -- a train run's folder ------------------------------------------------------------------------
CONFIG_FILE = "config.yaml"
HISTORY_CSV = "history.csv"
MEMBERS_CSV = "members.csv"
ARMS_CSV = "arms.csv"
FOLDS_CSV = "folds.csv"
HISTORIES_CSV = "histories.csv"
BASELINES_CSV = "baselines.csv"
SUMMARY_FILE = "summary.json"
CHECKPOINT_FILE = "checkpoint.pt"

# -- both ------------------------------------------------------------------------------------------
EVAL_RETURNS_FILE = "eval_returns.npz"
"""The per-step validation returns and positions of the last `trainer.objective_last_k`
evaluations (tune_gems.trainer.eval_window.EvalWindow.write): what the market-noise interval resamples. Beside a
train run's tables, and in every sweep checkpoint (collected into EVAL_RETURNS_DIR)."""
EVAL_RETURNS_FORMAT = 1
"""Version of the file's layout (its `format` array); a reader refuses versions it does not know."""
EVAL_RETURNS_ARRAYS = (
    "format", "epochs", "returns", "positions", "diverged", "asset", "member", "arm", "seed_index",
    "seed", "path", "cost", "periods_per_year", "segment",
)
"""The arrays of EVAL_RETURNS_FILE (docs/results.md "eval_returns.npz" gives shapes and meanings)."""
EVAL_RETURNS_FOLD_ARRAYS = ("fold", "window_start")
"""Arrays a file written with walk-forward folds also holds (every file written now has them):
`fold` [P] int64, each member's fold, and `window_start` [P] int64, the series row of its
validation window's first decision (every fold's window has the same length T). A file without
them is a one-fold file (fold 0 for every member)."""
EVAL_RETURNS_HISTORY_ARRAYS = ("history",)
"""Arrays a file written with price histories also holds (every file written now has it):
`history` [P] int64, each member's price history (HISTORIES_CSV / HISTORIES_PARQUET). Members are
in population order, history-major, then fold, arm, seed (tune_gems.design.arms.MemberLayout). A
file without it is a one-history file (history 0 for every member)."""
GEMS_FILE = "gems.json"
"""The gems the run knew (built-ins and plug-ins): tune_gems.gems.manifest()."""
READ_FILES = (SPEC_FILE, TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, ARMS_PARQUET, FOLDS_PARQUET, HISTORIES_PARQUET, BASELINES_PARQUET,
              JOURNAL_FILE, CONFIG_FILE, HISTORY_CSV, MEMBERS_CSV, ARMS_CSV, FOLDS_CSV, HISTORIES_CSV, BASELINES_CSV, SUMMARY_FILE,
              EVAL_RETURNS_FILE, GEMS_FILE)
"""The files of a sweep or train folder that the analysis reads (each must be a regular file)."""

ID_COLUMNS = ("experiment", "trial_id", "config_label")
"""The leading columns of every sweep table row."""
TRIAL_COLUMNS = ("status", "error", "epochs_done", "seed", "objective", "node_id", "gpu_ids", "included", "arm")
"""The columns of a trials row besides ID_COLUMNS, the flat config keys and the history metrics."""
MEMBER_ID_COLUMNS = ("epoch", "member", "seed", "arm", "seed_index", "fold", "history")
"""Which member a members row is: its epoch, index on the population axis, own seed, arm, the
seed index it shares with every other arm, fold and history, its walk-forward fold (0 without
`data.folds`; the fold's windows are in FOLDS_CSV / FOLDS_PARQUET) and its price history (0 with
one; each history's name and source are in HISTORIES_CSV / HISTORIES_PARQUET). Tables written
before histories have no `history` column: a reader takes it as 0 (one history)."""



def trial_eval_returns(trial_id: str) -> str:
    """The file name, inside EVAL_RETURNS_DIR, of one sweep trial's saved validation returns."""
    return f"{trial_id}.npz"


ARMS_FILES = (ARMS_PARQUET, ARMS_CSV)
FOLDS_FILES = (FOLDS_PARQUET, FOLDS_CSV)
"""One row per walk-forward fold (tune_gems.data.segments.FOLD_TABLE_COLUMNS; a sweep's adds trial_id)."""
HISTORIES_FILES = (HISTORIES_PARQUET, HISTORIES_CSV)
"""One row per price history (tune_gems.data.histories.HISTORY_TABLE_COLUMNS; a sweep's adds
experiment and trial_id); absent in folders written before histories (one history)."""
BASELINES_FILES = (BASELINES_PARQUET, BASELINES_CSV)
TABLE_FILES = (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, *ARMS_FILES, *FOLDS_FILES, *HISTORIES_FILES, *BASELINES_FILES,
               GEMS_FILE)
"""Every table the analysis reads from a folder (a sweep writes the parquet ones and gems.json once, at
its end, and records their checksums: tune_gems.contracts.run_record.TABLES_KEY)."""
