"""Price series: loading, synthetic paths, segments and walk-forward folds; the data summary line."""
