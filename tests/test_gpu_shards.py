"""tools/gpu_shards.sh (issue 43 item 4): certify as two shards in two processes at once, then
one assemble. Run here on the CPU with the small certify suite, as the GPU call runs it with
the real one: the script must hand every shard the same run id, split by --shard i/N, gather
both shards' rows and print the assembled verdict."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
HELPERS = ROOT / "tests" / "conformance" / "helpers"


def test_two_shards_at_once_assemble_into_one_certified_bundle(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "WORKERS": "1", "IMPORT": "small_certify_suite",
           "OUT": str(tmp_path / "out"), "SHARDS_ROOT": str(tmp_path / "shards"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(HELPERS),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_shards.sh"), "300", "torch", "0,1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "== shard 0/2 on cpu 0: rc=0" in out and "== shard 1/2 on cpu 1: rc=0" in out, out
    shard_cases = [int(line.split(": ")[1].split()[0]) for line in out.splitlines()
                   if line.startswith("shard ") and " cases -> " in line]
    assert len(shard_cases) == 2 and all(shard_cases), out  # both shards ran some cases
    bundle = tmp_path / "shards" / "bundle"
    first = (bundle / "CERTIFICATE.txt").read_text().splitlines()[0]
    assert first.startswith("CERTIFIED: backend torch on cpu"), first
    assert f"of {sum(shard_cases)} cases" in first  # both shards' cases, once each
    assert f"bundle: {first}" in out
    assert f"green: all {sum(shard_cases)} claimed case(s) passed" in out  # moecert report
    assert (tmp_path / "out" / "shards.tgz").exists() and (tmp_path / "out" / "shards.txt").exists()
