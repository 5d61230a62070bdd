"""The per-epoch HEALTH_DIAG line: one grep-able line of numbers, gems in registry order."""

from __future__ import annotations

import math
from typing import Any

from tune_gems.stats.metrics import FOLD_PREFIX, history_fold_suffix
from tune_gems.trainer.member_gems import MemberGems
from tune_gems.trainer.member_ids import MemberIds


def _num(x: float, fmt: str = ".4f") -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


ARMS_PART = " arms ["


def without_arm_detail(line: str) -> str:
    """The line without its per-arm part: the sweep console's short form (the rest behind `--verbose`)."""
    head, sep, tail = line.partition(ARMS_PART)
    if not sep:
        return line
    n_arms = tail.count(" | ") + 1
    return f"{head} arms={n_arms}"


def _fold_cells(folds: tuple[int, ...], histories: tuple[str, ...]) -> list[tuple[str, str]]:
    """(label, column suffix) per part of the fold block: `<k>`, `<name>/<k>`, or `<name>` with one fold."""
    if len(histories) < 2:
        return [(str(k), f"{FOLD_PREFIX}{k}") for k in folds] if len(folds) > 1 else []
    if len(folds) < 2:
        return [(name, history_fold_suffix(h)) for h, name in enumerate(histories)]
    return [(f"{name}/{k}", history_fold_suffix(h, k)) for h, name in enumerate(histories) for k in folds]


def health_line(m: dict[str, Any], gems: MemberGems, ids: MemberIds) -> str:
    """The line: every gem's value (or `off`), then `folds [...]`, `gain [...]` and `arms [...]`."""
    arms, folds, histories = ids.arms, ids.folds, ids.histories
    named = set(arms) | set(ids.aliases)
    parts = [f"HEALTH_DIAG epoch={m['epoch']}", f"loss={_num(m['loss'])}", f"q_mean={_num(m['q_mean'])}",
        f"grad_norm={_num(m['grad_norm'], '.2f')}", f"noisy_sigma={_num(m['noisy_sigma'], '.2f')}",
        f"val_sharpe={_num(m['val_sharpe_mean'], '.2f')}±{_num(m['val_sharpe_std'], '.2f')}",
        f"val_alpha_sharpe={_num(m['val_alpha_sharpe_mean'], '.2f')}±{_num(m['val_alpha_sharpe_std'], '.2f')}"]
    if not math.isnan(m["test_sharpe_mean"]):
        parts.append(f"test_sharpe={_num(m['test_sharpe_mean'], '.2f')}±{_num(m['test_sharpe_std'], '.2f')}")
    parts.append(f"sps={m['sps']:.0f}")
    gem_parts = []
    for g in gems.gems:
        value = "off" if gems.summary_mode(g.name) == "off" else _num(m[g.metric])
        gem_parts.append(f"{g.metric}={value}")
    parts.append(f"gems [{' '.join(gem_parts)}]")
    if m["diverged"]:
        parts.append("DIVERGED")
    if "val_sharpe_gain" in m:  # a designed run (tune_gems.design.arm_sets): the paired gains
        gains = [f"sharpe={_num(m['val_sharpe_gain'], '+.3f')}", f"alpha={_num(m['val_alpha_sharpe_gain'], '+.3f')}",
                 f"verdict={_num(m['verdict_gain'], '+.3f')}"]
        gains += [f"{g.name}={_num(m[f'gain_{g.name}'], '+.3f')}" for g in gems.gems if f"without-{g.name}" in named]
        parts.append(f"gain [{' '.join(gains)}]")
    cells = _fold_cells(folds, histories)
    if cells:
        per_fold = []
        for label, cell in cells:
            part = f"{label}: vs={_num(m[f'val_sharpe_mean@{cell}'], '.2f')} va={_num(m[f'val_alpha_sharpe_mean@{cell}'], '.2f')}"
            if not math.isnan(m[f"test_sharpe_mean@{cell}"]):
                part += f" ts={_num(m[f'test_sharpe_mean@{cell}'], '.2f')}"
            per_fold.append(part)
        parts.append(f"folds [{' | '.join(per_fold)}]")
    if len(arms) > 1:
        per_arm = []
        arm_off = gems.off_by_arm()
        for arm in arms:
            off = arm_off.get(arm, set())
            values = " ".join(
                f"{g.metric}={'off' if g.name in off else _num(m[f'{g.metric}@{arm}'])}" for g in gems.gems
            )
            per_arm.append(f"{arm}: vs={_num(m[f'val_sharpe_mean@{arm}'], '.2f')} {values}")
        parts.append(f"{ARMS_PART.strip()}{' | '.join(per_arm)}]")
    return " ".join(parts)
