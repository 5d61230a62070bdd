"""The plots a researcher reads before the tables: their titles, files and one-line captions,
and the section of report.md that leads with them (issue 31 item 4).

Kept apart from the modules that compute and draw them (`figures`), so `report.py` can name
them without importing the analysis that computes them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plot:
    title: str
    file: str
    caption: str


FOLD_FOREST = Plot("Effect per fold", "fold_forest.png",
                   "per gem, each walk-forward fold's effect with the interval the period rule read, the pooled "
                   "estimate and interval the verdict used as a diamond, the ROPE band (`fold_effects.csv`)")
PAIRED_SEEDS = Plot("Seed pairs", "paired_seeds.png",
                    "each seed pair of a gem's verdict comparison, one line from the measured to the wired member, "
                    "coloured by fold (`paired_seeds.csv`): flat lines are ties, a fan of crossing lines is noise")
LEARNING_CURVES = Plot("Learning curves", "learning_curves.png",
                       "the verdict metric per epoch and arm, median over seeds with the interquartile range "
                       "(`learning_curves.csv`; the best trials by objective)")
PERFORMANCE_PROFILES = Plot("Performance profiles", "performance_profiles.png",
                            "per gem, the share of seeds above each threshold, measured and wired "
                            "(`performance_profiles.csv`)")
IMPROVEMENT = Plot("Probability of improvement", "probability_of_improvement.png",
                   "P(wired > measured) over the seed pairs, ties half, averaged over folds "
                   "(`probability_of_improvement.csv`): a description, the verdict is the test")
SHRINKAGE = Plot("Confirmation shrinkage", "confirmation_shrinkage.png",
                 "per gem, the search's gain of its chosen trial against the same statistic on fresh seeds and "
                 "paths (`confirmation.csv`)")
LEAD_PLOTS = (FOLD_FOREST, PAIRED_SEEDS, LEARNING_CURVES, PERFORMANCE_PROFILES, IMPROVEMENT, SHRINKAGE)
"""The plots report.md opens with, in this order (those there was something to draw for)."""


def lead_section(images: dict[str, str]) -> list[str]:
    """report.md's opening section: each lead plot that was drawn (`images`: title -> file),
    with its caption; nothing when none was."""
    drawn = [p for p in LEAD_PLOTS if p.title in images]
    if not drawn:
        return []
    lines = ["## Plots first"]
    for p in drawn:
        lines += ["", f"**{p.title}**: {p.caption}.", "", f"![{p.title}]({images[p.title]})"]
    return lines
