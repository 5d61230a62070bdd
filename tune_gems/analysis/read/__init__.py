"""Read: the experiment folders as tables (trials, history, members, arms, folds, baselines, gem manifest)."""
