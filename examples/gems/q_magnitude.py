"""An example gem plug-in: the Q-magnitude penalty (mean squared expected Q).

Use it without editing tune-gems: make this folder importable and list the module under
`plugins`, e.g.

    PYTHONPATH=examples/gems tune-gems train plugins='[q_magnitude]' gems.qmag.mode=wire gems.qmag.weight=0.01

`measure` logs `q_magnitude` every epoch (no gradient reaches the network); `wire` adds
weight x q_magnitude to each member's loss, pulling expected Q towards zero. See docs/gems.md.
"""

from __future__ import annotations

from tune_gems.gems import Gem, GemInputs, register


def q_magnitude(x: GemInputs):
    """Mean over samples, branches and sub-actions of E[Q(s_t, .)]^2, per member: [P]."""
    return x.q_t.pow(2).mean(dim=(1, 2, 3))


register(
    Gem(
        name="qmag",
        metric="q_magnitude",
        description="Q-magnitude penalty: mean squared expected Q at s_t",
        reference=q_magnitude,
    )
)
