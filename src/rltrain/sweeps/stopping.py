"""A sweep asked to stop: the stop file, and the signal passed on to the running jobs.

SIGINT or SIGTERM to the sweep's main process writes :data:`STOP_FILE` into the sweep
directory, so that no job starts after it (:func:`stop_requested`, asked by each job and by
the Optuna sweeper before each trial), and sends SIGTERM to every job process that holds a
run-directory lock there (joblib workers, submitit's local processes), so each finishes its
step, checkpoints and says how to resume. Imports :mod:`rltrain.sweeps.command` of the
package (the sweep's directory), and the ground floor.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from rltrain.process import signals
from rltrain.rundir import directory
from rltrain.rundir.files import write_new
from rltrain.sweeps.command import STATE

STOP_FILE = ".rltrain-stop"


def stop_requested(job_sweep_dir: Path) -> bool:
    """Whether this sweep was asked to stop (in this process, or by the main process)."""
    return signals.requested() is not None or (job_sweep_dir / STOP_FILE).exists()


def arm(sweep_dir: Path) -> None:
    """As the sweep starts: forget a stop file an earlier, stopped sweep left there."""
    (sweep_dir / STOP_FILE).unlink(missing_ok=True)


def job_pids(path: Path) -> list[int]:
    """Processes (other than this one) that hold a run-directory lock under ``path``."""
    pids = []
    for lock in path.rglob(directory.LOCK):
        pid = directory.lock_holder_pid(lock.parent)
        if pid is not None and pid != os.getpid():
            pids.append(pid)
    return pids


def stop_sweep(signum: int, frame: Any) -> None:
    """The sweep's main process, on a signal between jobs
    (:func:`rltrain.process.signals.between_jobs`): stop starting jobs, pass the signal on as
    SIGTERM."""
    again = signals.requested() is not None
    signals.record(signum)
    sweep_dir = STATE.directory
    if sweep_dir is None:
        return
    with contextlib.suppress(OSError):
        write_new(sweep_dir / STOP_FILE, signals.name(signum) + "\n")
    pids = sorted(set(job_pids(sweep_dir)))  # a worker holding several members' runs: once
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    what = "stopping them at once" if again else (
        "each finishes its step, saves and stops (send it again to stop them at once)")
    print(f"\nrltrain: {signals.name(signum)} received: the sweep starts no new job; "
          f"{len(pids)} running job(s) elsewhere: {what}", file=sys.stderr, flush=True)
