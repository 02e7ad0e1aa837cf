"""moecert.reports (filled in by later issues)."""
