"""How much memory a case needs, how much the machine has, and what a worker killed for
memory looks like: the runner's budget (conformance/harness/schedule.py) and its "oversize" status.

On a GPU the runner budgets model-size cases against each GPU's memory (schedule.device_need);
on a CPU everything a case holds is host memory, and `host_need` estimates it:

    host_need(case) = (HOST_BYTES_PER_WEIGHT + HOST_BYTES_PER_WEIGHT_BIT x weight bits)
                      x weights + HOST_BASE_BYTES

Measured (2026-11-26, this project's 2-core 24 GB machine, torch 2.13 CPU, `moecert run
--case ... --in-process`, peak RSS by /usr/bin/time, M=256 K=2048 N=768 topk 8, torch
backend): bf16 E=16 1.32 GB, E=48 3.62 GB (15.2 bytes per weight); gptq-int4 g128 E=16
0.95 GB, E=48 1.67 GB (4.8 bytes per weight). The checkpoint is held several times over
(synthesis, the backend's copy, the unchanged-input snapshot, processing), so the cost per
weight grows with the bits per weight: 1.33 + 0.87 x bits fits both. A DeepSeek-V3 layer in
gptq-int4 comes to about 55 GB, which agrees with what a certify run on the 24 GB machine
saw before this estimate existed: one such case reached 23.8 GB and was killed for memory.
Re-measured per case (2026-11-29, `tools/host_peaks.py`: each case alone in a fresh process,
peak resident set; M 16 and 256, K=2048, N=1536, E 32 and 64, torch, grouped and xpu;
docs/speed.md, issue 43): every case at 0.42-0.72 of this estimate, so the constants stand.

A case estimated above what the machine has in all is not run: its one row has status
"oversize" and says how much it needs, and the run says so up front. A worker the kernel
kills for memory anyway (SIGKILL) is reported as out of memory.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from moecert.reference.schemes import get_scheme

from .cases import Case

HOST_BYTES_PER_WEIGHT = 1.33
HOST_BYTES_PER_WEIGHT_BIT = 0.87
HOST_BASE_BYTES = 1 << 30
# Set to a size ("24G", "512M", bytes) to budget as if the machine had that much memory
# (tests; a machine whose other tenants hold part of its memory).
HOST_MEMORY_VARIABLE = "MOECERT_HOST_MEMORY"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def weights(case: Case) -> int:
    P = case.problem
    return P.E * P.K * P.N * 3


def host_need(case: Case) -> int:
    """Bytes of host memory a case holds at most when it runs on the CPU (estimate)."""
    bits = get_scheme(case.scheme).weight_bits
    per_weight = HOST_BYTES_PER_WEIGHT + HOST_BYTES_PER_WEIGHT_BIT * bits
    return int(per_weight * weights(case)) + HOST_BASE_BYTES


def parse_size(text: str) -> int:
    """"24G", "512M", "1.5T" or a number of bytes, above 0 (a machine of no memory would
    make every case oversize)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    size = int(float(match[1]) * _UNITS[match[2].upper()]) if match else 0
    if size < 1:
        raise ValueError(f"{HOST_MEMORY_VARIABLE}={text!r}: expected a size above 0 such as "
                         "24G, 512M or a number of bytes")
    return size


def host_memory_override(environ=os.environ) -> int | None:
    """The bytes MOECERT_HOST_MEMORY says the machine has, None when it is unset or empty;
    ValueError naming the variable for anything but a size (front ends check it before
    anything runs: harness/environment.py)."""
    named = environ.get(HOST_MEMORY_VARIABLE, "")
    return parse_size(named) if named.strip() else None


def host_total_bytes() -> int | None:
    """The machine's memory (the smaller of its RAM and a cgroup's limit), or what
    MOECERT_HOST_MEMORY says; None when it cannot tell."""
    named = host_memory_override()
    if named is not None:
        return named
    sizes = []
    try:
        meminfo = Path("/proc/meminfo").read_text()
        sizes.append(int(re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)[1]) << 10)
    except (OSError, TypeError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            sizes.append(int(text))
    return min(sizes) if sizes else None


def gb(n: float) -> str:
    """Bytes in GiB, the unit MOECERT_HOST_MEMORY's "24G" and the kernel's MemTotal count in
    ("about 51 GiB"; `MOECERT_HOST_MEMORY=24G` reads back as "24 GiB", not "26 GB")."""
    gib = n / 2**30
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"


def oom_kills() -> int | None:
    """The kernel's count of processes it killed for memory (this cgroup's, or the
    machine's), or None when it cannot be read."""
    for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"), ("/proc/vmstat", "oom_kill")):
        try:
            match = re.search(rf"^{key} (\d+)", Path(path).read_text(), re.M)
        except OSError:
            continue
        if match:
            return int(match[1])
    return None


# How death_words begins for a worker killed for memory (the runner retries its case alone).
OOM_DEATH = "out of memory"


def death_words(code: int, oom_before: int | None) -> str:
    """Why a worker process died, from its exit code: a SIGKILL the runner did not send is
    the kernel's OOM killer (confirmed where its kill count went up)."""
    if code != -signal.SIGKILL:
        return f"the worker process died (exit code {code})"
    now = oom_kills()
    if oom_before is not None and now is not None and now > oom_before:
        return (f"{OOM_DEATH}: the kernel's OOM killer killed the worker process (exit code "
                f"{code})")
    return (f"{OOM_DEATH}, most likely: the worker process was killed (exit code {code}, "
            "SIGKILL), as the kernel's OOM killer does")


__all__ = ["HOST_MEMORY_VARIABLE", "OOM_DEATH", "death_words", "gb", "host_memory_override",
           "host_need", "host_total_bytes", "oom_kills", "parse_size", "weights"]
