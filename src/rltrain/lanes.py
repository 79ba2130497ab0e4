"""Lanes: several runs in one process, taking turns, whose updates meet and run as one batch.

A sweep of seeds of one config repeats the same small computations once per seed: each
seed's update is a few thousand small matrix products, and a CPU spends as much time
dispatching them as computing them. Run side by side in one process, the seeds' updates can
be one computation over stacked parameters (``hydra/launcher=batched``, :mod:`rltrain.batched`).

Everything else about each run stays as it is: its config, run directory, checkpoints, logs,
resume and failures are an ordinary job's, because each lane runs the ordinary job, in a
thread of its own. The lanes take turns (one runs at a time, so there is no race on anything
they share) and a lane gives up its turn only where it asks for an update
(:func:`meet`). When every live lane has asked, the :class:`Scheduler` runs the updates, one
batch per kind of work that can go together (:meth:`Work.batch_key`), and each lane goes on
with its own result.

What a lane's code sees of the process's global state (the RNGs of torch, numpy and Python,
and whatever else the launcher swaps: the logging handlers, Hydra's job config, the console
streams) is its own: on each turn :class:`Swap` s put the lane's state in place and take it
back out at the end of the turn. So a seed draws the random numbers it draws run alone, and
its records differ from the run alone only by the order of floating-point sums in the
batched update.
"""

from __future__ import annotations

import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

_local = threading.local()


def current() -> Lane | None:
    """The lane the calling code runs in (None outside a batched sweep)."""
    return getattr(_local, "lane", None)


def elsewhere() -> float:
    """Seconds the calling lane has spent waiting while other lanes took their turns (0.0
    outside a lane): a run's timing leaves them out, so that its update's time is the
    stacked computation's, not the other seeds' collection and tests."""
    lane = current()
    return 0.0 if lane is None else lane.elsewhere


class Work(ABC):
    """What a lane hands over at :func:`meet`: the inputs of one update."""

    @abstractmethod
    def batch_key(self) -> Hashable:
        """Works with equal keys run as one batch (same kind, same shapes)."""

    @classmethod
    @abstractmethod
    def run_batch(cls, works: Sequence[Any]) -> list[Any]:
        """Run ``works`` (of this class, equal keys) as one computation; one result each, in
        order. Called on the scheduler's thread: it must draw no random numbers (a lane draws
        what its update needs before it meets)."""


def meet(work: Work) -> Any:
    """Hand ``work`` to the scheduler and wait for its result (in a lane); outside a lane,
    run it alone."""
    lane = current()
    if lane is None:
        return type(work).run_batch([work])[0]
    return lane.meet(work)


class Swap(ABC):
    """One piece of process-wide state that each lane has its own copy of."""

    #: True where the scheduler's thread neither reads nor changes the state between turns
    #: (the RNGs: a batch draws no random numbers). A turn then only puts the lane's state in
    #: place and takes it back out, and the caller's state is put back once, when the lanes
    #: have ended: half the work per turn (numpy's legacy RNG costs about 35 us to read and
    #: as much to set, which made a turn about 0.2 ms)
    lazy: bool = False

    @abstractmethod
    def get(self) -> Any:
        """The state as it is now."""

    @abstractmethod
    def put(self, state: Any) -> None:
        """Put ``state`` in place."""

    def swap(self, state: Any) -> Any:
        """Put ``state`` in place (None: leave the state as it is); return the one it
        replaced."""
        old = self.get()
        if state is not None:
            self.put(state)
        return old


