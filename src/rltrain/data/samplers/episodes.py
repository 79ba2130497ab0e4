"""Episode-uniform sampling (``buffer.sampler=episodes``): an episode uniformly among the
stored ones, then a transition uniformly within it, so that a short episode weighs as much as
a long one.

This is how hindsight experience replay draws its batches (Andrychowicz et al. 2017,
"Hindsight Experience Replay", arXiv:1707.01495: episodes are drawn from the buffer, then a
time step within each), and what its relabelling strategies build on; alone, it replays the
steps of short episodes (early failures, quick successes) more often than uniform replay.
"""

from __future__ import annotations

import numpy as np

from rltrain.config.schemas import ReplayBufferConfig
from rltrain.data.episodes import EpisodeIndex
from rltrain.data.samplers import SamplerSpec, Unweighted, register
from rltrain.data.storage import ReplayBuffer


class EpisodeSampler(Unweighted):
    """An episode uniformly among every stored one, whichever lane holds it (the episodes
    in flight count, with the transitions they have so far, and so do those whose beginning
    the ring overwrote, with what is left), then a transition uniformly within it.

    The episodes are found by an :class:`~rltrain.data.episodes.EpisodeIndex` of the buffer,
    kept from one draw to the next and rebuilt from the buffer whenever it cannot follow it
    (a restored buffer, another buffer): it is not part of the sampler's state, which is its
    generator alone.

    :param seed: seed of the sampler's own ``np.random.default_rng``.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.index: EpisodeIndex | None = None

    def _index_of(self, buffer: ReplayBuffer) -> EpisodeIndex:
        if self.index is None or self.index.buffer is not buffer:
            self.index = EpisodeIndex(buffer)
        return self.index

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        index = self._index_of(buffer)
        counts = index.counts()
        total = int(counts.sum())
        if total == 0:
            raise ValueError("cannot sample from an empty buffer")
        drawn = self.rng.integers(total, size=batch_size)
        ends = np.cumsum(counts)
        lanes = np.searchsorted(ends, drawn, side="right")
        first, length = index.episode(lanes, drawn - (ends - counts)[lanes])
        step = self.rng.integers(length)
        return lanes, (first + step) % buffer.lane_capacity


def _build(cfg: ReplayBufferConfig, seed: int) -> EpisodeSampler:
    return EpisodeSampler(seed)


register(SamplerSpec(name="episodes", build=_build, title="episode-uniform sampling"))
