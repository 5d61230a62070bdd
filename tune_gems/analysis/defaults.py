"""Default settings of the analysis, each a keyword default of the functions using it, so a notebook
can change it per call; `docs/analysis.md` explains each value."""

ALPHA = 0.05
"""Family-wise error rate of the verdicts: Holm over the gems (two-sided tests)."""

ROPE = 0.1
"""Region of practical equivalence of a gem's effect, in Sharpe units (annualised, the verdict
metric's units): |effect| < ROPE is "no practical difference" (the `equivalent` verdict)."""

REL_THRESHOLD = 1e-3
"""Region of practical equivalence of a gem's magnitude: |excess over its null| / C51 loss below
this is "at its null" (the `delete` verdict; also the redundancy table's null band)."""

LAST_K = 3
"""The verdict metric is averaged over each member's last k validation epochs (at a common
epoch for paired trials): a single epoch's Sharpe is noisier and can be a lucky spike."""

WINDOWS = ("last-k", "last-half", "from-epoch")
"""Which validation epochs the verdict metric averages, per member (docs/analysis.md "The verdict
metric"): the last k (`LAST_K`), the last half of the run (never fewer than k), or every epoch
from a stated first epoch (`FIRST_EPOCH`) on."""

WINDOW = "last-k"
"""The default window, chosen with the calibration (docs/analysis.md "The verdict metric"): the
window the search objective (`verdict_gain`) and the saved validation returns behind the
market-noise interval (`eval_returns.npz`) both use, so the verdict, its market-noise interval
and the search all judge one statistic; `last-half` is the opt-in for long runs with folds."""

FIRST_EPOCH = 1
"""The first epoch of the `from-epoch` window (epochs count from 1)."""

MIN_PERIODS = 4
"""Fewest validation periods (folds with informative pairs) a pooled verdict decides with: below
it the t with K - 1 degrees of freedom has (almost) no power (K = 2: none; K = 3: 0.04-0.10 for a
consistent 1 sd effect, the calibration's table), so a verdict reads `insufficient data: too few
periods` with the per-fold effects shown."""

MIN_HISTORIES = 3
"""Fewest price histories with a pooled effect the nested rule (`rules.histories`) decides with: a
family of three contrasts shares the histories' spread over 3 (H - 1) = 6 degrees of freedom at
H = 3 (the MDE at 3 histories: docs/analysis.md "Several price histories")."""

MIN_SHARED_PERIODS = 6
"""Fewest calendar periods histories that share a calendar (the columns of one file) decide with,
whatever `--min-periods` says: the part common to them (`rules.histories`) is estimated over those
periods, with at most K - 1 degrees of freedom, and below 6 the rule does not hold its level (4
periods: family-wise 0.06-0.07 at 8 histories and a calendar part of 0.05-0.10 Sharpe; an exact
sign-flip test over 4 periods cannot go below p = 0.125 two-sided; docs/analysis.md "Histories on
one calendar")."""

SHARE_TAU = True
"""Estimate the period-to-period spread (tau^2, and the HKSJ scale) once across the family's
contrasts (`rules.periods.pool_family`) when they agree (Bartlett's test, `TAU_SHARE_LEVEL`)."""

TAU_SHARE_LEVEL = 0.1
"""Level of the test of equal period spread across the contrasts of a family: rejected, each
contrast is pooled on its own (K - 1 degrees of freedom)."""

MAX_TIED_SHARE = 0.5
"""A contrast whose pairs tie (identical outcomes: wired and measured policies that never
differed, members that never traded) more often than this cannot read `equivalent` or `delete`:
it reads `insufficient data` and says why (56 seeds, 94% tied, 14 informative would otherwise
read `equivalent`). Ties carry no weight in the tests, so such a word would rest on the few
pairs that did differ while the design compared mostly identical policies."""

ISOLATE_FLAGGED = False
"""Opt-in: a contrast whose own scale significantly exceeds the family's (the
share test at `ISOLATE_LEVEL`) leaves the family's shared tau^2 and HKSJ scale, and the others
are tested again against each other (`rules.periods.pool_family`). Off by default: removing the
largest scale after a test that found it is a selection that biases the others' scale low, and
the family-wise false rate rises above its promise where two contrasts spread and one does not
(0.077 against 0.042; docs/analysis.md "Isolating a heterogeneous contrast"). Off, the shared
fit keeps every contrast's residuals (a flagged one is pooled on its own either way)."""

