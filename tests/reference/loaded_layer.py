"""The torch backend on a layer `load_checkpoint` read, against the reference: shared by the
loader's tests on written model folders (test_loader.py) and on the producers' fixtures
(test_loader_fixtures.py)."""

from __future__ import annotations

from moecert.kernels.native import TorchBackend
from moecert.reference import MoEProblem, make_inputs, moe

# relative Frobenius error bounds of the torch backend, as measured in
# tests/kernels/test_torch_backend.py: the activation dtype's unit roundoff, one int8 step
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}
INT8_STEP = 1 / 127


def torch_backend_error(ml, problem: MoEProblem, seed: int) -> float:
    """||y - ref|| / ||ref|| of TorchBackend on loaded layer `ml` for `problem`'s tokens
    (make_inputs with `seed`), routed by the layer's own router, against `moe`."""
    x, _, _ = make_inputs(problem, seed=seed)
    topk_weights, topk_ids = ml.router.select(x, problem.topk)
    backend = TorchBackend()
    layer = backend.create_layer(ml.checkpoint, problem)
    backend.process_weights_after_loading(layer)
    y = backend.apply(layer, x, topk_weights.float(), topk_ids)
    ref = moe(ml.checkpoint, x, topk_weights, topk_ids, problem)
    return ((y.double() - ref).norm() / ref.norm()).item()
