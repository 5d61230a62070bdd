"""TensorBoard event files of a `train` run: each epoch's numbers as scalars in <out>/tensorboard.

Why: sweeps get event files from Ray Tune's own logger (one per trial folder); a train run had
none, so `tensorboard --logdir` could not put the two side by side. Written with tensorboardX
(a dependency of ray[tune], so no new install); per-arm columns `<metric>@<arm>` become
`<metric>/<arm>`, which TensorBoard groups under the metric (its tag rules turn other characters,
such as `=` in a factorial arm name, into `_`). Non-finite values are left out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

EVENTS_DIR = "tensorboard"
"""The event files' folder inside a train run's --out."""


class EpochEvents:
    def __init__(self, out: Path) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(str(out / EVENTS_DIR))

    @staticmethod
    def scalars(metrics: dict[str, Any]) -> dict[str, float]:
        """The epoch's finite numbers, tagged for TensorBoard (`@` -> `/`); flags and text left out."""
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
