"""The worker's imports frozen out of the garbage collector (worker.settle_imports, issue 43):
the per-case collections get cheap, and what the cases make is still collected."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _in_a_worker_like_process(body: str) -> str:
    """`body` run in a fresh process that imports what a worker imports, then settles."""
    script = textwrap.dedent("""
        import gc, time, weakref
        import torch
        from moecert.conformance.harness import checkpoint_cache, worker  # noqa: F401
        from moecert.conformance.harness.context import SharedSteps  # noqa: F401
        from moecert.conformance.harness.execute import iter_case  # noqa: F401
        def collect_ms():
            start = time.perf_counter()
            gc.collect(); gc.collect()
            return 1e3 * (time.perf_counter() - start)
    """) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_settled_imports_make_a_case_s_collections_cheap():
    out = _in_a_worker_like_process("""
        before = min(collect_ms() for _ in range(3))
        worker.settle_imports()
        after = min(collect_ms() for _ in range(3))
        print(before, after, gc.get_freeze_count())
    """)
    before, after, frozen = (float(v) for v in out.split())
    assert frozen > 50_000  # torch alone makes more
    assert after < before / 5, (before, after)


def test_cycles_made_after_settling_are_still_collected():
    """A layer in a reference cycle (the vLLM adapter's runner is one) must still be freed by
    release_device_memory's collections: freezing is for the imports only."""
    out = _in_a_worker_like_process("""
        worker.settle_imports()
        class Layer:
            pass
        layer = Layer()
        layer.weight = torch.zeros(1 << 20)
        layer.me = layer  # a cycle: refcounting alone never frees it
        gone = weakref.ref(layer.weight)
        del layer
        gc.collect()
        print(gone() is None)
    """)
    assert out.strip() == "True"