class RNGs(Swap):
    """The global random number generators: torch's (CPU, and CUDA's once it is in use),
    numpy's legacy one and Python's."""

    lazy = True

    def get(self) -> Any:
        return (torch.get_rng_state(), np.random.get_state(), random.getstate(),
                torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)

    def put(self, state: Any) -> None:
        cpu, np_state, py_state, cuda = state
        torch.set_rng_state(cpu)
        np.random.set_state(np_state)
        random.setstate(py_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@dataclass(eq=False)
class Lane:
    """One run in a thread of its own; :meth:`Scheduler.run` gives it its turns."""

    name: str
    target: Callable[[], Any]
    swaps: Sequence[Swap]
    #: the lane's state of each swap when it starts (None: the state as it is then)
    initial: Sequence[Any] | None = None
    #: what ``target`` returned, or the exception it raised
    returned: Any = None
    error: BaseException | None = None
    done: bool = False
    work: Work | None = None
    result: Any = None
    #: seconds spent waiting for other lanes' turns (see :func:`elsewhere`)
    elsewhere: float = 0.0
    #: seconds the last batch that held this lane's work took
    batch_s: float = 0.0
    _states: list[Any] = field(default_factory=list)
    _outer: list[Any] = field(default_factory=list)
    #: the caller's state of each lazy swap, as it was when the lane started
    _caller: list[Any] = field(default_factory=list)
    _turn: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _back: threading.Semaphore | None = None
    _thread: threading.Thread | None = None

    def start(self, back: threading.Semaphore) -> None:
        self._back = back
        self._caller = [s.get() if s.lazy else None for s in self.swaps]
        initial = list(self.initial) if self.initial is not None else [None] * len(self.swaps)
        # a lazy swap's None is the caller's state, which the turns do not keep in place
        self._states = [caller if state is None and s.lazy else state
                        for s, state, caller in zip(self.swaps, initial, self._caller,
                                                    strict=True)]
        self._thread = threading.Thread(target=self._main, name=f"rltrain lane {self.name}",
                                        daemon=True)
        self._thread.start()

    def states(self) -> list[Any]:
        """The lane's own state of each swap (as it was at the end of its last turn)."""
        return list(self._states)

    def _enter(self) -> None:
        self._outer = []
        for s, state in zip(self.swaps, self._states, strict=True):
            if s.lazy:
                s.put(state)
                self._outer.append(None)
            else:
                self._outer.append(s.swap(state))

    def _leave(self) -> None:
        self._states = [s.get() if s.lazy else s.swap(outer)
                        for s, outer in zip(self.swaps, self._outer, strict=True)]

    def restore_caller(self) -> None:
        """Put the caller's state of each lazy swap back (when the lanes have ended)."""
        for s, state in zip(self.swaps, self._caller, strict=True):
            if s.lazy:
                s.put(state)

    def _main(self) -> None:
        self._turn.acquire()
        _local.lane = self
        self._enter()
        try:
            self.returned = self.target()
        except BaseException as e:  # noqa: BLE001 - handed to the scheduler's caller
            self.error = e
        finally:
            self._leave()
            self.done = True
            assert self._back is not None
            self._back.release()

    def meet(self, work: Work) -> Any:
        self.work = work
        self._leave()
        assert self._back is not None
        left = time.perf_counter()
        self._back.release()
        self._turn.acquire()
        self.elsewhere += time.perf_counter() - left - self.batch_s
        self._enter()
        result, self.result = self.result, None
        if isinstance(result, BaseException):
            raise result
        return result

    def turn(self) -> None:
        """Run this lane until it meets or ends (from the scheduler's thread)."""
        assert self._back is not None
        self._turn.release()
        self._back.acquire()


class Scheduler:
    """Runs lanes in turns and their met works in batches, on the calling thread."""

    def __init__(self, lanes: Sequence[Lane]) -> None:
        self.lanes = list(lanes)
        self._back = threading.Semaphore(0)
        #: how many batches ran, and how many works they held (for the launcher's summary)
        self.batches = 0
        self.works = 0
        self._stop: BaseException | None = None

    def stop_now(self, error: BaseException) -> None:
        """Run no more batches: each lane's next meet raises ``error`` (a second signal's
        StopNow, which stops its run at once; safe to call from a signal handler). A lane
        in its turn goes on to its meet, and a batch in flight finishes first."""
        self._stop = error

    def run(self) -> None:
        for lane in self.lanes:
            lane.start(self._back)
        try:
            self._turns()
        finally:
            for lane in reversed(self.lanes):
                lane.restore_caller()

    def _turns(self) -> None:
        while live := [lane for lane in self.lanes if not lane.done]:
            for lane in live:
                lane.turn()
            waiting = [lane for lane in self.lanes if not lane.done and lane.work is not None]
            if self._stop is not None:
                for lane in waiting:
                    lane.work, lane.result = None, self._stop
                continue
            groups: dict[Hashable, list[Lane]] = {}
            for lane in waiting:
                assert lane.work is not None
                groups.setdefault((type(lane.work), lane.work.batch_key()), []).append(lane)
            for group in groups.values():
                self._run_group(group)

    def _run_group(self, group: list[Lane]) -> None:
        works = [lane.work for lane in group if lane.work is not None]
        self.batches += 1
        self.works += len(works)
        start = time.perf_counter()
        try:
            results: list[Any] = type(works[0]).run_batch(works)
        except Exception as e:  # noqa: BLE001 - each lane's run fails with it, as alone
            results = [e] * len(group)
        took = time.perf_counter() - start
        for lane, result in zip(group, results, strict=True):
            lane.work, lane.result, lane.batch_s = None, result, took
