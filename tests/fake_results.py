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

from tune_gems.contracts.gem_manifest import LEGACY_MANIFEST
from tune_gems.stats.metrics import EPOCH_METRICS, MEMBER_METRICS

GEMS = ("g6", "g10", "g12")
GEM_KEYS = {e.name: e.metric for e in LEGACY_MANIFEST}
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
                                error="RuntimeError: CUDA error: out of memory", epochs=1,
                                gem_rel={"g6": g6_rel, "g10": g10_rel, "g12": g12_rel}))
    if diverged:
        trials.append(FakeTrial("d1", bad, [999.0] * P, seeds=[950 + i for i in range(P)], diverged=True,
                                epochs=2, gem_rel={"g6": g6_rel, "g10": g10_rel, "g12": g12_rel}))
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


# ---- arms (issue 12): one trial = several configurations on the same seeds --------------------

NULLS = {"g6": 0.03, "g10": float("nan"), "g12": 0.02}
"""The gems' nulls in the fakes (G10 has none)."""


def base_config(**over) -> dict:
    """Every per-member key and the data keys a trial's config carries, dotted, with defaults."""
    cfg = {f"gems.{g}.mode": "measure" for g in GEMS}
    cfg.update({f"gems.{g}.weight": 0.1 for g in GEMS})
    cfg.update({"model.spectral_norm": True, "model.noisy": True, "trainer.lr": 1e-4,
                "trainer.population": 0, "data.source": "synthetic", "data.synthetic.seed": 7,
                "data.synthetic.paths": "per_seed", "env.window": 32})
    cfg.update(over)
    return cfg


@dataclass
class ArmTrial:
    """One trial with arms. `values[arm]`: per-seed verdict metric (its mean over the last 3
    epochs); `diverged[arm]`: seed indices that diverge at the final epoch; `excess[arm][gem]`:
    per-seed (or scalar) excess over the null / C51 loss of a measured or wired gem."""

    trial_id: str
    arms: dict[str, dict]
    values: dict[str, list[float]]
    seed: int = 0
    config: dict = field(default_factory=dict)
    diverged: dict[str, list[int]] = field(default_factory=dict)
    excess: dict[str, dict[str, object]] = field(default_factory=dict)
    epochs: int = 4
    status: str = "TERMINATED"
    first_seed_index: int = 0
    """The trial's seed block: its seed s is the design's seed index first_seed_index + s."""


ALPHA_COLS = ("val_alpha_sharpe", "test_alpha_sharpe")
WINDOW_JITTER = (-0.01, 0.0, 0.01)
"""Offsets of the last three epochs around a member's value (they average to the value);
earlier epochs read 100, so a statistic that reads outside the window is caught."""


def _arm_tables(name: str, trials: list[ArmTrial], alpha: bool):
    t_rows, h_rows, m_rows, a_rows = [], [], [], []
    for t in trials:
        cfg = base_config(**t.config)
        arm_names = list(t.arms)
        S = len(next(iter(t.values.values())))
        cfg["trainer.population"] = S
        label = " ".join(f"{g}={cfg[f'gems.{g}.mode']}" for g in GEMS) + " sn=on noisy=on"
        for a in arm_names:
            a_rows.append({"trial_id": t.trial_id, "arm": a, **{k: v for k, v in {**cfg, **t.arms[a]}.items()
                                                                if k.startswith(("gems.", "model.", "trainer.lr", "trainer.replay_stream"))}})
        final_epoch = t.epochs
        any_div = False
        for e in range(1, t.epochs + 1):
            rows_e = []
            for ai, a in enumerate(arm_names):
                acfg = {**cfg, **t.arms[a]}
                vals = np.asarray(t.values[a], float)
                for s in range(S):
                    back = t.epochs - e  # 0 = final epoch
                    v = vals[s] + WINDOW_JITTER[::-1][back] if back < len(WINDOW_JITTER) else 100.0
                    div = e == final_epoch and s in t.diverged.get(a, [])
                    any_div |= div
                    row = {"experiment": name, "trial_id": t.trial_id, "config_label": label, "epoch": e,
                           "member": ai * S + s, "seed": t.seed * 1000 + t.first_seed_index + s, "arm": a,
                           "seed_index": t.first_seed_index + s,
                           "val_sharpe": (np.nan if div else v - 0.3), "test_sharpe": np.nan,
                           "loss": np.nan if div else LOSS, "q_mean": 0.1, "grad_norm": 1.0, "diverged": div}
                    if alpha:
                        row["val_alpha_sharpe"] = np.nan if div else v
                        row["test_alpha_sharpe"] = (v - 0.5) if (e == final_epoch and not div) else np.nan
                    if e == final_epoch and not div:
                        row["test_sharpe"] = v - 0.8
                    for g in GEMS:
                        metric = GEM_KEYS[g]
                        mode = acfg[f"gems.{g}.mode"]
                        if mode == "off":
                            vals_g = dict.fromkeys([metric, f"{metric}_null", f"{metric}_excess", f"{metric}_rel"], np.nan)
                        else:
                            ex = t.excess.get(a, {}).get(g, 0.05)
                            ex = float(np.asarray(ex, float).ravel()[s] if np.ndim(ex) else ex)
                            null = NULLS[g]
                            raw = (null if np.isfinite(null) else 0.0) + ex * LOSS
                            vals_g = {metric: raw, f"{metric}_null": null,
                                      f"{metric}_excess": ex * LOSS if np.isfinite(null) else np.nan,
                                      f"{metric}_rel": raw / LOSS}
                        row.update(vals_g)
                    rows_e.append(row)
            m_rows.extend(rows_e)
            df = pd.DataFrame(rows_e)
            h_rows.append({"experiment": name, "trial_id": t.trial_id, "config_label": label, "epoch": e,
                           "loss": LOSS, "val_sharpe_mean": df["val_sharpe"].mean(),
                           "diverged": bool(df["diverged"].any()),
                           **{GEM_KEYS[g]: df[GEM_KEYS[g]].mean() for g in GEMS},
                           **{f"{GEM_KEYS[g]}_rel": df[f"{GEM_KEYS[g]}_rel"].mean() for g in GEMS}})
        t_rows.append({"experiment": name, "trial_id": t.trial_id, "status": t.status, "error": None,
                       "epochs_done": t.epochs, "config_label": label, "seed": t.seed, **cfg,
                       "diverged": any_div, "objective": h_rows[-1]["val_sharpe_mean"]})
    return pd.DataFrame(t_rows), pd.DataFrame(h_rows), pd.DataFrame(m_rows), pd.DataFrame(a_rows)


