"""The text of a `config_label` (docs/results.md): gem modes and model switches (`Config.label`),
for an arm (`arm_label`), a trial (`trial_label`) and a plot (`short_labels`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SWITCH_TOKENS = {"model.spectral_norm": "sn", "model.noisy": "noisy"}
"""Per-member config keys written as an on/off token, and the token's name."""
ARMS_SEPARATOR = " | "
ARM_SUFFIX = " | arm "
"""How the analysis names one arm of a multi-arm trial: `<arm label> | arm <name>`."""


def _on_off(value: Any) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "on", "yes"):
        return "on"
    if text in ("false", "0", "0.0", "off", "no"):
        return "off"
    return None


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def label_tokens(label: str) -> list[str]:
    return str(label).split()


def setting_tokens(settings: Mapping[str, Any]) -> dict[str, str]:
    """{token name: value} for the label tokens an arms-table row sets (gem modes, switches)."""
    out: dict[str, str] = {}
    for key, value in settings.items():
        if _missing(value):
            continue
        parts = str(key).split(".")
        if len(parts) == 3 and parts[0] == "gems" and parts[2] == "mode":
            out[parts[1]] = str(value).strip().lower()
        elif key in SWITCH_TOKENS and _on_off(value) is not None:
            out[SWITCH_TOKENS[key]] = _on_off(value)
    return out


def arm_label(label: str, settings: Mapping[str, Any]) -> str:
    wanted = setting_tokens(settings)
    tokens = []
    for token in label_tokens(label):
        name = token.split("=", 1)[0]
        tokens.append(f"{name}={wanted.pop(name)}" if name in wanted and "=" in token else token)
    switches = [i for i, t in enumerate(tokens) if t.split("=", 1)[0] in SWITCH_TOKENS.values()]
    at = switches[0] if switches else len(tokens)
    extra = [f"{n}={v}" for n, v in wanted.items() if n not in SWITCH_TOKENS.values()]  # a gem the label lacked
    tokens[at:at] = extra
    tokens += [f"{n}={v}" for n, v in wanted.items() if n in SWITCH_TOKENS.values()]
    return " ".join(tokens)


def trial_label(arms: Sequence[tuple[str, str]]) -> str:
    """The label of a trial whose arms are (name, arm label) pairs (module docstring)."""
    labels = list(dict.fromkeys(label for _, label in arms))
    if len(labels) <= 1:
        return labels[0] if labels else ""
    token_lists = [label_tokens(label) for _, label in arms]
    common = [t for t in token_lists[0] if all(t in other for other in token_lists[1:])]
    own = [f"{name}: {' '.join(t for t in tokens if t not in common) or '(as above)'}"
           for (name, _), tokens in zip(arms, token_lists)]
    return f"{' '.join(common)}{ARMS_SEPARATOR}{'; '.join(own)}"


def split_arm_suffix(label: str) -> tuple[str, str | None]:
    """(arm label, arm name) of `<arm label> | arm <name>`; (label, None) without one."""
    head, sep, arm = str(label).rpartition(ARM_SUFFIX)
    return (head, arm) if sep else (str(label), None)


def short_labels(labels: Sequence[str]) -> list[str]:
    """The labels without their shared tokens, an arm suffix as `[arm]` (all alike: arm name or full text)."""
    parts = [split_arm_suffix(label) for label in labels]
    token_lists = [label_tokens(head) for head, _ in parts]
    common = set.intersection(*(set(t) for t in token_lists)) if token_lists and len(token_lists) > 1 else set()
    out = []
    for (head, arm), tokens in zip(parts, token_lists):
        kept = " ".join(t for t in tokens if t not in common)
        text = " ".join(x for x in (kept, f"[{arm}]" if arm else "") if x)
        out.append(text or head)
    return out
