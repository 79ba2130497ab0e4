"""SIGINT, SIGTERM and SIGHUP through a run's phases, process-wide.

SIGHUP (the terminal closed, an SSH session dropped) is taken as SIGTERM is: the run saves and
says how to resume, and what it prints to the gone terminal is dropped
(:class:`rltrain.process.streams.PipeSafe`). Under ``nohup`` (SIGHUP ignored when the process
starts) it stays ignored.

* **Start-up** (imports, config, building envs and networks): nothing is worth saving
  yet, so a signal stops at once with :class:`EarlyStop`, which the CLI reports in one
  line (not Python's 40-line KeyboardInterrupt traceback).
* **Training** (:func:`training`): the first signal asks the trainer to stop after the
  step in flight, save a checkpoint and report how to resume; a second one stops at
  once with :class:`StopNow`.
* **After training**, and in sweep workers: signals are only recorded.

Every signal is recorded (:func:`requested`), so that a sweep starts no new job once
its user asked it to stop.

* **Preemption** (a job of Hydra's submitit launcher, on SLURM or local): submitit warns of a
  timeout or preemption with SIGUSR2 and, in its own handler, requeues the job and exits at
  once. During training rltrain takes that signal first: the trainer finishes its step and
  checkpoints, then :func:`hand_over_preemption` calls submitit's handler, which requeues the
  job; the requeued job finds its checkpoint and resumes
  (``rltrain.sweeps.attempts.continue_job``).
  A job of submitit's *local* executor, whose signal always means its time ends in 30 s,
  trains on for 20 of them first (:func:`local_slot_left`): a one-minute slot trained 25 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: signals a terminal sends to its whole process group: Ctrl-C, and the hang-up when it closes
TERMINAL: tuple[int, ...] = (signal.SIGINT,)
if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # not under nohup
    TERMINAL += (signal.SIGHUP,)
#: the signals that stop a run (SIGHUP as SIGTERM)
SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, *TERMINAL[1:])
#: signals received by this process, in order
_received: list[int] = []
#: the signals the start-up handler raised EarlyStop for
_startup_stops: list[int] = []
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
    their SIGINT (and SIGHUP) is the terminal's, sent to the whole process group, which the
    sweep's main process answers by sending each job SIGTERM, so workers ignore those."""
    pid = os.environ.get(SWEEP_PID_ENV)
    return pid is not None and pid != str(os.getpid())


def _set(handler: Callable[[int, Any], None] | int, sigs: tuple[int, ...] = SIGNALS) -> None:
    if _main_thread():
        for sig in sigs:
            signal.signal(sig, handler)


def _stop_at_startup(signum: int, frame: Any) -> None:
    record(signum)
    _startup_stops.append(signum)
    raise EarlyStop(signum)


def startup() -> None:
    """Install the start-up handlers: a signal ends the process at once."""
    _set(_stop_at_startup)


def stopped_before_training(signum: int) -> str:
    """What a process stopped by a signal before training began says (after ``rltrain: ``)."""
    return (f"{name(signum)} received before training began: stopped; nothing was trained, so "
            "there is nothing to resume")


#: called before the process ends itself while a run is built (see :func:`building`): tidy
#: up what start-up made (an empty run directory holding only its lock)
_at_hard_stop: list[Callable[[], None]] = []


