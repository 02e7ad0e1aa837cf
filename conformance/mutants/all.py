"""Importing this module registers every mutant backend and legitimate twin (for `moecert run
--import`, whose worker processes import it before running cases)."""

from . import register_mutants

NAMES = register_mutants()
