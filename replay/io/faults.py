"""Fault injection for the tests: RETRACE_INTERRUPT_AT=<point> sends a Ctrl-C (SIGINT) at a named point of an
operation; <point>+<seconds> sends it that many seconds later, from a timer, so that it lands inside whatever runs
then (a Spark job, a commit). The signal goes where a terminal's Ctrl-C goes: the whole process group when this
process leads a session of its own (a command a test started as a terminal would), else this process alone (a
test calling the command in its own process, whose group may hold other processes)."""
from __future__ import annotations

import os
import signal
import threading
import time

VARIABLE = "RETRACE_INTERRUPT_AT"


def interrupt_point(name: str) -> None:
    point, _, delay = os.environ.get(VARIABLE, "").partition("+")
    if point != name:
        return
    if delay:
        threading.Timer(float(delay), _ctrl_c).start()
        return
    _ctrl_c()
    time.sleep(5)  # the signal is handled here


def _ctrl_c() -> None:
    if os.getsid(0) == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGINT)
    else:
        os.kill(os.getpid(), signal.SIGINT)