def write_arms_experiment(folder: str | Path, trials: list[ArmTrial], *, arms_table: bool = True,
                          alpha: bool = True, gems_json: bool = True) -> Path:
    """Write trials/history/members parquet, arms.parquet and gems.json into `folder`."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tr, hi, me, ar = _arm_tables(folder.name, trials, alpha)
    tr.to_parquet(folder / "trials.parquet", index=False)
    hi.to_parquet(folder / "history.parquet", index=False)
    me.to_parquet(folder / "members.parquet", index=False)
    if arms_table:
        ar.to_parquet(folder / "arms.parquet", index=False)
    if gems_json:
        (folder / "gems.json").write_text(json.dumps(
            [{"name": g, "metric": GEM_KEYS[g], "description": g, "has_null": bool(np.isfinite(NULLS[g]))}
             for g in GEMS]))
    return folder


def seed_values(n: int, seed: int = 0, sd: float = 1.0) -> np.ndarray:
    """A spread-out per-seed baseline (the seed effect every arm at that seed shares)."""
    return np.random.default_rng(seed).normal(1.0, sd, n)


def paired_noise(n: int, seed: int = 1, sd: float = 0.05) -> np.ndarray:
    """Exactly mean-zero, symmetric per-seed noise of the arm difference (+-sd pattern, shuffled)."""
    base = np.resize([sd, -sd], n)
    return np.random.default_rng(seed).permutation(base)


def wire_scenario(folder: str | Path, *, gem: str = "g12", effect: float = 0.5, n: int = 16,
                  noise: float = 0.05, weight: float = 0.1, trials: int = 1, seeds: list[int] | None = None,
                  diverged_wired: list[int] = (), placebo: bool = False, alpha: bool = True,
                  arms_table: bool = True, excess: dict | None = None, path_seeds: list[int] | None = None,
                  wired_extra: dict | None = None) -> Path:
    """Trials of two (or three) arms on the same seeds: `control` (every gem measured) and
    `wired` (`gem` wired at `weight`), wired = control + effect + noise; optionally a `placebo`
    arm (`gem` wired at 1e-9) = control + noise'."""
    out = []
    for j in range(trials):
        s = seeds[j] if seeds is not None else j
        base = seed_values(n, seed=100 + s)
        arms = {"control": {}, "wired": {f"gems.{gem}.mode": "wire", f"gems.{gem}.weight": weight,
                                         **(wired_extra or {})}}
        vals = {"control": list(base), "wired": list(base + effect + paired_noise(n, seed=s, sd=noise))}
        if placebo:
            arms["placebo"] = {f"gems.{gem}.mode": "wire", f"gems.{gem}.weight": 1e-9}
            vals["placebo"] = list(base + paired_noise(n, seed=50 + s, sd=noise))
        cfg = {"data.synthetic.seed": path_seeds[j]} if path_seeds is not None else {}
        out.append(ArmTrial(f"t{j}", arms, vals, seed=s, diverged={"wired": list(diverged_wired)},
                            excess=excess or {}, config=cfg))
    return write_arms_experiment(folder, out, alpha=alpha, arms_table=arms_table)


def factorial_arms(levels: dict[str, list]) -> dict[str, dict]:
    """Arms of a full factorial, named as issue 12's factors are (`key=level,key=level`)."""
    import itertools

    keys = list(levels)
    out = {}
    for combo in itertools.product(*(levels[k] for k in keys)):
        name = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in zip(keys, combo))
        out[name] = dict(zip(keys, combo))
    return out


