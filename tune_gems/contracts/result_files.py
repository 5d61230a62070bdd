"""The names of the files a run writes and of its tables' id columns, in one place (docs/results.md)."""

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
"""Per trial, `<EVAL_RETURNS_DIR>/<trial_id>.npz`: the EVAL_RETURNS_FILE of its last checkpoint."""

# -- a sweep trial's checkpoint and reports (written by sweep/trainable.py, read by sweep/results.py)
CHECKPOINT_HISTORY_FILE = "history.json"
"""Beside a trial's checkpoint: every epoch's history and member rows up to it."""
MEMBERS_KEY = "members_json"
"""Tune report key: the epoch's member rows as one JSON string."""
BASELINES_KEY = "baselines_json"
"""Key of a trial's first report: its baselines table as JSON records."""
FOLDS_KEY = "folds_json"
"""Key of a trial's first report: its fold table (Trainer.fold_table())."""
HISTORIES_KEY = "histories_json"
"""Key of a trial's first report: its price-history table (Trainer.history_table())."""

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
"""The last `trainer.objective_last_k` validation returns and positions (`eval_window.EvalWindow`)."""
EVAL_RETURNS_FORMAT = 1
"""The file's layout version (its `format` array); a reader refuses versions it does not know."""
EVAL_RETURNS_ARRAYS = ("format", "epochs", "returns", "positions", "diverged", "asset", "member", "arm", "seed_index",
    "seed", "path", "cost", "periods_per_year", "segment")
EVAL_RETURNS_FOLD_ARRAYS = ("fold", "window_start")
"""Arrays of a file with folds: `fold`, `window_start` [P] int64; without them, one fold."""
EVAL_RETURNS_HISTORY_ARRAYS = ("history",)
"""Arrays of a file with price histories: `history` [P] int64; without it, one history."""
GEMS_FILE = "gems.json"
READ_FILES = (SPEC_FILE, TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, ARMS_PARQUET, FOLDS_PARQUET, HISTORIES_PARQUET, BASELINES_PARQUET,
              JOURNAL_FILE, CONFIG_FILE, HISTORY_CSV, MEMBERS_CSV, ARMS_CSV, FOLDS_CSV, HISTORIES_CSV, BASELINES_CSV, SUMMARY_FILE,
              EVAL_RETURNS_FILE, GEMS_FILE)
"""The files of a sweep or train folder that the analysis reads (each must be a regular file)."""

ID_COLUMNS = ("experiment", "trial_id", "config_label")
"""The leading columns of every sweep table row."""
TRIAL_COLUMNS = ("status", "error", "epochs_done", "seed", "objective", "node_id", "gpu_ids", "included", "arm")
"""The columns of a trials row besides ID_COLUMNS, the flat config keys and the history metrics."""
MEMBER_ID_COLUMNS = ("epoch", "member", "seed", "arm", "seed_index", "fold", "history")
"""Which member a members row is. Older tables without `history` are read as history 0."""



def trial_eval_returns(trial_id: str) -> str:
    return f"{trial_id}.npz"


ARMS_FILES = (ARMS_PARQUET, ARMS_CSV)
FOLDS_FILES = (FOLDS_PARQUET, FOLDS_CSV)
HISTORIES_FILES = (HISTORIES_PARQUET, HISTORIES_CSV)
"""One row per price history; absent in folders written before histories (one history)."""
BASELINES_FILES = (BASELINES_PARQUET, BASELINES_CSV)
TABLE_FILES = (TRIALS_FILE, HISTORY_FILE, MEMBERS_FILE, *ARMS_FILES, *FOLDS_FILES, *HISTORIES_FILES, *BASELINES_FILES,
               GEMS_FILE)
"""Every table the analysis reads from a folder (checksummed: `run_record.TABLES_KEY`)."""
