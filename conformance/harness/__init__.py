"""The harness: cases and suites, the checks and their comparators, metrics and tolerances,
expected failures, the isolated runner and its schedule, and the exact tier (exact/). The
front ends that drive it are the command line (conformance/cli/) and the pytest plugin
(conformance/plugin.py)."""
