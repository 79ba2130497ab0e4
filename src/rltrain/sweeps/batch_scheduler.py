"""The batch scheduler: several runs in one process, the members of a batch, taking turns,
whose stacked work meets and runs as one computation.

A sweep of seeds of one config repeats the same small computations once per seed: each
seed's update is a few thousand small matrix products, and a CPU spends as much time
dispatching them as computing them. Run side by side in one process, the seeds' updates can
be one computation over stacked parameters (``hydra/launcher=batched``,
:mod:`rltrain.sweeps.batched`).

Everything else about each run stays as it is: its config, run directory, checkpoints, logs,
resume and failures are an ordinary job's, because each member of the batch runs the ordinary
job, in a thread of its own. The members take turns (one runs at a time, so there is no race
on anything they share) and a member gives up its turn only where its code hands work over
(:func:`rltrain.common.stacking.stack`, which reaches the member's :meth:`Member.meet`: the member
is its thread's :class:`rltrain.common.stacking.Meeting`). When every live member has handed its
work over, the :class:`Scheduler` runs the works, one batch per kind of work that can go together
(:meth:`rltrain.common.stacking.Stackable.batch_key`), and each member goes on with its own result.
The scheduler knows no algorithm and no trainer: they offer work through
:mod:`rltrain.common.stacking`, below both.

What a member's code sees of the process's global state (the RNGs of torch, numpy and Python,
and whatever else the launcher swaps: the logging handlers, Hydra's job config, the console
streams) is its own: on each turn :class:`Swap` s put the member's state in place and take it
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

from rltrain.common import stacking
from rltrain.common.stacking import Stackable


def current() -> Member | None:
    """The member of a batch the calling code runs in (None outside a batched sweep)."""
    here = stacking.meeting()
    return here if isinstance(here, Member) else None


class Swap(ABC):
    """One piece of process-wide state that each member has its own copy of."""

    #: True where the scheduler's thread neither reads nor changes the state between turns
    #: (the RNGs: a batch draws no random numbers). A turn then only puts the member's state
    #: in place and takes it back out, and the caller's state is put back once, when the
    #: members have ended: half the work per turn (numpy's legacy RNG costs about 35 us to
    #: read and as much to set, which made a turn about 0.2 ms)
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
class Member:
    """One run of a batch, in a thread of its own; :meth:`Scheduler.run` gives it its turns.
    It is its thread's :class:`rltrain.common.stacking.Meeting`."""

    name: str
    target: Callable[[], Any]
    swaps: Sequence[Swap]
    #: the member's state of each swap when it starts (None: the state as it is then)
    initial: Sequence[Any] | None = None
    #: what ``target`` returned, or the exception it raised
    returned: Any = None
    error: BaseException | None = None
    done: bool = False
    work: Stackable | None = None
    result: Any = None
    #: seconds spent waiting for other members' turns (see
    #: :func:`rltrain.common.stacking.time_elsewhere`)
    elsewhere: float = 0.0
    #: seconds the last batch that held this member's work took
    batch_s: float = 0.0
    _states: list[Any] = field(default_factory=list)
    _outer: list[Any] = field(default_factory=list)
    #: the caller's state of each lazy swap, as it was when the member started
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
        self._thread = threading.Thread(target=self._main, name=f"rltrain member {self.name}",
                                        daemon=True)
        self._thread.start()

    def states(self) -> list[Any]:
        """The member's own state of each swap (as it was at the end of its last turn)."""
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
        """Put the caller's state of each lazy swap back (when the members have ended)."""
        for s, state in zip(self.swaps, self._caller, strict=True):
            if s.lazy:
                s.put(state)

    def _main(self) -> None:
        self._turn.acquire()
        stacking.attend(self)
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

    def meet(self, work: Stackable) -> Any:
        """Hand ``work`` over: give up the turn until the batch that holds it has run."""
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
        """Run this member until it meets or ends (from the scheduler's thread)."""
        assert self._back is not None
        self._turn.release()
        self._back.acquire()


class Scheduler:
    """Runs members in turns and their met works in batches, on the calling thread."""

    def __init__(self, members: Sequence[Member]) -> None:
        self.members = list(members)
        self._back = threading.Semaphore(0)
        #: how many batches ran, and how many works they held (for the launcher's summary)
        self.batches = 0
        self.works = 0
        self._stop: BaseException | None = None

    def stop_now(self, error: BaseException) -> None:
        """Run no more batches: each member's next meet raises ``error`` (a second signal's
        StopNow, which stops its run at once; safe to call from a signal handler). A member
        in its turn goes on to its meet, and a batch in flight finishes first."""
        self._stop = error

    def run(self) -> None:
        for member in self.members:
            member.start(self._back)
        try:
            self._turns()
        finally:
            for member in reversed(self.members):
                member.restore_caller()

    def _turns(self) -> None:
        while live := [member for member in self.members if not member.done]:
            for member in live:
                member.turn()
            waiting = [member for member in self.members
                       if not member.done and member.work is not None]
            if self._stop is not None:
                for member in waiting:
                    member.work, member.result = None, self._stop
                continue
            groups: dict[Hashable, list[Member]] = {}
            for member in waiting:
                assert member.work is not None
                groups.setdefault((type(member.work), member.work.batch_key()),
                                  []).append(member)
            for group in groups.values():
                self._run_group(group)

    def _run_group(self, group: list[Member]) -> None:
        works = [member.work for member in group if member.work is not None]
        self.batches += 1
        self.works += len(works)
        start = time.perf_counter()
        try:
            results: list[Any] = type(works[0]).run_batch(works)
        except Exception as e:  # noqa: BLE001 - each member's run fails with it, as alone
            results = [e] * len(group)
        took = time.perf_counter() - start
        for member, result in zip(group, results, strict=True):
            member.work, member.result, member.batch_s = None, result, took
