"""Speed: `moecert bench` and its timing, the Marlin peer, and the Triton tuning driver."""
