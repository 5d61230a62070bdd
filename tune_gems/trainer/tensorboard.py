"""TensorBoard event files: each epoch's numbers as scalars, one run per folder. A `train` run
writes <out>/tensorboard, a sweep <experiment>/tensorboard/<trial id> through the same class, so the
two overlay tag for tag. Per-arm columns `<metric>@<arm>` become `<metric>/<arm>` (grouped under the
metric); non-finite values are left out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

EVENTS_DIR = "tensorboard"


class EpochEvents:
    """The event files of one run: `out/tensorboard`, or `out/tensorboard/<run>` (a sweep's trial)."""

    def __init__(self, out: Path, run: str | None = None) -> None:
        from tensorboardX import SummaryWriter

        self.folder = out / EVENTS_DIR / run if run else out / EVENTS_DIR
        self.writer = SummaryWriter(str(self.folder))

    @staticmethod
    def scalars(metrics: dict[str, Any]) -> dict[str, float]:
        """The epoch's finite numbers, tagged for TensorBoard (`@` -> `/`)."""
        out = {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            out[key.replace("@", "/")] = float(value)
        return out

    def write(self, metrics: dict[str, Any], epoch: int) -> None:
        for tag, value in self.scalars(metrics).items():
            self.writer.add_scalar(tag, value, global_step=epoch)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
