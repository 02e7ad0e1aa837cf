"""The calibration product (`moecert calibrate`): backends run over many seeds, the error they
show set against the tolerance table entry by entry (calibrate.py). It runs cases through the
harness's runner and reads the table; the command line (conformance/cli/calibrate_command.py)
declares its options."""
