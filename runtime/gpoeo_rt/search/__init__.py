"""Search/policy layer: pure functions that choose clock configurations from predicted or measured ratios."""
