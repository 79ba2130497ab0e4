"""Stacking: work that several runs in one process hand over, to be run as one computation.

A batched sweep (``hydra/launcher=batched``) runs several runs of one config side by side in
one process, as the members of a batch. Where a run's code has work that the same work of the
other members could join (PPO's minibatch steps: the same small matrix products, once per
seed), it hands the work over as a :class:`Stackable` (:func:`stack`) and goes on with its own
result.

This module is all that a run's code (an algorithm, the trainer) sees of the batch. What
drives the members and runs their stacked work (the batch scheduler,
:mod:`rltrain.sweeps.batch_scheduler`) puts a :class:`Meeting` on each member's thread
(:func:`attend`); outside a batch there is none, and a work runs alone. So an algorithm offers
its work without knowing the scheduler, and the scheduler runs works without knowing any
algorithm.

Ground floor: imports nothing of rltrain.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any, Protocol


class Stackable(ABC):
    """What a run hands over at :func:`stack`: the inputs of one piece of work (an update)."""

    @abstractmethod
    def batch_key(self) -> Hashable:
        """Works of one class with equal keys run as one batch (same kind, same shapes)."""

    @classmethod
    @abstractmethod
    def run_batch(cls, works: Sequence[Any]) -> list[Any]:
        """Run ``works`` (of this class, equal keys) as one computation; one result each, in
        order. Called on the scheduler's thread: it must draw no random numbers (a run draws
        what its work needs before it hands the work over)."""


class Meeting(Protocol):
    """Where a member of a batch hands its work over (the scheduler's side of one member)."""

    #: seconds the member has spent waiting while other members took their turns
    elsewhere: float

    def meet(self, work: Stackable) -> Any:
        """Hand ``work`` over and wait for its result, run in a batch with other members'."""


_local = threading.local()


def attend(meeting: Meeting | None) -> None:
    """Make ``meeting`` the calling thread's (None: the thread runs no member of a batch).
    The batch scheduler calls it on each member's thread."""
    _local.meeting = meeting


def meeting() -> Meeting | None:
    """The calling thread's meeting: None outside a batched sweep's member."""
    return getattr(_local, "meeting", None)


def stack(work: Stackable) -> Any:
    """``work``'s result: run in a batch with the other members' (in a member of a batch), or
    alone (anywhere else)."""
    here = meeting()
    if here is None:
        return type(work).run_batch([work])[0]
    return here.meet(work)


def time_elsewhere() -> float:
    """Seconds the calling member has spent waiting while other members took their turns (0.0
    outside a batch): a run's timing leaves them out, so that its update's time is the
    stacked computation's, not the other members' collection and tests."""
    here = meeting()
    return 0.0 if here is None else here.elsewhere
