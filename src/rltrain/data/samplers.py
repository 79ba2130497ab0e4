"""Samplers choose which stored transitions a batch holds; the buffer only stores them.

A sampler returns ``(lanes, positions)``, the indices of transitions in a
:class:`~rltrain.data.buffers.ReplayBuffer`; building the batch from them (n-step returns,
:func:`rltrain.data.returns.nstep_batch`) is a separate stage. Keeping the choice apart
from the storage is what lets a prioritised sampler (Schaul et al. 2016) or a sampler of
sequences for recurrent networks be another class with the same interface, as the design's
extension points ask, instead of a subclass of the buffer. Its state (the random generator,
and for a prioritised sampler its priorities) is checkpointed on its own.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from rltrain.data.buffers import ReplayBuffer


class Sampler(Protocol):
    """What the trainer asks of any sampler."""

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size`` stored transitions of ``buffer`` as ``(lanes, positions)``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Plain data (no objects), so that a checkpoint loads with ``weights_only=True``."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class UniformSampler:
    """Every stored transition equally likely, whichever lane holds it and however full the
    lanes are: one integer is drawn over all stored transitions, then mapped to its lane
    (lanes one after another) and to its position there (counted from the lane's oldest).

    :param seed: seed of the sampler's own ``np.random.default_rng``.
    """

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        size, cap = buffer.size, buffer.lane_capacity
        total = int(size.sum())
        if total == 0:
            raise ValueError("cannot sample from an empty buffer")
        flat = self.rng.integers(total, size=batch_size)
        if total == buffer.num_lanes * cap:
            # every lane full (a replay buffer once filled): the lane and the offset are the
            # quotient and the remainder, as the search below would find them, in fewer steps
            lanes, offsets = np.divmod(flat, cap)
            return lanes, (buffer.ptr[lanes] + offsets) % cap
        ends = np.cumsum(size)
        lanes = np.searchsorted(ends, flat, side="right")
        offsets = flat - (ends - size)[lanes]
        return lanes, (buffer.oldest()[lanes] + offsets) % cap

    def state_dict(self) -> dict[str, Any]:
        """The generator's state (a dict of ints and strings)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
