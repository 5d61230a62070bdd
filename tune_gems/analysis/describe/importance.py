"""Optuna parameter importances from the persisted study (`<experiment>/optuna_journal.log`); where
they mean nothing the table carries a note instead of an error."""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

import pandas as pd

IMPORTANCE_COLUMNS = ["study", "param", "importance", "n_complete", "note"]
MIN_COMPLETE = 2


def _note_row(study: str | None, n: int, note: str) -> dict:
    return {"study": study, "param": None, "importance": math.nan, "n_complete": n, "note": note}


def study_importances(name: str, study: Any, *, min_complete: int = MIN_COMPLETE) -> list[dict]:
    """Rows of `param_importances` for one study (a note row when skipped)."""
    import optuna
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    n = len(complete)
    if n < min_complete:
        return [_note_row(name, n, f"skipped: {n} complete trial(s), need {min_complete}")]
    values: dict[str, set] = {}
    for t in complete:
        for k, v in t.params.items():
            values.setdefault(k, set()).add(repr(v))
    if not values:
        return [_note_row(name, n, "skipped: the study has no parameters")]
    if all(len(v) < 2 for v in values.values()):
        return [_note_row(name, n, "skipped: single-valued search space (every parameter took one value)")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            imp = optuna.importance.get_param_importances(study)
        except Exception as err:  # an evaluator that cannot work on this study
            msg = " ".join(str(err).split())
            return [_note_row(name, n, f"skipped: {type(err).__name__}: {msg}")]
    notes = sorted({" ".join(str(w.message).split()) for w in caught})
    note = "; ".join(notes)
    return [{"study": name, "param": k, "importance": float(v), "n_complete": n, "note": note}
            for k, v in sorted(imp.items(), key=lambda kv: (-kv[1], kv[0]))]  # ties in name order, run to run


def param_importances(studies: Mapping[str, Any], *, min_complete: int = MIN_COMPLETE) -> pd.DataFrame:
    """Importances per study with Optuna's default evaluator (sum 1 per study); its warnings, or why a
    study was skipped (one row, param empty), go in `note`."""
    rows: list[dict] = []
    if not studies:
        rows.append(_note_row(None, 0, "skipped: no Optuna study found (no optuna_journal.log, or it holds no study)"))
    for name, study in studies.items():
        rows.extend(study_importances(name, study, min_complete=min_complete))
    return pd.DataFrame(rows, columns=IMPORTANCE_COLUMNS)
