"""Does the harness's flow change an engine's result? (issue 41, item 6)

One checkpoint's cases (the certify suite's, one scheme, one shape, one seed, backend vllm)
run twice on the same machine:

- inside: in a child process, `run_case` as the runner's worker runs them (every check, one
  problem's cases one after another with their shared steps: reload, strided and routing
  variants, the order of checks, the input copies). Every call of vLLM's layer is recorded:
  the check in flight, a digest of the layer's parameters, the inputs and the output.
- outside: in this process, nothing of the harness's flow: per case one plain create, load,
  process (the adapter's calls: vLLM's loaders and processing) on the case's checkpoint, and
  one apply per recorded input. Each output is compared bit for bit with the inside one.

A call whose layer digest differs (the reload check's second checkpoint) is compared only
where the plain layer has the same digest; the rest are counted, not judged.

    python tools/vllm_repro/inside_outside.py [--scheme fp8-w8a16] [--shape 8,512,256]
        [--seed 0] [--suite certify] [--device cuda] [--force-marlin]

--force-marlin sets VLLM_TEST_FORCE_FP8_MARLIN=1 for both runs (vLLM's FP8 Marlin MoE: the
lead's port was of it). --repeat N applies each recorded input N times outside and counts the
outputs that differ from the first (is the engine's own output the same from call to call?);
a scheme may carry its variant (`--scheme "w4a8-int8[g32]"`). Prints one line per case and a
verdict; exit 0 when every judged call is bit-identical (and every repeat equals its first
output), 1 when one differs, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch


def cases(args):
    from moecert.conformance.harness.suites import build_suite

    E, K, N = args.shape
    shape = f".K{K}.N{N}.E{E}."
    picked = [c for c in build_suite(args.suite, backends=[args.backend],
                                     schemes=[args.scheme.split("[")[0]])
              if c.seed == args.seed and c.scheme_label == args.scheme and shape in c.case_id]
    if not picked:
        sys.exit(f"inside_outside: no {args.suite} case of {args.scheme} with {shape} and "
                 f"seed {args.seed}")
    return picked


def tensors(layer) -> dict[str, torch.Tensor]:
    """The layer's processed tensors: vLLM's module parameters, else the backend layer's
    tensor attributes (and dicts of them)."""
    module = getattr(layer, "experts", None)
    if isinstance(module, torch.nn.Module):
        return dict(module.named_parameters())
    found = {}
    for name, value in vars(layer).items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for key, t in items:
            if isinstance(t, torch.Tensor):
                found[f"{name}.{key}"] = t
    return found


def digest(layer) -> str:
    """The layer's processed tensors (names, shapes, bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(tensors(layer).items()):
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


RECORD = {"check": "", "calls": []}


def copy(value):
    """A tensor (or a dict of them) as it was at the call: the harness may reuse its buffers."""
    if isinstance(value, dict):
        return {k: copy(v) for k, v in value.items()}
    return value.clone() if isinstance(value, torch.Tensor) else value


@contextlib.contextmanager
def record_calls(backend):
    """The backend's apply wrapped: each call's check, layer digest, inputs and output."""
    cls = type(backend)
    apply = cls.apply

    def recorded(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts):
        y = apply(self, layer, hidden_states, topk_weights, topk_ids, out=out, **opts)
        RECORD["calls"].append({"check": RECORD["check"], "digest": digest(layer),
                                "opts": copy(opts), "x": copy(hidden_states),
                                "w": copy(topk_weights), "ids": copy(topk_ids),
                                "y": copy(y if out is None else out)})
        return y
    cls.apply = recorded
    try:
        yield
    finally:
        cls.apply = apply


def inside(args, folder: Path) -> None:
    from moecert.conformance.harness.context import SharedSteps
    from moecert.conformance.harness.execute import iter_case, triton_for
    from moecert.kernels import get_backend

    shared = SharedSteps()
    with record_calls(get_backend(args.backend)), triton_for(args.device):
        for i, case in enumerate(cases(args)):
            RECORD["calls"] = []
            rows = list(iter_case(case, args.device, shared=shared,
                                  on_start=lambda name: RECORD.__setitem__("check", name)))
            torch.save({"case": case.case_id, "calls": RECORD["calls"],
                        "rows": [(r["check"], r["status"], r.get("rel_fro"), r["message"][:160])
                                 for r in rows]},
                       folder / f"{i}.pt")


