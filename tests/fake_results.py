"""Build small synthetic experiment folders (docs/results.md schema) with known answers.

Tests of the analysis write trials/history/members parquet files by hand and a real Optuna
journal study, so they need neither Ray nor the trainer. A trial's member Sharpe at its final
epoch is exactly what the test asks for; earlier epochs are scaled down (so a statistic that
wrongly reads a non-final epoch gets a different number).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tune_gems.metrics import EPOCH_METRICS, GEM_KEYS, MEMBER_METRICS

GEMS = ("g6", "g10", "g12")
LOSS = 2.0


@dataclass
class FakeTrial:
    trial_id: str
    modes: dict[str, str]
    val: list[float]
    test: list[float] | None = None
    seeds: list[int] | None = None
    gem_rel: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    status: str = "TERMINATED"
    error: str | None = None
    diverged: bool = False
    epochs: int = 3

    @property
    def label(self) -> str:
        return " ".join(f"{g}={self.modes.get(g, 'off')}" for g in GEMS) + " sn=on noisy=on"

    @property
    def member_seeds(self) -> list[int]:
        return list(self.seeds) if self.seeds is not None else list(range(len(self.val)))


def _gem_values(t: FakeTrial) -> dict[str, float]:
    out = {}
    for g in GEMS:
        metric = GEM_KEYS[g]
        if t.modes.get(g, "off") == "off":
            out[metric], out[f"{metric}_rel"] = np.nan, np.nan
        else:
            rel = t.gem_rel.get(g, 0.01)
            out[metric], out[f"{metric}_rel"] = rel * LOSS, rel
    return out


def _tables(name: str, trials: list[FakeTrial]):
    t_rows, h_rows, m_rows = [], [], []
    for t in trials:
        val = np.asarray(t.val, float)
        test = np.asarray(t.test if t.test is not None else val - 0.5, float)
        gems = _gem_values(t)
        seeds = t.member_seeds
        last = None
        for e in range(1, t.epochs + 1):
            final = e == t.epochs
            scale = e / t.epochs
            v = val * scale
            div = t.diverged and final
            if div:
                v = v.copy()
                v[0] = np.nan
            te = test if (final and not t.diverged and t.status != "ERROR") else np.full(len(val), np.nan)
            hist = {m: np.nan for m in EPOCH_METRICS}
            hist.update(
                epoch=e, env_steps=1000 * e, updates=100 * e, loss=np.nan if div else LOSS,
                q_mean=0.1, grad_norm=1.0, noisy_sigma=0.5,
                val_sharpe_mean=np.nanmean(v), val_sharpe_std=np.nanstd(v, ddof=1),
                val_sharpe_min=np.nanmin(v), val_sharpe_max=np.nanmax(v),
                test_sharpe_mean=np.nanmean(te) if np.isfinite(te).any() else np.nan,
                test_sharpe_std=np.nanstd(te, ddof=1) if np.isfinite(te).any() else np.nan,
                diverged=bool(div), sps=1e5, **gems,
            )
            h_rows.append({"experiment": name, "trial_id": t.trial_id, "config_label": t.label, **hist})
            last = hist
            for i, s in enumerate(seeds):
                mem = {m: np.nan for m in MEMBER_METRICS}
                mem.update(
                    val_sharpe=v[i], test_sharpe=te[i], loss=np.nan if (div and i == 0) else LOSS,
                    q_mean=0.1, grad_norm=1.0, diverged=bool(div and i == 0), **gems,
                )
                m_rows.append({"experiment": name, "trial_id": t.trial_id, "config_label": t.label,
                               "epoch": e, "member": i, "seed": s, **mem})
        row = {
            "experiment": name, "trial_id": t.trial_id, "status": t.status, "error": t.error,
            "epochs_done": t.epochs, "config_label": t.label, "seed": seeds[0],
        }
        for g in GEMS:
            row[f"gems.{g}.mode"] = t.modes.get(g, "off")
            row[f"gems.{g}.weight"] = t.weights.get(g, 0.1)
        row.update({"model.spectral_norm": True, "model.noisy": True, "trainer.population": len(seeds)})
        row.update(last)
        row["objective"] = last["val_sharpe_mean"]
        t_rows.append(row)
    return pd.DataFrame(t_rows), pd.DataFrame(h_rows), pd.DataFrame(m_rows)


def write_journal(path: Path, study_name: str, trials: list[FakeTrial]) -> None:
    """A real Optuna journal study: one trial per FakeTrial (ERROR / diverged -> FAIL)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize")
    for t in trials:
        params, dists = {}, {}
        for g in GEMS:
            mode = t.modes.get(g, "off")
            if mode == "off":
                continue
            params[f"gems.{g}.mode"] = mode
            dists[f"gems.{g}.mode"] = CategoricalDistribution(["measure", "wire"])
            if mode == "wire":
                params[f"gems.{g}.weight"] = t.weights.get(g, 0.1)
                dists[f"gems.{g}.weight"] = FloatDistribution(1e-3, 1.0, log=True)
        ok = t.status != "ERROR" and not t.diverged
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE if ok else TrialState.FAIL,
                value=float(np.mean(t.val)) if ok else None,
                params=params,
                distributions=dists,
            )
        )