def at_hard_stop(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` for :func:`building`'s hard stop; returns what unregisters it."""
    _at_hard_stop.append(callback)
    return lambda: _at_hard_stop.remove(callback) if callback in _at_hard_stop else None


#: seconds the start-up handler has to act on a signal during a build before the watcher
#: ends the process itself
BUILD_GRACE_S = 2.0


@contextlib.contextmanager
def building(message: Callable[[int], str] = stopped_before_training) -> Iterator[None]:
    """While a run is built (envs, networks, buffers), a signal the start-up handler takes is
    honoured even when the main thread is inside one long C call, where Python runs no
    handler until the call returns: a weight initialisation of a layer with billions of
    weights, seen to ignore two SIGINTs for a minute while memory grew. Python's own C-level
    handler writes the signal's number to a wakeup pipe at once; a watcher thread reading it
    gives the handler :data:`BUILD_GRACE_S` seconds, then says ``message(signum)`` and ends
    the process (``128 + signum``), after the :func:`at_hard_stop` callbacks. Nothing of a
    run is written before it is built, so there is nothing to save. Only in the main thread
    of a process whose start-up handler is installed (a member of a batched sweep, or a sweep
    worker, takes signals its own way)."""
    if not _main_thread() or signal.getsignal(signal.SIGINT) is not _stop_at_startup:
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread after all
        os.close(read_end)
        os.close(write_end)
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data or done.is_set():
                return
            signum = data[-1]
            if signal.getsignal(signum) is not _stop_at_startup:
                continue  # a signal this phase does not stop for
            if done.wait(BUILD_GRACE_S) or signum in _startup_stops:
                return  # the handler ran: the main thread is on its way out
            for callback in list(_at_hard_stop):
                with contextlib.suppress(Exception):
                    callback()
            with contextlib.suppress(Exception):
                print(f"rltrain: {message(signum)}", file=sys.stderr, flush=True)
            os._exit(128 + signum)

    watcher = threading.Thread(target=watch, name="rltrain-build-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        os.close(write_end)  # the watcher's read ends
        watcher.join(timeout=1.0)
        os.close(read_end)


def stopped_at_startup() -> int | None:
    """The signal the start-up handler raised :class:`EarlyStop` for, if any. What comes out
    of start-up after it is that stop, whatever it became on the way: raised inside an
    extension module's import, it comes out as the module's ImportError (numpy's "numpy._core
    .multiarray failed to import", seen with SIGINT 0.3 s after the start)."""
    return _startup_stops[0] if _startup_stops else None


def quiet() -> None:
    """Record signals, do nothing else (after training; sweep workers before training)."""
    _set(lambda signum, frame: record(signum))
    if in_sweep_worker():
        _set(signal.SIG_IGN, TERMINAL)


def between_jobs(handler: Callable[[int, Any], None]) -> None:
    """Install ``handler`` now and after every job's training (a sweep's main process)."""
    global _between_jobs
    _between_jobs = handler
    _set(handler)


#: the stop requests of runs training in threads other than the main one
_in_threads: set[Callable[[int], None]] = set()


def stop_threads(signum: int) -> None:
    """Ask every run that trains in a thread of its own to stop (as the first signal does)."""
    for request_stop in list(_in_threads):
        request_stop(signum)


#: a preemption signal taken during training, and the handler it was taken from
_preempted: tuple[int, Any] | None = None


def preemption_signal() -> int | None:
    """The signal submitit sends before a timeout or preemption, in a submitit job."""
    if not any(key.startswith("SUBMITIT_") for key in os.environ):
        return None
    sig = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)
    return int(sig) if sig is not None else None


def hand_over_preemption() -> None:
    """After a run stopped for a preemption signal (and checkpointed): call the handler that
    signal was taken from (submitit's: it requeues the job and exits)."""
    global _preempted
    if _preempted is None:
        return
    signum, handler = _preempted
    _preempted = None
    print(f"rltrain: checkpoint written; handing {name(signum)} back to the scheduler, which "
          "requeues the job; the requeued job resumes from the checkpoint", file=sys.stderr,
          flush=True)
    handler(signum, None)


def local_slot_left() -> float:
    """Seconds a job of submitit's *local* executor trains on after its timeout signal: that
    executor sends it SUBMITIT_LOCAL_SIGNAL_DELAY_S (30) seconds before it ends the job, and
    for nothing else, so the job uses that time, keeping a third of it (10 s at least) to
    finish its step, checkpoint and exit. 0 for any other scheduler: on SLURM the signal may
    mean a preemption, and when the job ends is not known here."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "local":
        return 0.0
    try:
        delay = float(os.environ["SUBMITIT_LOCAL_SIGNAL_DELAY_S"])
    except (KeyError, ValueError):
        return 0.0
    return max(0.0, delay - max(10.0, delay / 3))


@contextlib.contextmanager
def training(request_stop: Callable[[int], None],
             stop_now: Callable[[int], None] | None = None) -> Iterator[None]:
    """First signal: ``request_stop(signum)`` (finish the step, save, stop); second: raise
    :class:`StopNow`, or call ``stop_now(signum)`` when given (runs in threads of their own,
    which a signal handler cannot raise into). A signal recorded before training began is
    honoured at once.

    The handlers' lines go to the ``sys.stderr`` of the moment this is entered: the
    process's own, not the stream of whichever member of a batched sweep (rltrain.sweeps.batched)
    runs when the signal lands, whose lines carry that member's ``[job N]``."""
    err = sys.stderr

    def second(signum: int, frame: Any) -> None:
        record(signum)
        if stop_now is not None:
            stop_now(signum)
            return
        raise StopNow(signum)

    def first(signum: int, frame: Any) -> None:
        # the second handler first: a signal that arrives while this one runs (the message
        # below tells the user to send one) must stop at once, not be taken as the first again
        _set(second)
        if in_sweep_worker():
            _set(signal.SIG_IGN, TERMINAL)
        record(signum)
        request_stop(signum)
        print(f"\nrltrain: {name(signum)} received; finishing the current step and saving "
              "(send it again to stop at once)", file=err, flush=True)

    preempt_sig = preemption_signal()
    scheduler = signal.getsignal(preempt_sig) if preempt_sig is not None else None
    # the preemption signal is taken only from a handler it can be handed back to (submitit's)
    taken = preempt_sig if preempt_sig is not None and callable(scheduler) else None

    later: list[threading.Timer] = []  # a local submitit job's stop, near its slot's end
    over = threading.Event()  # training has ended: nothing to stop any more

    def stop_for_scheduler(signum: int) -> None:
        global _preempted
        if over.is_set():
            return
        _preempted = (signum, scheduler)
        request_stop(signum)
        print(f"\nrltrain: {name(signum)} from the scheduler (timeout or preemption): "
              "finishing the current step and checkpointing", file=err, flush=True)

    def preempt(signum: int, frame: Any) -> None:
        left = local_slot_left()
        if left > 0 and not later:  # the slot goes on after the signal: train on
            later.append(threading.Timer(left, stop_for_scheduler, args=(signum,)))
            later[0].daemon = True
            later[0].start()
            print(f"\nrltrain: {name(signum)} from submitit's local executor: its time ends "
                  f"soon; training on for {left:.0f} s, then checkpointing (the signal again "
                  "checkpoints now)", file=err, flush=True)
            return
        stop_for_scheduler(signum)

    if not _main_thread():
        # handlers can only be set from the main thread: a run in a thread (a member of a
        # batched sweep's batch, rltrain.sweeps.batch_scheduler) is stopped through
        # :func:`stop_threads`, which the main thread's own handler calls
        _in_threads.add(request_stop)
        if (earlier := requested()) is not None:
            # a signal while this member was being built, which reached the members training
            # then: honoured at once, as below, or a second signal would find it still
            # training its first step and stop it with no checkpoint written
            request_stop(earlier)
        try:
            yield
        finally:
            _in_threads.discard(request_stop)
        return
    _set(first)
    if in_sweep_worker():
        _set(signal.SIG_IGN, TERMINAL)
    if taken is not None:
        signal.signal(taken, preempt)
    if (earlier := requested()) is not None:
        request_stop(earlier)
    try:
        yield
    finally:
        over.set()
        for timer in later:
            timer.cancel()
        if taken is not None:
            signal.signal(taken, scheduler)
        if _between_jobs is not None:
            _set(_between_jobs)
        else:
            quiet()
