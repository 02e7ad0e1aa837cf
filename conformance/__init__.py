"""moecert.conformance (filled in by later issues)."""