def write_experiment(folder: str | Path, trials: list[FakeTrial], *, journal: bool = True) -> Path:
    """Write trials/history/members parquet (+ optuna_journal.log) into `folder`; return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tr, hi, me = _tables(folder.name, trials)
    tr.to_parquet(folder / "trials.parquet", index=False)
    hi.to_parquet(folder / "history.parquet", index=False)
    me.to_parquet(folder / "members.parquet", index=False)
    if journal:
        write_journal(folder / "optuna_journal.log", folder.name, trials)
    return folder


# ---- scenarios with known answers ------------------------------------------------------------

BASE_SEEDS = (100, 200, 300)
P = 4


def base_val(seed: int) -> float:
    """The 'seed effect': a deterministic, spread-out val Sharpe per member seed."""
    return float(np.random.default_rng(seed).normal(1.0, 1.0))


def paired_scenario(
    folder: str | Path,
    *,
    shift: float = 2.0,
    g6: str = "measure",
    g6_rel: float = 0.0,
    g10_rel: float = 0.05,
    g12_rel: float = 0.02,
    failed: bool = True,
    diverged: bool = True,
    journal: bool = True,
) -> Path:
    """Measured vs wired g12 on the same member seeds; wired = measured + shift +/- 0.25.

    The +/- 0.25 alternates over the 12 seeds, so the mean paired difference is exactly `shift`.
    g6 is measured at rel `g6_rel` (0 -> delete), g10 measured at `g10_rel` (never wired).
    Adds one failed (ERROR) and one diverged trial of the measured config with Sharpe 999.
    """
    trials: list[FakeTrial] = []
    k = 0
    for b in BASE_SEEDS:
        seeds = [b + i for i in range(P)]
        vals = [base_val(s) for s in seeds]
        eps = [0.25 if (k + i) % 2 == 0 else -0.25 for i in range(P)]
        k += P
        rel = {"g6": g6_rel, "g10": g10_rel, "g12": g12_rel}
        trials.append(FakeTrial(f"m{b}", {"g6": g6, "g10": "measure", "g12": "measure"}, vals,
                                seeds=seeds, gem_rel=rel))
        trials.append(FakeTrial(f"w{b}", {"g6": g6, "g10": "measure", "g12": "wire"},
                                [v + shift + e for v, e in zip(vals, eps)], seeds=seeds,
                                gem_rel=rel, weights={"g12": 0.05 * (1 + b / 100)}))
    bad = {"g6": g6, "g10": "measure", "g12": "measure"}
    if failed:
        trials.append(FakeTrial("f1", bad, [999.0] * P, seeds=[900 + i for i in range(P)], status="ERROR",
                                error="RuntimeError: CUDA error: out of memory", epochs=1))
    if diverged:
        trials.append(FakeTrial("d1", bad, [999.0] * P, seeds=[950 + i for i in range(P)], diverged=True,
                                epochs=2))
    return write_experiment(folder, trials, journal=journal)


def unpaired_scenario(folder: str | Path, *, shift: float = 3.0, n_wired_trials: int = 3,
                      wired_members: int = P) -> Path:
    """Wired g12 trials on seeds the measured trials never used: only an unpaired test applies."""
    rng = np.random.default_rng(7)
    trials = []
    for j in range(3):
        trials.append(FakeTrial(f"m{j}", {"g6": "measure", "g10": "measure", "g12": "measure"},
                                list(rng.normal(1.0, 0.3, P)), seeds=[10 * j + i for i in range(P)],
                                gem_rel={"g12": 0.02}))
    for j in range(n_wired_trials):
        trials.append(FakeTrial(f"w{j}", {"g6": "measure", "g10": "measure", "g12": "wire"},
                                list(rng.normal(1.0 + shift, 0.3, wired_members)),
                                seeds=[1000 + 10 * j + i for i in range(wired_members)], gem_rel={"g12": 0.02}))
    return write_experiment(folder, trials)
