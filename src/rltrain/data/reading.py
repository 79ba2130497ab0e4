"""The read path: sampler -> gather -> transforms -> the batch an update learns from.

One way through, called by the trainer: a :mod:`sampler <rltrain.data.samplers>` picks stored
transitions, :func:`gather` reads their fields from storage into a record (a dict of named
fields, ``(B, ...)`` each), each of the algorithm's :mod:`transforms <rltrain.data.transforms>`
computes what the loss needs from that record (n-step returns; hindsight relabelling and
V-trace are more of the same), and the record becomes a :class:`~rltrain.data.batch.Batch`.
The algorithm receives the batch; it never holds the storage or the sampler. What the update
reports back (priorities) goes to the sampler through :meth:`ReadPath.learned`.

On-policy, the same stages over the whole rollout (:func:`read_rollout`): every stored
transition is read, lanes x time, into a record of ``(lanes, T, ...)`` fields, the algorithm's
transforms compute what its losses need (GAE's advantages and returns, by the critic as it is
at the update), and the record becomes the :class:`~rltrain.data.batch.Rollout` the update
learns from, in minibatches of its own.

Layer: the data path; imports storage, samplers and transforms, never an algorithm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rltrain.data.batch import Batch, Rollout
from rltrain.data.samplers import Sampler
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms import Record, Transform, check_reads


def gather(storage: ReplayBuffer, lanes: np.ndarray, positions: np.ndarray, window: int
           ) -> Record:
    """The stored fields of transitions ``(lanes[i], positions[i])``.

    ``window == 1``: each transition alone, ``obs, act, rew, terminated, next_obs``, read in
    one gather per field (on the storage's device copy when it has one, as tensors there).
    ``window > 1``: ``obs`` and ``act`` of each, and ``window``, the
    :class:`~rltrain.data.batch.Window` of the ``window`` transitions of its lane from it
    on, from which a transform reads what it needs (the one-step fields would be read for
    nothing).

    The fields the storage declares beside a transition's (``ReplayBuffer.declared``: what
    the algorithm asked to be stored) come with each transition, by name (from the device
    copy when there is one, as the one-step fields).
    """
    record: Record = {"lanes": lanes, "positions": positions}
    if storage.declared:
        record.update(storage.device_declared_at(lanes, positions) if storage.mirror is not None
                      else storage.declared_at(lanes, positions))
    if window > 1:
        w = storage.window(lanes, positions, window)
        first = w.flat[:, 0]
        record.update(obs=storage.obs_at_flat(first), act=storage.act_at_flat(first), window=w)
        return record
    fields = (storage.device_transitions if storage.mirror is not None
              else storage.transitions)(lanes, positions)
    record.update(zip(("obs", "act", "rew", "terminated", "next_obs"), fields, strict=True))
    return record


def read(storage: ReplayBuffer, lanes: np.ndarray, positions: np.ndarray,
         transforms: Sequence[Transform], weights: np.ndarray | None = None) -> Batch:
    """The batch of the given transitions: gathered as wide as the transforms read, then
    transformed in order."""
    record = gather(storage, lanes, positions, reach(transforms))
    for transform in transforms:
        record = transform(record, storage)
    return _batch(record, weights)


def reach(transforms: Sequence[Transform]) -> int:
    """How many consecutive transitions from each sampled one the transforms read (1: the
    transition alone)."""
    return max((t.window for t in transforms), default=1)


#: the record's entries a :class:`Batch` has attributes for; the rest are its ``fields``
_BATCH_ENTRIES = frozenset({"obs", "act", "rew", "next_obs", "discount", "lanes", "positions",
                            "window", "terminated"})


def _batch(record: Record, weights: np.ndarray | None) -> Batch:
    missing = [k for k in ("obs", "act", "rew", "next_obs") if k not in record]
    if missing:  # a window was read (a transform asked for it) and no transform used it
        raise RuntimeError(f"the read path produced no {', '.join(missing)}")
    return Batch(obs=record["obs"], act=record["act"], rew=record["rew"],
                 next_obs=record["next_obs"], discount=record.get("discount"),
                 lanes=record["lanes"], positions=record["positions"], weights=weights,
                 fields={k: v for k, v in record.items() if k not in _BATCH_ENTRIES})


class ReadPath:
    """One run's read path: its sampler and the algorithm's transforms, fixed at build.

    :param sampler: chooses the transitions (its stream is checkpointed by the trainer).
    :param transforms: what the algorithm declared it learns from (``Algorithm.transforms``).
    """

    def __init__(self, sampler: Sampler, transforms: Sequence[Transform]) -> None:
        check_reads(transforms, "batch", "a sampled read path")
        self.sampler = sampler
        self.transforms = tuple(transforms)
        #: consecutive transitions read per sampled one: 1 reads one-step transitions only,
        #: which is what a storage's device copy holds
        self.window = reach(self.transforms)

    def batch(self, storage: ReplayBuffer, batch_size: int, fraction: float) -> Batch:
        """Sample ``batch_size`` transitions and read them (``fraction``: of the run done,
        for a sampler's annealed importance weights)."""
        lanes, positions = self.sampler.sample(storage, batch_size)
        weights = self.sampler.weights(lanes, positions, fraction)
        return read(storage, lanes, positions, self.transforms, weights)

    def learned(self, batch: Batch, priorities: torch.Tensor | None) -> None:
        """Give the sampler the priorities the update reported for ``batch`` (a sampler that
        weighs its draws needs them; for the others this does nothing)."""
        if batch.weights is None:
            return
        assert priorities is not None  # the trainer refuses an update without them
        self.sampler.update(batch.lanes, batch.positions, priorities.detach().cpu().numpy())

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


# --------------------------------------------------------------------------- on-policy
def read_rollout(storage: ReplayBuffer, transforms: Sequence[Transform]) -> Rollout:
    """The whole rollout of append-only storage, through ``transforms`` in order
    (:func:`transformed`). A rollout with no transition (next-step autoreset: only reset
    steps were collected) comes back as storage gave it: nothing to compute or learn."""
    rollout = storage.rollout()
    if rollout.num_transitions == 0:
        return rollout
    return transformed(rollout, transforms, storage)


def transformed(rollout: Rollout, transforms: Sequence[Transform], storage: ReplayBuffer
                ) -> Rollout:
    """``rollout`` with what ``transforms`` compute from its fields, applied in order
    (``storage``: the storage it was read from, for a transform that reads more)."""
    record = rollout_record(rollout)
    for transform in transforms:
        record = transform(record, storage)
    return _rollout(record)


#: the record's entries a :class:`Rollout` has attributes for; the rest are its ``fields``
_ROLLOUT_ENTRIES = tuple(f.name for f in dataclasses.fields(Rollout) if f.name != "fields")


def rollout_record(rollout: Rollout) -> Record:
    """A rollout's fields by name, ``(lanes, T, ...)`` each (its declared fields among them):
    the record its transforms read."""
    record: Record = {name: getattr(rollout, name) for name in _ROLLOUT_ENTRIES}
    clash = set(record) & set(rollout.fields)
    if clash:
        raise ValueError(f"a rollout's field is named as one of its attributes: {clash}")
    record.update(rollout.fields)
    return record


def _rollout(record: Record) -> Rollout:
    """The rollout of a transformed record; ``learn`` is every valid slot unless a transform
    chose fewer."""
    learn = record["learn"] if record["learn"] is not None else record["valid"]
    return Rollout(**{**{name: record[name] for name in _ROLLOUT_ENTRIES}, "learn": learn},
                   fields={k: v for k, v in record.items() if k not in _ROLLOUT_ENTRIES})
