"""What the kernel tests share (a helper module, no tests: tests/kernels/conftest.py puts this
folder on sys.path)."""

from __future__ import annotations


def run_moe_gemm(weights, a, ids, config, experts: int, topk: int):
    """One launch of the fused GEMM on `weights` (a `fused_moe` weight description) over the
    rows of `a` routed by the flat expert ids `ids`, 16-bit activations: the float32 result
    [len(ids), N]. fused_moe is imported here, at the call: the test module decided first
    whether its kernels are interpreted."""
    import torch
    from moecert.kernels.triton_moe import fused_moe, kinds
    from moecert.kernels.triton_moe.align import align_assignments

    sorted_ids, block_expert, num_padded = align_assignments(ids, experts, config["BLOCK_M"],
                                                             n=ids.numel())
    c = torch.empty(ids.numel(), weights["N"], dtype=torch.float32)
    fused_moe.moe_gemm(a, None, None, weights, c, sorted_ids, block_expert, num_padded, None,
                       a_row_div=topk, act=kinds.A16, config=config)
    return c


def record_launches(monkeypatch, pick) -> list:
    """Each launch of the fused GEMM from now on (for the test, through `monkeypatch`)
    appends pick(args, kwargs) to the list returned, then runs as it would: what a launch
    compiled (its constexprs, its operands' dtypes). gemm_kernel is imported here, at the
    call, as in `run_moe_gemm`."""
    from moecert.kernels.triton_moe import gemm_kernel

    kernel, seen = gemm_kernel.moe_gemm_kernel, []

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(pick(args, kw))
                return kernel[grid](*args, **kw)
            return launch
    monkeypatch.setattr(gemm_kernel, "moe_gemm_kernel", Spy())
    return seen


def layer_stage(scheme: str, P, attrs=None, seed: int = 1, ids=None):
    """A tune_stages.LayerStage of the Triton backend on `scheme` synthesized for problem P
    with `seed` (attrs: the scheme's attributes), its inputs make_inputs(P, seed + 1)'s, the
    routing `ids` instead where given. Imported at the call, as in `run_moe_gemm`."""
    from moecert.kernels.triton_moe import tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import make_inputs, synthesize

    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=seed, **(attrs or {})), P)
    backend.process_weights_after_loading(layer)
    x, w, routed = make_inputs(P, seed=seed + 1)
    return tune_stages.LayerStage(layer, x, w, routed if ids is None else ids)


def run_stage(stage, gemm: int, config: dict):
    """GEMM `gemm` of `stage` under `config`, a copy of its output, which starts NaN: a tile
    no program writes stays NaN."""
    stage._out[gemm].fill_(float("nan"))
    return stage.run(gemm, config).clone()


def tuned_file(tmp_path, weight: str, block_m: int, **gemm1):
    """tmp_path/dev.json, a tuned-config file of one layer (weight kind `weight`, 16-bit
    activations, 4 experts) with one bucket (512 rows) on a BLOCK_M `block_m` tile: both GEMMs
    one small tile, gemm1 with the fields `gemm1` besides. Its path."""
    import json

    gemm = {"BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "SWAP_AB": False,
            "FAST_I4": False}
    layer = {"weight": weight, "act": "A16", "experts": 4, "gemm1": [384, 128],
             "gemm2": [128, 192],
             "buckets": {"512": {"BLOCK_M": block_m, "gemm1": {**gemm, **gemm1},
                                 "gemm2": gemm}}}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"format": 1, "device": "dev", "layers": [layer]}))
    return path
