"""Certification: `moecert certify`, its signed bundle, and the waivers it accepts."""
