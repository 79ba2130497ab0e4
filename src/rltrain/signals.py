"""SIGINT and SIGTERM through a run's phases, process-wide.

* **Start-up** (imports, config, building envs and networks): nothing is worth saving
  yet, so a signal stops at once with :class:`EarlyStop`, which the CLI reports in one
  line (not Python's 40-line KeyboardInterrupt traceback).
* **Training** (:func:`training`): the first signal asks the trainer to stop after the
  step in flight, save a checkpoint and report how to resume; a second one stops at
  once with :class:`StopNow`.
* **After training**, and in sweep workers: signals are only recorded.

Every signal is recorded (:func:`requested`), so that a sweep starts no new job once
its user asked it to stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: signals received by this process, in order
_received: list[int] = []
#: set in a sweep's main process, inherited by its worker processes
SWEEP_PID_ENV = "RLTRAIN_SWEEP_PID"
#: the handler between a sweep's jobs (set by the sweep's main process), else record only
_between_jobs: Callable[[int, Any], None] | None = None


class EarlyStop(BaseException):
    """A signal arrived before training began (a BaseException: nothing may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name} before training began")
        self.signum = signum


class StopNow(KeyboardInterrupt):
    """A second signal during training: stop at once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def requested() -> int | None:
    """The first signal this process received, if any."""
    return _received[0] if _received else None


def record(signum: int) -> None:
    _received.append(signum)


def reset() -> None:
    _received.clear()


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def in_sweep_worker() -> bool:
    """Whether this process runs sweep jobs for another (joblib, submitit, Ray workers):
    their SIGINT is the terminal's Ctrl-C to the whole process group, which the sweep's
    main process answers by sending each job SIGTERM, so workers ignore SIGINT."""
    pid = os.environ.get(SWEEP_PID_ENV)
    return pid is not None and pid != str(os.getpid())


def _set(handler: Callable[[int, Any], None] | int, sigs: tuple[int, ...] = SIGNALS) -> None:
    if _main_thread():
        for sig in sigs:
            signal.signal(sig, handler)


def startup() -> None:
    """Install the start-up handlers: a signal ends the process at once."""

    def stop(signum: int, frame: Any) -> None:
        record(signum)
        raise EarlyStop(signum)

    _set(stop)


def quiet() -> None:
    """Record signals, do nothing else (after training; sweep workers before training)."""
    _set(lambda signum, frame: record(signum))
    if in_sweep_worker():
        _set(signal.SIG_IGN, (signal.SIGINT,))


def between_jobs(handler: Callable[[int, Any], None]) -> None:
    """Install ``handler`` now and after every job's training (a sweep's main process)."""
    global _between_jobs
    _between_jobs = handler
    _set(handler)


@contextlib.contextmanager
def training(request_stop: Callable[[int], None]) -> Iterator[None]:
    """First signal: ``request_stop(signum)`` (finish the step, save, stop); second: raise
    :class:`StopNow`. A signal recorded before training began is honoured at once."""

    def second(signum: int, frame: Any) -> None:
        record(signum)
        raise StopNow(signum)

    def first(signum: int, frame: Any) -> None:
        # the second handler first: a signal that arrives while this one runs (the message
        # below tells the user to send one) must stop at once, not be taken as the first again
        _set(second)
        if in_sweep_worker():
            _set(signal.SIG_IGN, (signal.SIGINT,))
        record(signum)
        request_stop(signum)
        print(f"\nrltrain: {name(signum)} received; finishing the current step and saving "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    if not _main_thread():
        yield  # handlers can only be set from the main thread
        return
    _set(first)
    if in_sweep_worker():
        _set(signal.SIG_IGN, (signal.SIGINT,))
    if requested() is not None:
        request_stop(requested())
    try:
        yield
    finally:
        if _between_jobs is not None:
            _set(_between_jobs)
        else:
            quiet()
