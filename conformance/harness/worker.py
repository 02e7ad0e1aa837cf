"""A worker process of the runner: reads cases as JSON lines on stdin, runs them, and writes
one message per event on its protocol stream, so the parent knows which check was in flight
when a backend kills the process.

    python -m moecert.conformance.harness.worker '{"device": "cpu", "run_id": "...",
                                                   "imports": ["module", ...],
                                                   "cache": true}'

    parent -> worker   {"case": <Case JSON>, "checks": [...] | null}
    worker -> parent   {"ready": <pid>} once started, then per case
                       {"start": "<check>"}  {"row": {...}}  {"done": "<case id>"}

Anything a backend prints goes to stderr: the protocol stream is a duplicate of the original
stdout that nothing else writes to.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys


def main(argv=None) -> int:
    """`argv`: one argument, the runner's settings as JSON (the runner is its only caller:
    no command line of its own to declare)."""
    (text,) = sys.argv[1:] if argv is None else argv
    settings = json.loads(text)
    device, run_id = settings["device"], settings["run_id"]

    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr

    def send(message: dict) -> None:
        protocol.write(json.dumps(message, default=str) + "\n")

    for module in settings["imports"]:  # e.g. a module that registers backends at run time
        importlib.import_module(module)
    from . import checkpoint_cache
    from .cases import Case
    from .context import SharedSteps
    from .execute import iter_case, triton_for

    checkpoint_cache.configure(settings.get("cache", False))
    settle_imports()
    shared = SharedSteps()  # the runner sends a problem's cases one after another
    send({"ready": os.getpid()})  # imports done: a case's time starts now (runner.py)

    with triton_for(device):
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            case = Case.from_json(request["case"])
            for row in iter_case(case, device, request.get("checks"), run_id,
                                 on_start=lambda name: send({"start": name}), shared=shared):
                send({"row": row})
            release_device_memory(device)
            send({"done": case.case_id})
    gc.unfreeze()  # a clean shutdown: frozen objects left at exit make triton's bindings
    # print "nanobind: leaked ..." to stderr
    return 0


def settle_imports() -> None:
    """Import what the cases would import on first use (the backends, the exact tier), then
    move everything the imports made (~215,000 objects: torch, triton, the backends) out of
    the garbage collector's sight: they live as long as the process, and a full collection
    walks every tracked object. The two collections `release_device_memory` runs after each
    GPU case took 124-280 ms together on this project's CPU (a worker's imports and triton, no
    case state), about as long as a small case's checks, on each of the run's 8360 cases;
    after this 0.001 ms: they walk only what the cases made. Garbage the cases make, cycles
    included, is collected as before (tests/conformance/harness/test_worker_gc.py)."""
    from moecert.kernels import backend_names

    from . import exact  # noqa: F401 - the exact tier's check imports it on its first call

    backend_names()  # every registered backend's module (triton's kernels), as a first case
    gc.collect()
    gc.freeze()


def release_device_memory(device: str) -> None:
    """Hand cached blocks back to the GPU after each case: the workers share it, and a
    worker idling on a model-size case's cache (measured: 69 GB on an H200) starves the
    next model-size case of another worker."""
    if device.startswith("cuda"):
        import torch

        gc.collect()
        # again: what the first pass's finalizers let go of (the vLLM adapter takes a layer's
        # runner out of vLLM's forward context when the layer is collected; the runner and its
        # parameters, cyclic, are garbage only then: measured on vLLM 0.32's CPU build, a layer
        # in a cycle kept its parameters through one collect, not two)
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
