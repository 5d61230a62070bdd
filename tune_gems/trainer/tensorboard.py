"""TensorBoard event files, one run per folder: `train`'s <out>/tensorboard and a sweep's
<experiment>/tensorboard/<trial id> share tags; `<metric>@<arm>` becomes `<metric>/<arm>`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

EVENTS_DIR = "tensorboard"


class EpochEvents:

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
