"""The kept validation evaluations of the last `trainer.objective_last_k` passes, for the
market-noise interval (docs/results.md "eval_returns.npz"): in every checkpoint, and written beside
it from its metadata in the writer's thread (the device facts read once, at construction)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tune_gems.config.schema import Config
from tune_gems.contracts.errors import CheckpointError
from tune_gems.contracts.result_files import EVAL_RETURNS_FILE, EVAL_RETURNS_FORMAT
from tune_gems.contracts.safe_files import open_atomic
from tune_gems.market.features import Market
from tune_gems.trainer.evaluator import GreedyEvaluator
from tune_gems.trainer.member_ids import MemberIds

EVAL_WINDOW_KEY = "eval_window"
EVAL_SEGMENT = "val"
WINDOW_FIELDS = ("epochs", "returns", "positions", "diverged")


@dataclass(frozen=True)
class KeptEvaluation:
    """One kept evaluation: epoch, net returns and positions [P,T] float32, diverged [P]."""

    epoch: int
    returns: torch.Tensor
    positions: torch.Tensor
    diverged: torch.Tensor


class EvalWindow:
    """The last `last_k` kept evaluations and what EVAL_RETURNS_FILE writes beside them."""

    def __init__(self, cfg: Config, ids: MemberIds, asset: np.ndarray, window_start: np.ndarray):
        self.last_k, self.cost, self.periods_per_year = cfg.trainer.objective_last_k, cfg.env.cost, cfg.env.periods_per_year
        self.ids, self.asset, self.window_start = ids, asset, window_start
        self.P, self.T = asset.shape
        self.kept: list[KeptEvaluation] = []

    @classmethod
    def of_run(cls, cfg: Config, ids: MemberIds, market: Market, evaluator: GreedyEvaluator) -> EvalWindow:
        """The window of a run, its device facts read now (a background writer must not touch the device)."""
        P, T = ids.members, market.ranges[EVAL_SEGMENT].length
        asset = evaluator.asset_returns(EVAL_SEGMENT)  # each member's own path and fold window
        asset = asset.expand(P, T) if asset.ndim == 1 else asset
        lo, _ = market.member_windows(EVAL_SEGMENT, P, evaluator.learner.fold_of_member)
        host = asset.detach().to("cpu", torch.float32).numpy().copy()
        return cls(cfg, ids, host, lo.cpu().numpy().astype(np.int64))

    def keep(self, epoch: int, returns: torch.Tensor, positions: torch.Tensor, member_diverged: np.ndarray) -> None:
        """Append this epoch's validation series (moved to the host) and keep the last `last_k`."""
        kept = KeptEvaluation(epoch, returns.detach().to("cpu", torch.float32).clone(),
            positions.detach().to("cpu", torch.float32).clone(),
            torch.as_tensor(np.asarray(member_diverged, dtype=bool)).clone())
        self.kept = [*self.kept, kept][-self.last_k :]

    def meta(self) -> dict[str, Any]:
        w, P, T = self.kept, self.P, self.T
        if not w:
            return {"epochs": [], "returns": torch.zeros(0, P, T), "positions": torch.zeros(0, P, T),
                    "diverged": torch.zeros(0, P, dtype=torch.bool)}
        return {"epochs": [e.epoch for e in w], "returns": torch.stack([e.returns for e in w]),
            "positions": torch.stack([e.positions for e in w]), "diverged": torch.stack([e.diverged for e in w])}

    def saved(self, path, saved: Any) -> list[KeptEvaluation]:
        """The kept evaluations of a checkpoint's metadata, checked against this run's shapes."""
        if saved is None:
            return []
        P, T = self.P, self.T
        field_name = f"meta.{EVAL_WINDOW_KEY}"
        if not isinstance(saved, dict) or not set(WINDOW_FIELDS) <= set(saved):
            raise CheckpointError(f"{path}: field {field_name} must be a mapping with {', '.join(WINDOW_FIELDS)}")
        epochs = saved["epochs"]
        if not isinstance(epochs, list) or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
            raise CheckpointError(f"{path}: field {field_name}.epochs must be a list of epoch numbers")
        k = len(epochs)
        for name, shape, dtype in (("returns", (k, P, T), torch.float32), ("positions", (k, P, T), torch.float32),
                                   ("diverged", (k, P), torch.bool)):
            t = saved[name]
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype:
                got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise CheckpointError(f"{path}: field {field_name}.{name} is {got}, this run needs {shape} {dtype}")
        return [KeptEvaluation(int(e), saved["returns"][i].clone(), saved["positions"][i].clone(),
                               saved["diverged"][i].clone()) for i, e in enumerate(epochs)]

    def arrays(self, meta: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """The arrays of EVAL_RETURNS_FILE, from the live window or a checkpoint's `meta`."""
        window = self.meta() if meta is None else meta.get(EVAL_WINDOW_KEY)
        if window is None:
            raise ValueError(f"eval_returns: the metadata has no {EVAL_WINDOW_KEY!r}")
        ids = self.ids
        return {"format": np.asarray(EVAL_RETURNS_FORMAT, dtype=np.int64),
            "epochs": np.asarray(window["epochs"], dtype=np.int64),
            "returns": window["returns"].numpy().astype(np.float32, copy=False),
            "positions": window["positions"].numpy().astype(np.float32, copy=False),
            "diverged": window["diverged"].numpy().astype(bool, copy=False), "asset": self.asset,
            "member": np.arange(self.P, dtype=np.int64), "arm": np.asarray(ids.arm, dtype=str),
            "seed_index": np.asarray(ids.seed_index, dtype=np.int64), "seed": np.asarray(ids.seed, dtype=np.int64),
            "path": np.asarray(ids.path, dtype=np.int64), "fold": np.asarray(ids.fold, dtype=np.int64),
            "history": np.asarray(ids.history, dtype=np.int64), "window_start": self.window_start,
            "cost": np.asarray(self.cost, dtype=np.float64),
            "periods_per_year": np.asarray(self.periods_per_year, dtype=np.float64),
            "segment": np.asarray(EVAL_SEGMENT)}

    def write(self, directory: str | Path, meta: dict[str, Any] | None = None) -> None:
        arrays = self.arrays(meta)
        with open_atomic(Path(directory) / EVAL_RETURNS_FILE) as f:  # never through a planted symlink
            np.savez_compressed(f, **arrays)
