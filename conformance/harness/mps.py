"""`--mps`: a run's workers share each GPU through CUDA's Multi-Process Service instead of the
driver's time slicing between their contexts.

Without MPS, kernels of different processes never run at once on a GPU: the driver hands the
GPU to one context at a time. A run's many small cases leave most of the GPU idle under each
kernel, so their workers queue behind each other (certify on a 2x H200 host, 24 workers at the
same 32 cores: 3306 s of check time on one GPU, 1882 s on two). MPS lets them run together:
on one H200 (16 cores, 12 workers) the `ci` suite took 51 s against 72 s, certify 128 s
(docs/speed.md, "MPS").

The run starts a private MPS control daemon (its pipe and log folders in a temporary folder,
so it serves this run's workers only, and nothing of the card's settings is touched: no
compute mode), hands its folders to the workers through the environment, and quits it at the
end. Under MPS a fatal GPU fault of one client is raised in every client on that GPU
(NVIDIA's MPS documentation, "Error containment"); runner.run_isolated runs a case with a CUDA
error or a crash under MPS once more outside MPS before it counts (`gpu_fault`), so one
case's fault still costs one case."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
# Seconds the daemon may take to start, and to quit once asked.
START_S = 30.0
QUIT_S = 30.0

# A row whose message has one of these failed on the GPU in a way a fault of another MPS
# client of the same GPU also produces (torch's "CUDA error: ...", Triton's "Triton Error
# [CUDA]: ...", the driver's MPS errors). Out of memory is retries.oom_row's.
GPU_FAULT_WORDS = ("CUDA error", "Error [CUDA]", "cudaError", "CUDA driver error", "MPS")


class MpsError(RuntimeError):
    """The daemon cannot be found or started: one line naming what was expected."""


def gpu_fault(row: dict) -> bool:
    """Whether a row failed in a way another MPS client's fault also causes: a crash, or an
    error naming CUDA (GPU_FAULT_WORDS)."""
    if row["status"] == "crash":
        return True
    message = row["message"] or ""
    return row["status"] == "error" and any(w in message for w in GPU_FAULT_WORDS)


class MpsDaemon:
    """A private MPS control daemon: `start()`, then its workers' environment `env`, then
    `stop()` (quit, and its folders removed)."""

    def __init__(self, control: str, folder: Path):
        self.control, self.folder = control, folder
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
                    "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}

    @classmethod
    def start(cls) -> MpsDaemon:
        """MpsError where the control program is missing or the daemon does not start."""
        control = shutil.which(CONTROL)
        if control is None:
            raise MpsError(f"--mps: {CONTROL} is not on PATH (it comes with the NVIDIA "
                           "driver's utilities); run without --mps to share the GPUs by time "
                           "slicing")
        daemon = cls(control, Path(tempfile.mkdtemp(prefix="moecert-mps-")))
        for path in daemon.env.values():
            Path(path).mkdir()
        try:
            _control(control, daemon.env, ["-d"], "", START_S)
        except MpsError:
            shutil.rmtree(daemon.folder, ignore_errors=True)
            raise
        return daemon

    def server_ran(self) -> bool:
        """Whether the daemon started a server: it does so for its first client only, so a
        run whose workers never reached it says no (its log names a server by its process
        id: "Starting new server 2039 ...", "Server 2039 exited ...")."""
        try:
            text = (self.folder / "log" / "control.log").read_text(errors="replace")
        except OSError:
            return False
        return re.search(r"\bserver \d+", text, re.IGNORECASE) is not None

    def stop(self) -> None:
        """Quit the daemon (its server's contexts go with it) and remove its folders; where it
        does not answer, say so on stderr and leave them (the run's rows are written)."""
        try:
            _control(self.control, self.env, [], "quit\n", QUIT_S)
            _wait_quit(self.folder / "log" / "control.log")
        except MpsError as e:
            print(f"warning: {e}; the daemon may still run (its pipe folder: "
                  f"{self.env['CUDA_MPS_PIPE_DIRECTORY']})", file=sys.stderr)
            return
        shutil.rmtree(self.folder, ignore_errors=True)


def _control(control: str, env: dict[str, str], args: list[str], stdin: str,
             timeout: float) -> None:
    # The daemon sees every GPU: a server started under CUDA_VISIBLE_DEVICES numbers the
    # devices it was given from 0 (NVIDIA's MPS documentation), and a worker pinned to GPU 1
    # of "1" alone would then name a device the server does not have
    outer = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    try:
        done = subprocess.run([control, *args], input=stdin, text=True, capture_output=True,
                              env={**outer, **env}, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MpsError(f"--mps: {CONTROL} {' '.join(args) or '(quit)'} gave no answer in "
                       f"{timeout:g} s") from None
    if done.returncode:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise MpsError(f"--mps: {CONTROL} {' '.join(args) or '(quit)'} exited with "
                       f"{done.returncode}" + (f": {said[-1]}" if said else ""))


def _wait_quit(log: Path) -> None:
    """Until the daemon's log says it exited (its server's contexts are gone with it)."""
    deadline = time.monotonic() + QUIT_S
    while time.monotonic() < deadline:
        try:
            if "Exit with status" in log.read_text(errors="replace"):
                return
        except OSError:
            return
        time.sleep(0.2)


__all__ = ["CONTROL", "GPU_FAULT_WORDS", "MpsDaemon", "MpsError", "gpu_fault"]
