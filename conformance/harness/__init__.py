"""The harness: cases and suites, the checks and their comparators, metrics and tolerances,
expected failures, the isolated runner and its schedule, and the pytest plugin."""
