"""Uniform sampling: every stored transition equally likely (``buffer.sampler=uniform``, the
default)."""

from __future__ import annotations

import numpy as np

from rltrain.config.schemas import ReplayBufferConfig
from rltrain.data.samplers import SamplerSpec, Unweighted, register
from rltrain.data.storage import ReplayBuffer


class UniformSampler(Unweighted):
    """Every stored transition equally likely, whichever lane holds it and however full the
    lanes are: one integer is drawn over all stored transitions, then mapped to its lane
    (lanes one after another) and to its position there (counted from the lane's oldest).

    :param seed: seed of the sampler's own ``np.random.default_rng``.
    """

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
        # each lane's oldest slot: its write position once full, else 0 (the ring's layout,
        # read from the two arrays this sampler already reads, without a call back)
        oldest = np.where(size == cap, buffer.ptr % cap, 0)
        return lanes, (oldest[lanes] + offsets) % cap


def _build(cfg: ReplayBufferConfig, seed: int) -> UniformSampler:
    return UniformSampler(seed)


register(SamplerSpec(name="uniform", build=_build, title="uniform sampling"))
