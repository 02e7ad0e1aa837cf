"""A run stopped by SIGTERM (a CI job's timeout, `kill`) or Ctrl-C (SIGINT) stops as it would
at its end, without a traceback: `interruptible()` turns either signal into `Interrupted` in
the main thread, where the runner stops its workers (runner.run_isolated) and `moecert run`
says what it had done and how to resume (cli/run_command.py). A second signal while it stops
is ignored; SIGKILL still ends it at once, and the journal keeps every case it finished."""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run got `signum` (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for
        SIGTERM."""
        return 128 + self.signum


@contextlib.contextmanager
def interruptible():
    """SIGINT and SIGTERM raise `Interrupted` while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for s in SIGNALS:  # stopping takes a moment: a second signal must not cut it short
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    before = {s: signal.signal(s, stop) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


__all__ = ["Interrupted", "interruptible"]
