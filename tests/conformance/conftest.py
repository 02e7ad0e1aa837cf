"""Fixtures shared by the conformance tests."""

from __future__ import annotations

import pytest
from moecert.kernels.native import TorchBackend
from moecert.kernels.registry import register_backend, unregister_backend


class _WritesIntoTheCheckpoint(TorchBackend):
    """torch, doubling a checkpoint weight of the caller's in place while loading: the values
    the layer holds are right, the caller's tensor is not."""
    name = "test-writes-checkpoint"

    def create_layer(self, checkpoint, problem):
        layer = super().create_layer(checkpoint, problem)
        checkpoint.tensors["w2_weight"].mul_(2)
        return layer


@pytest.fixture
def writes_into_the_checkpoint():
    """The name of a registered backend that writes into the checkpoint it loads."""
    register_backend(_WritesIntoTheCheckpoint())
    yield _WritesIntoTheCheckpoint.name
    unregister_backend(_WritesIntoTheCheckpoint.name)