def redundancy_scenario(folder: str | Path, *, n: int = 16, g10_on: float = 0.0, g10_off: float = 0.05,
                        g6_on: float = 0.02, g6_off: float = 0.04, arms_table: bool = True) -> Path:
    """The measure_gems factorial: every gem measured, arms over spectral norm x NoisyNets.
    G10's excess is `g10_on` with spectral norm on and `g10_off` with it off; G6's depends on
    NoisyNets the same way; per-seed jitter (+-10% of the off level, symmetric) keeps it honest."""
    arms = factorial_arms({"model.spectral_norm": [True, False], "model.noisy": [True, False]})
    base = seed_values(n, seed=5)
    jit = paired_noise(n, seed=9, sd=1.0)
    excess, values = {}, {}
    for name, a in arms.items():
        g10 = (g10_on if a["model.spectral_norm"] else g10_off) + 0.1 * g10_off * jit * (not a["model.spectral_norm"])
        g6 = (g6_on if a["model.noisy"] else g6_off) + 0.1 * g6_off * jit
        excess[name] = {"g10": g10 + 0 * base, "g6": g6 + 0 * base, "g12": 0.03 + 0 * base}
        values[name] = list(base)
    t = ArmTrial("t0", arms, values, seed=3, excess=excess)
    return write_arms_experiment(folder, [t], arms_table=arms_table)


# ---- walk-forward folds (issue 20): members = folds x arms x seeds in one trial ---------------


def fold_scenario(folder: str | Path, fold_effects: list[float], *, n: int = 16, noise: float = 0.05,
                  test_effect: float | None = None, gem: str = "g12", baselines: pd.DataFrame | None = None) -> Path:
    """One trial whose members span len(fold_effects) folds x arms control / wired (`gem` wired)
    x n seeds, members carrying `fold`: in fold k, wired = control + fold_effects[k] + exactly
    symmetric noise; each fold's control has its own level (another period). On the test
    segment (the same for every fold) wired - control is `test_effect` (default: the mean of the
    fold effects) + noise. `baselines`: written as baselines.parquet when given."""
    folder = Path(folder)
    frames = []
    for k, eff in enumerate(fold_effects):
        base = seed_values(n, seed=100) + 0.3 * k
        arms = {"control": {}, "wired": {f"gems.{gem}.mode": "wire", f"gems.{gem}.weight": 0.1}}
        vals = {"control": list(base), "wired": list(base + eff + paired_noise(n, seed=10 + k, sd=noise))}
        tables = _arm_tables(folder.name, [ArmTrial("t0", arms, vals, seed=3)], True)
        m = tables[2].assign(fold=k)
        m["member"] = m["member"] + k * 2 * n
        shift = (np.mean(fold_effects) if test_effect is None else test_effect) - eff
        wired = m["arm"] == "wired"
        m.loc[wired, "test_alpha_sharpe"] = m.loc[wired, "test_alpha_sharpe"] + shift
        frames.append(m)
        if k == 0:
            tr, hi, ar = tables[0], tables[1], tables[3]
    write_arms_experiment(folder, [ArmTrial("t0", {"control": {}}, {"control": [0.0] * n}, seed=3)])
    tr.to_parquet(folder / "trials.parquet", index=False)
    hi.to_parquet(folder / "history.parquet", index=False)
    ar.to_parquet(folder / "arms.parquet", index=False)
    pd.concat(frames, ignore_index=True).to_parquet(folder / "members.parquet", index=False)
    if baselines is not None:
        baselines.to_parquet(folder / "baselines.parquet", index=False)
    return folder


def factorial_scenario(folder: str | Path, levels: dict[str, list], effect, *, n: int = 16, folds: int = 1,
                       noise: float = 0.05, arms: dict[str, dict] | None = None) -> Path:
    """One trial whose arms are the full factorial of `levels` (or the given `arms`), members
    spanning `folds` walk-forward folds x arms x n seeds: an arm's value at seed s in fold k is
    the seed's baseline (+0.3 k, another period) + `effect(settings, k)` + exactly symmetric
    noise of its own (`paired_noise`, sd `noise`)."""
    folder = Path(folder)
    arms = arms if arms is not None else factorial_arms(levels)
    frames, first = [], None
    for k in range(folds):
        base = seed_values(n, seed=100) + 0.3 * k
        vals = {name: list(base + effect(a, k) + paired_noise(n, seed=10 + 7 * k + j, sd=noise))
                for j, (name, a) in enumerate(arms.items())}
        tables = _arm_tables(folder.name, [ArmTrial("t0", arms, vals, seed=3)], True)
        m = tables[2].assign(fold=k)
        m["member"] = m["member"] + k * len(arms) * n
        frames.append(m)
        first = first or tables
    write_arms_experiment(folder, [ArmTrial("t0", arms, {a: [0.0] * n for a in arms}, seed=3)])
    first[0].to_parquet(folder / "trials.parquet", index=False)
    first[1].to_parquet(folder / "history.parquet", index=False)
    first[3].to_parquet(folder / "arms.parquet", index=False)
    pd.concat(frames, ignore_index=True).to_parquet(folder / "members.parquet", index=False)
    return folder