def outside(args, folder: Path) -> int:
    from moecert.conformance.harness.context import CaseRun
    from moecert.kernels import get_backend
    from moecert.kernels.errors import UnsupportedError

    backend = get_backend(args.backend)
    judged = differ = skipped = unstable = 0
    for i, case in enumerate(cases(args)):
        record = torch.load(folder / f"{i}.pt", weights_only=False)
        assert record["case"] == case.case_id, (record["case"], case.case_id)
        ckpt = CaseRun(case, args.device).checkpoint
        try:
            layer = backend.create_layer(ckpt, case.problem)
            backend.process_weights_after_loading(layer)
        except Exception as e:  # noqa: BLE001 - not claimed, or vLLM's layer fails to build:
            # the harness then made no call either, else that is a difference
            kind = "not claimed" if isinstance(e, UnsupportedError) else "no layer"
            print(f"{case.case_id}: {kind} outside ({type(e).__name__}: {e}); "
                  f"{len(record['calls'])} calls inside")
            differ += len(record["calls"])
            judged += len(record["calls"])
            continue
        plain = digest(layer)
        worst = 0.0
        same = skip = 0
        for call in record["calls"]:
            if call["digest"] != plain:
                skip += 1
                continue
            out = torch.full_like(call["y"], torch.nan)
            # the protocol writes into `out` (the harness judges that, not the return value)
            backend.apply(layer, call["x"], call["w"], call["ids"], out=out, **call["opts"])
            equal = torch.equal(out, call["y"]) or (
                out.isnan().equal(call["y"].isnan()) and
                torch.equal(out.nan_to_num(), call["y"].nan_to_num()))
            same += equal
            if not equal:
                worst = max(worst, (out.double() - call["y"].double()).abs().max().item())
                print(f"  differs: check {call['check']}: max |outside - inside| {worst:.3e}")
            unstable += repeats_differing(backend, layer, call, out, args.repeat)
        bad = [r for r in record["rows"] if r[1] not in ("pass", "unsupported", "skip")]
        print(f"{case.case_id}: {same} of {len(record['calls']) - skip} calls bit-identical "
              f"outside the harness ({skip} on another layer); inside rows not passing: "
              f"{bad or 'none'}")
        judged += len(record["calls"]) - skip
        differ += len(record["calls"]) - skip - same
        skipped += skip
    if args.repeat > 1:
        print(f"repeats: {unstable} of {judged * (args.repeat - 1)} repeated applies differ "
              f"from their call's first output outside ({args.repeat} applies per call)")
    print(f"verdict: {judged - differ} of {judged} judged calls bit-identical "
          f"({skipped} on another layer, not judged): the harness's flow "
          + (f"does not change {args.backend}'s result" if not differ
             else f"CHANGES {args.backend}'s result"))
    return 1 if differ or unstable else 0


def repeats_differing(backend, layer, call, first, repeat: int) -> int:
    """Apply one recorded input `repeat - 1` more times: how many outputs differ from the
    first, bit for bit (a deterministic engine: none)."""
    differing = 0
    for _ in range(repeat - 1):
        again = torch.full_like(call["y"], torch.nan)
        backend.apply(layer, call["x"], call["w"], call["ids"], out=again, **call["opts"])
        if not torch.equal(again.nan_to_num(), first.nan_to_num()):
            differing += 1
            d = (again.double() - first.double()).abs()
            print(f"  repeat differs: check {call['check']}: max |again - first| "
                  f"{d.max().item():.3e}, {int((d > 0).sum())} of {d.numel()} elements; "
                  f"norm ratio again / first {again.double().norm() / first.double().norm():.6f}")
    return differing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scheme", default="fp8-w8a16")
    p.add_argument("--shape", default="8,512,256", help="E,K,N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--suite", default="certify")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--force-marlin", action="store_true")
    p.add_argument("--repeat", type=int, default=1, help="applies per recorded input outside")
    p.add_argument("--backend", default="vllm", help="any backend (the script's own test "
                   "runs it on torch, on the CPU)")
    p.add_argument("--inside", type=Path, help=argparse.SUPPRESS)  # the child's folder
    args = p.parse_args(argv)
    try:
        args.shape = tuple(int(v) for v in args.shape.split(","))
        assert len(args.shape) == 3
    except (ValueError, AssertionError):
        p.error(f"--shape: expected E,K,N, found {args.shape!r}")
    if args.force_marlin:
        os.environ["VLLM_TEST_FORCE_FP8_MARLIN"] = "1"
    if args.inside:
        inside(args, args.inside)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        child = [sys.executable, __file__, "--inside", folder, *(argv or sys.argv[1:])]
        if subprocess.run(child).returncode:
            print("inside_outside: the harness run failed", file=sys.stderr)
            return 1
        return outside(args, Path(folder))


if __name__ == "__main__":
    sys.exit(main())
