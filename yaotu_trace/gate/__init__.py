"""`trace check`'s rules: thresholds, baselines and the diagnosis gate over report metrics."""
