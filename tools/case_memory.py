"""What one case holds in memory on the CPU, check by check and step by step (issue 43): the
numbers behind schedule.device_need's model, measured where every tensor is host memory.

    python tools/case_memory.py --shape E,K,N --scheme NAME --backend NAME[,NAME...]
                                [--M 256] [--depth light|full] [--steps]

The backends of one problem run one after another in one fresh process, sharing steps as a
runner's worker does (context.SharedSteps). Per check: the peak resident set during it
(VmHWM, reset before the check through /proc/self/clear_refs) and the bytes of live tensors at
its end, by owner (the case's checkpoint, its processed layer, the problem's shared steps,
anything else). With --steps, the resident set before and after each step of the case
(checkpoint draw, reference, layer creation, processing, apply; each resets the peak, so a
check's peak then covers what ran after its last step). Sizes in MiB and in bytes
per weight (E*K*N*3), which is what extrapolates to a larger E.
"""

from __future__ import annotations

import argparse
import gc
import re
from pathlib import Path


def _status(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) << 10


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def live_tensors() -> dict[int, int]:
    """{storage pointer: bytes} of every live CPU tensor (views counted once)."""
    import torch

    out = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
            with __import__("contextlib").suppress(Exception):
                s = obj.untyped_storage()
                out[s.data_ptr()] = s.nbytes()
    return out


def owned(obj) -> set[int]:
    """Storage pointers of the tensors in `obj` (a tensor, dict, checkpoint, layer, tuple)."""
    import torch

    seen, todo, out = set(), [obj], set()
    while todo:
        o = todo.pop()
        if id(o) in seen or o is None:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            out.add(o.untyped_storage().data_ptr())
        elif isinstance(o, torch.nn.Module):
            todo.extend(o.state_dict(keep_vars=True).values())
            todo.extend(getattr(o, "meta", {}).values())
        elif isinstance(o, dict):
            todo.extend(o.values())
        elif isinstance(o, (list, tuple)):
            todo.extend(o)
        elif hasattr(o, "tensors"):
            todo.append(o.tensors)
        elif hasattr(o, "__dict__"):
            todo.extend(vars(o).values())
    return out


def breakdown(run, shared) -> dict[str, int]:
    live = live_tensors()
    groups = {"checkpoint": owned(run._done.get("checkpoint", (0, None))[1]),
              "layer": owned(run._done.get("layer", (0, None))[1]),
              "shared": owned(shared._steps)}
    out, claimed = {}, set()
    for name, ptrs in groups.items():
        ptrs = (ptrs & live.keys()) - claimed
        claimed |= ptrs
        out[name] = sum(live[p] for p in ptrs)
    out["other"] = sum(n for p, n in live.items() if p not in claimed)
    return out


def trace_steps(weights: int) -> None:
    """Print the resident set around the steps of a case (wrapping them in place)."""
    import moecert.conformance.harness.context as context
    from moecert.kernels.base import BaseBackend

    def wrap(owner, name):
        fn = getattr(owner, name)

        def traced(*a, **k):
            before = _status("VmRSS")
            reset_peak()
            try:
                return fn(*a, **k)
            finally:
                print(f"    step {name:32s} rss {before >> 20:7d} -> {_status('VmRSS') >> 20:7d}"
                      f" MiB, peak {_status('VmHWM') >> 20:7d} MiB "
                      f"({_status('VmHWM') / weights:.2f} B/w)", flush=True)
        setattr(owner, name, traced)

    for name in ("_draw_checkpoint", "reference_for"):
        wrap(context.CaseRun, name)
    for name in ("create_layer", "process_weights_after_loading", "apply"):
        wrap(BaseBackend, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, help="E,K,N")
    parser.add_argument("--scheme", required=True)
    parser.add_argument("--backend", required=True, help="comma-separated, run in this order")
    parser.add_argument("--M", type=int, default=256)
    parser.add_argument("--depth", choices=("light", "full"), default="light")
    parser.add_argument("--steps", action="store_true")
    args = parser.parse_args(argv)

    import torch
    from moecert.conformance.harness.cases import Case
    from moecert.conformance.harness.context import SharedSteps
    from moecert.conformance.harness.execute import iter_case, triton_for
    from moecert.reference import MoEProblem

    torch.set_num_threads(2)
    E, K, N = (int(v) for v in args.shape.split(","))
    weights = E * K * N * 3
    problem = MoEProblem(M=args.M, K=K, N=N, E=E, topk=min(8, E))
    if args.steps:
        trace_steps(weights)
    shared = SharedSteps()
    print(f"{args.scheme} E={E} K={K} N={N} M={args.M}: {weights / 1e6:.0f}M weights; "
          f"base rss {_status('VmRSS') >> 20} MiB")
    with triton_for("cpu"):
        for backend in args.backend.split(","):
            case = Case(backend, args.scheme, problem, depth=args.depth)
            gen = iter_case(case, "cpu", shared=shared, on_start=lambda name: reset_peak())
            for row in gen:
                run = gen.gi_frame.f_locals.get("run") if gen.gi_frame else None
                peak = _status("VmHWM")
                parts = breakdown(run, shared) if run is not None else {}
                print(f"  {backend:8s} {row['check']:14s} {row['status']:11s} peak "
                      f"{peak >> 20:7d} MiB ({peak / weights:.2f} B/w); live at end: "
                      + ", ".join(f"{k} {v / weights:.2f}" for k, v in parts.items()),
                      flush=True)
            del gen, run
            gc.collect()
            print(f"  after {backend}: rss {_status('VmRSS') >> 20} MiB; live "
                  f"{sum(live_tensors().values()) / weights:.2f} B/w", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
