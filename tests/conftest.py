"""Hypothesis profiles: "ci" (derandomized, reproducible) when CI is set, else "dev" (random).
Under pytest-xdist each worker gets its share of the cores: two workers with full torch thread
pools on two cores spend more time contending than computing on the tests' small tensors."""

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1)
                              // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