ISOLATE_LEVEL = 0.1
"""Level of the share test at which a flagged contrast leaves the family's tau^2 and scale
(`ISOLATE_FLAGGED`); the calibration compares 0.1 (the share test's) and 0.01."""

HELD_OUT_PERIOD_FLOOR = 0.1
"""On one history the held-out stage carries the test period's spread as at least this share of one
fold's seed variance (the part that varies between folds; `rules.decision`): where
DerSimonian-Laird reads tau^2 = 0, K folds cannot tell a small spread from none, and without a floor
the stage alone confirms up to 1.7x its level alpha / m at a spread of 0.5-1 seed SE. 0.1 (with the
DL estimate's own degrees of freedom) keeps it within its level at 8 x 12 and 6 x 16, spreads 0-2
seed SE, for 0.55 two-stage power at the one-stage MDE without spread (0.70 without the floor, 0.41
at 0.3; docs/analysis.md "The held-out confirmation")."""

ONE_SIDED_KEEP = False
"""Opt-in: test `keep wired` one-sided (effect > 0) at alpha; `harmful` is then not claimed."""

POWER = 0.8
"""Power at which the minimum detectable effect and the seeds needed are stated."""

PLACEBO_WEIGHT = 1e-6
"""A gem wired at a weight at or below this is a placebo arm (the learner's null), not a wiring."""

METRIC = "val_alpha_sharpe"
"""The verdict metric: validation alpha Sharpe, market exposure removed (raw Sharpe rewards beta)."""

FALLBACK_METRIC = "val_sharpe"
"""Used, with a note, when results have no finite `METRIC` (older runs)."""

N_SIM = 2000
"""Simulated datasets per calibration setting (Monte-Carlo SE of a 5% rate: 0.5%)."""

CALIBRATION_SEEDS = (8, 16, 32)
"""Seed counts the calibration reports besides the experiment's own."""

CALIBRATION_FOLDS = (1, 3, 4, 6, 8)
"""Walk-forward fold counts the period calibration reports (8: the longer layouts; K = 3 shows
the refusal below `MIN_PERIODS`)."""

CALIBRATION_TAUS = (0.0, 1.0, 3.0)
"""Period-to-period spread of the difference (mean zero) the period calibration simulates, in
units of one fold's seed standard error (sd / sqrt(n)); at one fold: the history's luck."""

CALIBRATION_RHOS = (0.0, 0.5)
"""Share of a seed's difference variance shared by that seed in every fold (same weights)."""

CALIBRATION_PERIOD_EFFECTS = (0.5, 1.0)
"""Planted consistent effects of the period calibration, in sd of the per-seed difference."""

CALIBRATION_FLIP = 4.0
"""Planted regime flip: the first gem's fold effects run from +FLIP to -FLIP seed standard
errors, first fold to last (mean zero); it must not read keep wired / harmful."""

CONFIDENCE = 0.95
"""Two-sided confidence level of the Sharpe-variance bootstrap intervals (percentile method)."""

N_BOOT = 2000
"""Bootstrap resamples per Sharpe-variance interval."""

SEED = 0
"""Seed of the bootstrap and of the calibration simulation: same inputs, same numbers."""

STATISTIC = "iqm"
"""Location statistic of the Sharpe-variance tables' bootstrap (`iqm` or `mean`)."""

MIN_ALPHA = 1e-6
"""Smallest `--alpha`: below it the Holm thresholds underflow the tests' p-value resolution
(a test statistic's tail is not computed that far), so every verdict would be meaningless."""

MAX_N_SIM = 20_000
"""Largest `--n-sim`: ten times the default, a Monte-Carlo SE of 0.15% on a 5% rate; beyond it
the calibration runs for hours (it grows linearly), which is a typo, not a plan."""

MAX_N_BOOT = 100_000
"""Largest `--n-boot` (the bootstrap grows linearly; 50x the default is beyond any use)."""
