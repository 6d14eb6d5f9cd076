"""Ctrl-C during a command: Spark's jobs are cancelled and the command stops with one line saying what it left.

PySpark's own SIGINT handler cancels the jobs over the py4j connection the main thread is blocked on: that call
fails (a reentrant call), py4j logs ~100 lines of tracebacks, and the JVM call in flight is abandoned, so it may
still commit (a journal's rows, a target's table) after the command has said what it left. Here the jobs are
cancelled from another thread (its own py4j connection), again as each new one starts (a cancel reaches only the
jobs running at that moment, and one JVM call may start several), and KeyboardInterrupt is raised only in Python:
at once when the main thread is in Python, else when the JVM call in flight has ended, at the main thread's next
JVM call (which is then not sent) or, if it makes none, a moment later. A JVM call is never cut in half, so what
the command reports is what stays. A third Ctrl-C stops at once.
"""
from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from collections.abc import Callable

POLL = 0.05  # seconds between looks at the main thread (still inside a JVM call?) and at Spark's running jobs
# After the JVM call, a cancelled job's error unwinds to the command's report, or the main thread's next JVM call
# raises: the KeyboardInterrupt is sent only if the main thread is still running Python this long after.
GRACE = 1.0
CALL = "c\n"  # py4j's command to call a method (not its memory commands, sent by finalizers)


class CtrlC:
    """The SIGINT handler of a command (`install`), and what the command says it left (`on_stop`)."""

    def __init__(self):
        self.received = False  # a Ctrl-C came: whatever the command raises from here on is the interruption
        self.presses = 0
        self.explain: Callable[[], str] | None = None
        self._raised = False  # KeyboardInterrupt was raised once: clean-up code runs, its JVM calls included
        self._settled = False  # the command is reporting its interruption
        self._due = False  # the watcher (not the user) raised the signal: the JVM call it waited for is over
        self._lock = threading.Lock()
        self._previous = None
        self._client = None  # py4j's client, whose calls from the main thread stop once a Ctrl-C came

    def install(self) -> None:
        """Handle SIGINT from here on (again after SparkContext has installed its own handler)."""
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGINT)
        if current is not self._handle:
            if self._previous is None:
                self._previous = current
            signal.signal(signal.SIGINT, self._handle)
        self._guard_jvm_calls()

    def restore(self) -> None:
        """The handler from before `install` (a command called in a process that goes on: a test)."""
        self.settle()
        if self._client is not None:
            del self._client.send_command  # the class's method again
            self._client = None
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)

    def settle(self) -> None:
        """The command is reporting its interruption: nothing is raised any more (but a third Ctrl-C)."""
        with self._lock:
            self._settled = True

    def _stop(self):
        self._raised = True
        raise KeyboardInterrupt

    def _handle(self, signum, frame) -> None:
        with self._lock:
            due, self._due = self._due, False
        if not due:  # the user's Ctrl-C
            self.received, self.presses = True, self.presses + 1
            if self.presses >= 3:
                self._stop()
            if self.presses == 2:
                print("stopping: waiting for Spark's call in flight to end (Ctrl-C again to stop at once)",
                      file=sys.stderr, flush=True)
                return
        if self._settled or self._raised:
            return
        if not in_jvm(frame):
            self._stop()
        threading.Thread(target=self._watch, daemon=True).start()

    def _guard_jvm_calls(self) -> None:
        """Once a Ctrl-C came, the main thread's next call into the JVM is not sent: KeyboardInterrupt instead."""
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None or self._client is not None:
            return
        client, main = sc._gateway._gateway_client, threading.main_thread()
        send = client.send_command

        def guarded(command, *args, **kwargs):
            if (self.received and not (self._raised or self._settled) and command.startswith(CALL)
                    and threading.current_thread() is main):
                self._stop()
            return send(command, *args, **kwargs)

        client.send_command = guarded
        self._client = client

    def _watch(self) -> None:
        """Cancel Spark's jobs while the main thread is inside a JVM call; once it has been back in Python for a
        moment without stopping, raise the signal again in it."""
        main, out_since = threading.main_thread().ident, None
        while not (self._raised or self._settled):
            frame = sys._current_frames().get(main)
            if frame is None:
                return
            if in_jvm(frame):
                _cancel_spark_jobs()
                out_since = None
            elif out_since is None:
                out_since = time.monotonic()
            elif time.monotonic() - out_since >= GRACE:
                with self._lock:
                    self._due = True
                _thread.interrupt_main(signal.SIGINT)
                return
            time.sleep(POLL)


def in_jvm(frame) -> bool:
    """Whether the frame (a thread's current one) is inside a py4j call: waiting on the JVM."""
    while frame is not None:
        if "py4j" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _cancel_spark_jobs() -> None:
    """Cancel the jobs Spark runs now, if any."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return
    try:
        if sc.statusTracker().getActiveJobsIds():
            sc.cancelAllJobs()
    except Exception:  # noqa: BLE001 - a context being stopped: nothing left to cancel
        pass


ctrl_c = CtrlC()


def start() -> CtrlC:
    """A new handler for a command that starts now, installed."""
    global ctrl_c
    ctrl_c = CtrlC()
    ctrl_c.install()
    return ctrl_c


def on_stop(explain: Callable[[], str]) -> None:
    """What the running command says it left when Ctrl-C stops it (one sentence)."""
    ctrl_c.explain = explain
