"""Where a layer's decode time goes on a GPU, kernel by kernel (issue 44): which part of a
CUDA-graph replay the kernels themselves take and which part is paid between them.

    python tools/layer_stages.py --model gpt-oss-120b --scheme mxfp4 --M 16 [--backend triton]
        [--calls 20]

The layer and its inputs are made as `moecert bench` makes them (conformance/performance/
bench.py: the model's problem, a random checkpoint, one input set). Prints
- the graph replay's time per forward (bench's `graph` mode, the same clock),
- each kernel's device time per forward under torch.profiler (CUPTI) over `--calls` eager
  forwards, grouped by kernel name, largest first, and their sum,
- the replay minus that sum: what a graph still pays between dependent kernels (launch
  latency, each kernel's drain and fill), the part that fusing two kernels into one removes.

Why: at M = 16 the tuner timed gpt-oss-120b MXFP4's two GEMMs alone at 270.6 us, the layer
runs 290-292 us, and triton_kernels' `matmul_ogs` runs the whole layer in 270.4 us
(docs/speed.md, "Issue 44, round seven's open rows timed"): the next round must know how the
20 us split between the small kernels and the gaps before it fuses anything.
Written 2026-12-01 without a GPU: not run on one yet. On a CPU it says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--scheme", required=True)
    p.add_argument("--M", type=int, default=16)
    p.add_argument("--backend", default="triton")
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("layer_stages: needs a CUDA GPU (kernel times come from CUPTI)", file=sys.stderr)
        return 2

    from moecert.conformance.performance import bench
    from moecert.kernels import Variant, get_backend
    from moecert.reference import random_checkpoint
    from moecert.reference.models import MODELS

    if args.model not in MODELS:
        p.error(f"--model {args.model}: expected one of {', '.join(MODELS)}")
    problem = bench.layer_problem(args.model, MODELS[args.model], args.scheme, args.M)
    if problem is None:
        p.error(f"--model {args.model} does not ship in {args.scheme}")
    device = torch.device("cuda")
    backend = get_backend(args.backend)
    ckpt = random_checkpoint(Variant(args.scheme), problem, seed=0, device=device)
    layer = backend.create_layer(ckpt, problem)
    backend.process_weights_after_loading(layer)
    per_expert, shared = bench.expert_bytes(ckpt, problem.E)
    (one, *_) = bench.input_sets(problem, per_expert, shared, device, 0, 1)
    clock = bench.Clock(device)
    plan = bench.Plan("cuda", (args.backend,), (args.scheme,), {}, repeats=100, warmup=10)
    status, seconds, message = bench.time_mode("graph", backend, layer, [one], clock, plan)
    if status != "pass":
        print(f"layer_stages: no graph replay: {message}", file=sys.stderr)
        return 1

    def forward():
        backend.forward(layer, one.x, one.weights, one.ids, one.out, None)

    for _ in range(3):  # compiled and warm before the profile
        forward()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.calls):
            forward()
        torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name].append(event.device_time_total)
    rows = sorted(((sum(t) / args.calls, len(t) / args.calls, name)
                   for name, t in per_kernel.items()), reverse=True)
    replay_us = seconds * 1e6
    kernels_us = sum(us for us, _, _ in rows)
    print(f"{args.backend} {args.scheme} {args.model} M={args.M} on "
          f"{torch.cuda.get_device_name()}: graph replay {replay_us:.1f} us per forward")
    print(f"{'us':>9} {'calls':>6}  kernel (device time per forward, {args.calls} eager "
          "forwards)")
    for us, calls, name in rows:
        print(f"{us:9.1f} {calls:6.1f}  {name[:100]}")
    print(f"{kernels_us:9.1f}         the kernels' sum; {replay_us - kernels_us:.1f} us of the "
          "replay between them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
