"""The verdict rule, in one place: pure vectorised functions (arrays in, verdict words out).

Why one package: the verdicts an analysis ships and the calibrations that state the rule's error
rates must run the same decision code, or a calibration can pass while the shipped rule drifts.
So the decisions live here and nowhere else, and one function composes them:

- `decision`: **the rule, composed once** (`decide`): the seed rule, the gates of one period, the
  period rule over several, the nested rule over price histories, the held-out test segment as a
  second stage and a search's selection on one history; every caller gathers its `Evidence` and
  calls it (the gem verdicts, the factor table, `confirm`'s final verdicts, every calibration);
- `words`: the verdict words (and the calibrations' integer codes of them);
- `thresholds`: `Thresholds`, the frozen record of the analysis's settings (alpha, ROPE, ...),
  built once from the options and passed down whole;
- `ties`: the signed-rank rule on the informative pairs (ties carry no weight);
- `seed`: the seed rule (`decide_family`: Holm over a family, keep / harmful / delete /
  equivalent / inconclusive) and the redundancy finding that is `delete`'s second half;
- `gates`: the market gate and the one-period gate (K = 1: the seed and market-noise intervals
  combined);
- `pooling`, `overlap`, `period_family`, `periods`: the per-fold effects, their random-effects
  pooling (HKSJ, the shared seed variance, the folds' overlap) and the period rule (K >= 2);
- `histories`: the nested rule over several price histories;
- `held_out_rule`: the test segment as a pre-registered second stage;
- `selection`: a confirmation's final verdict on one price history (the search's selection);
- `power`: the power of the rule that decides (its MDE, the seeds it needs, the floor), one solver.

`tests/test_rules.py` checks that no stage is called outside this package's composition and that
every caller calls it.
"""
