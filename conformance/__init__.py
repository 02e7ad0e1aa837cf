"""moecert.conformance: what checks a backend against the reference, one folder per product:
`harness/` (cases, suites, checks, tolerances, the isolated runner, the pytest plugin),
`cli/` (the `moecert` command), `performance/` (`moecert bench`, `moecert tune`),
`certification/` (`moecert certify`), `calibration/` (`moecert calibrate`) and `mutants/`
(backends with one planted bug each)."""
