"""The verdict rule, in one place: pure vectorised functions, so the verdicts an analysis ships and the calibrations
that state its error rates run the same code: `decision` (the composition, `decide`), `periods`, `histories`,
`settings`, `power`. `tests/test_rules.py` checks every caller goes through the composition."""
