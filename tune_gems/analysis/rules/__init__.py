"""The verdict rule, in one place: pure vectorised functions (arrays in, verdict words out).

Why one package: the verdicts an analysis ships and the calibrations that state the rule's error
rates must run the same decision code, or a calibration can pass while the shipped rule drifts.
So the decisions live here and nowhere else, and both sides call them:

- `words`: the verdict words (and the calibrations' integer codes of them);
- `thresholds`: `Thresholds`, the frozen record of the analysis's settings (alpha, ROPE, ...),
  built once from the options and passed down whole;
- `seed`: the seed rule (`decide_family`: Holm over a family of gems, keep / harmful / delete /
  equivalent / inconclusive) and the redundancy finding that is `delete`'s second half;
- `gates`: the market gate and the one-period gate (K = 1: the seed and market-noise intervals
  combined);
- `pooling`: the per-fold effects and their random-effects pooling (HKSJ, the shared seed
  variance): the statistics the period rule decides on;
- `periods`: the period rule (K >= 2: the seed verdict AND the pooled effect, `inconsistent`);
- `selection`: a confirmation's final verdict on one price history (the search's selection).

Callers: `verdicts.py` (the seed rule, the market gate, the null arms), `walk_forward.py` (the
one-period gate, the period rule), `redundancy.py` (the finding), `calibration.py` (the seed
rule on simulated families, the search-then-confirm simulation) and
`walk_forward_calibration.py` (the seed rule, both gates and the period rule on simulated
families). `tests/test_rules.py` checks that no decision is made anywhere else.
"""
