"""The market a member trades: features and vectorised environments, greedy segment evaluation and baselines, the Gymnasium view."""
