"""The verdict rule, in one place: pure vectorised functions (arrays in, verdict words out), so the
verdicts an analysis ships and the calibrations that state the rule's error rates run the same code.

- `decision`: the rule composed once (`decide`) and its stages of one period: the seed rule, the
  one-period gates, the held-out second stage, a search's selection on one history;
- `periods`: several periods: fold effects on their informative pairs, their pooling (the folds'
  overlap) and the period rule;
- `histories`: several price histories: the nested rule and the calendar part;
- `settings`: the verdict words and `Thresholds`, the analysis's settings;
- `power`: the power of the rule that decides (its MDE, the seeds it needs, the floor), one solver.

`tests/test_rules.py` checks that no stage is called outside the composition and that every caller
calls it.
"""
