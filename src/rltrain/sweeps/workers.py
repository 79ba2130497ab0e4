"""A sweep job in a worker process of joblib or Ray, whose jobs run side by side: its lines
carry the job's prefix (:mod:`~rltrain.sweeps.prefixed`) and it does not outlive the sweep
(:mod:`~rltrain.sweeps.orphans`). A job in the sweep's main process, or a submitit job (its
output goes to a log file of its own, and it outlives the command that submitted it by
design), passes through unchanged.

Imports :mod:`~rltrain.sweeps.prefixed` and :mod:`~rltrain.sweeps.orphans` of the package, and
of rltrain :mod:`rltrain.process.signals` and :mod:`rltrain.common.stacking`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from rltrain.process import signals
from rltrain.sweeps import batch_scheduler
from rltrain.sweeps.orphans import OrphanWatch
from rltrain.sweeps.prefixed import prefix_console


def _submitit_job() -> bool:
    """Whether this process is a job of Hydra's submitit launcher: its output goes to a log
    file of its own, and it outlives the command that submitted it by design (submitit can
    reattach to it)."""
    return any(key.startswith("SUBMITIT_") for key in os.environ)


def parallel_job() -> bool:
    """Whether this job runs beside others that share the console (joblib's and Ray's worker
    processes): its lines are prefixed with the job (:func:`job_in_worker`)."""
    return signals.in_sweep_worker() and not _submitit_job()


@contextlib.contextmanager
def members_in_worker() -> Iterator[None]:
    """Run the members of a batched sweep's batch in a worker process (rltrain.sweeps.batched,
    ``n_jobs`` > 1): the worker does not outlive the sweep, as for :func:`job_in_worker`; each
    member's lines carry its own prefix."""
    if not parallel_job():
        yield
        return
    OrphanWatch.watch()
    OrphanWatch.running.set()
    try:
        yield
    finally:
        OrphanWatch.running.clear()


@contextlib.contextmanager
def job_in_worker(num: int) -> Iterator[None]:
    """Run sweep job ``num`` in a joblib or Ray worker process (anything else passes through):

    * every line the job prints, on stdout and stderr, starts with ``[job N]``, since jobs
      running side by side share the console;
    * the job does not outlive the sweep: a thread checks every second that the sweep's main
      process is alive, and when it is gone (killed, even with SIGKILL) it stops the job as
      SIGTERM does (the step finishes, checkpoint, summary.json says interrupted), then ends
      this worker process (:class:`~rltrain.sweeps.orphans.OrphanWatch`)."""
    if not parallel_job() or batch_scheduler.current() is not None:
        yield  # a member of a batch: its lines are prefixed, its worker watched, already
        return
    OrphanWatch.watch()
    prefixed = prefix_console(f"[job {num}] ")
    OrphanWatch.running.set()
    try:
        yield
    finally:
        OrphanWatch.running.clear()
        prefixed.remove()
