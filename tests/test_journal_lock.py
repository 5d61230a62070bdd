"""A driver killed while Optuna writes the study journal leaves Optuna's lock behind: a symlink
`optuna_journal.log.lock -> optuna_journal.log` (JournalFileSymlinkLock). The experiment folder's
checks refuse symlinks (tune-gems never writes through one), which made `--resume` after such a
kill exit 2 (found by tests/test_faults.py's killed-driver test under load). Optuna's own lock is
told apart from any other symlink, and `--resume` removes it once it holds the folder's lock."""

from __future__ import annotations

import os

import optuna
import pytest

from tune_gems.contracts.errors import OutputError
from tune_gems.contracts.outputs import check_top_entries, is_journal_lock
from tune_gems.contracts.result_files import JOURNAL_FILE
from tune_gems.sweep.search import clear_stale_journal_lock, journal_storage


def _journal(tmp_path):
    journal = tmp_path / JOURNAL_FILE
    optuna.create_study(study_name="s", storage=journal_storage(journal)).ask()
    return journal


def test_optunas_own_lock_is_the_only_symlink_the_folder_checks_let_pass(tmp_path):
    journal = _journal(tmp_path)
    lock = tmp_path / (JOURNAL_FILE + ".lock")
    os.symlink(str(journal), lock)  # what optuna's JournalFileSymlinkLock.acquire creates
    assert is_journal_lock(lock)
    check_top_entries(tmp_path, "--name")
    lock.unlink()
    os.symlink(JOURNAL_FILE, lock)  # relative target, same file
    assert is_journal_lock(lock)
    other = tmp_path / "elsewhere"
    other.write_text("x")
    lock.unlink()
    os.symlink(str(other), lock)  # the lock's name, another target: not optuna's
    assert not is_journal_lock(lock)
    with pytest.raises(OutputError, match="is a symlink"):
        check_top_entries(tmp_path, "--name")
    lock.unlink()
    os.symlink(str(journal), tmp_path / "trials.parquet")  # another name
    with pytest.raises(OutputError, match="trials.parquet is a symlink"):
        check_top_entries(tmp_path, "--name")


def test_resume_clears_a_killed_drivers_lock_and_optuna_writes_at_once(tmp_path):
    journal = _journal(tmp_path)
    lock = tmp_path / (JOURNAL_FILE + ".lock")
    os.symlink(str(journal), lock)
    assert clear_stale_journal_lock(journal) and not lock.exists() and not lock.is_symlink()
    assert not clear_stale_journal_lock(journal)  # nothing left to clear
    study = optuna.load_study(study_name="s", storage=journal_storage(journal))
    study.tell(study.ask(), 1.0)  # no 30 s wait for optuna's grace period
    assert len(study.trials) == 2
