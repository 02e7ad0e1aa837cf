"""moecert.kernels (filled in by later issues)."""
