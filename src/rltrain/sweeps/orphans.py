"""A worker's watch on the sweep's main process: a job does not outlive its sweep.

A worker that outlived its sweep went on training its job unsupervised, and then sat idle,
for as long as the job ran (loky's workers: 20 minutes and more after a SIGKILL). The worker
is a child of the main process here, but need not be (Ray), and a parent-death signal (prctl
PR_SET_PDEATHSIG) fires when the *thread* that started the child ends, which for loky is an
executor thread of the main process, not the process: so the main process is watched by its
pid and start time, on the same host only (:func:`mark_main_process` says which, as the
sweep starts; :class:`OrphanWatch` watches it in each worker).

Imports nothing of the package; of rltrain, only :mod:`rltrain.process.signals`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from rltrain.process import signals

#: the host of the sweep's main process: a worker on that host watches that the main process
#: (signals.SWEEP_PID_ENV) is alive (:class:`OrphanWatch`)
HOST_ENV = "RLTRAIN_SWEEP_HOST"


def mark_main_process() -> None:
    """As the sweep starts, in its main process: its pid and host, which its workers inherit
    (and by which :func:`rltrain.process.signals.in_sweep_worker` knows a worker)."""
    os.environ[signals.SWEEP_PID_ENV] = str(os.getpid())
    os.environ[HOST_ENV] = socket.gethostname()


class OrphanWatch:
    """The watch on the sweep's main process, one thread per worker process: when the main
    process is gone (killed, even with SIGKILL) while a job runs, the job is stopped as
    SIGTERM does (its step finishes, checkpoint, summary.json says interrupted), then this
    worker process ends."""

    #: set while a job runs in this worker
    running = threading.Event()
    _thread: threading.Thread | None = None
    #: seconds the job is given to finish its step and save, before a second SIGTERM
    grace_s = 30.0

    @classmethod
    def watch(cls) -> None:
        """Start the watch in this worker (once; not on another host than the sweep's)."""
        if cls._thread is not None:
            return
        pid = os.environ.get(signals.SWEEP_PID_ENV, "")
        if os.environ.get(HOST_ENV) != socket.gethostname() or not pid.isdigit():
            return  # a worker on another host: the sweep's pid is not this host's
        started = _started(int(pid))
        if started is None:
            return  # gone already, or not to be seen from here
        cls._thread = threading.Thread(target=cls._run, args=(int(pid), started),
                                       name="rltrain-sweep-watch", daemon=True)
        cls._thread.start()

    @classmethod
    def _run(cls, pid: int, started: str) -> None:
        while _started(pid) == started:
            time.sleep(1.0)
        if cls.running.is_set():
            print(f"rltrain: the sweep's main process (pid {pid}) is gone: stopping this job "
                  "(it finishes its step and saves)", file=sys.stderr, flush=True)
            for _ in range(2):  # the second SIGTERM stops at once
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + cls.grace_s
                while cls.running.is_set() and time.monotonic() < deadline:
                    time.sleep(0.2)
                if not cls.running.is_set():
                    break
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)


def _started(pid: int) -> str | None:
    """A process's start time (its identity with its pid), or None if it is gone or a zombie
    (a killed process stays one until its parent reaps it). Without /proc, "alive"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return "alive"
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return None if fields[0] in ("Z", "X", "x") else fields[19]
