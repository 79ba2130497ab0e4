"""Finished episodes: the slots of a rollout whose return is known, for an algorithm that
learns from Monte-Carlo returns (REINFORCE: GAE with lambda = 1, :mod:`.gae`, sums the rewards
to the first done).

Episodes span collection steps (the collector resets an env only when its episode ends), so
with several train envs a rollout holds, at the end of each lane, the beginning of an episode
still running when the collection stopped. Its return is not known yet: this transform sets
``learn`` to the slots whose episode ends in their lane, and the update learns from those
alone (the rest of that episode is learnt from in the next rollout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rltrain.data.transforms import Record, register

if TYPE_CHECKING:
    from rltrain.data.storage import ReplayBuffer


def finished(dones: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """For each slot of ``(lanes, T)`` arrays: whether it is valid and its episode ends in
    its lane, at it or later (a done at or after it)."""
    ends = (dones & valid)[:, ::-1]
    return np.logical_or.accumulate(ends, axis=1)[:, ::-1] & valid


class FinishedEpisodes:
    """Fills ``learn``: the rollout's slots whose episode ended in it (:func:`finished`)."""

    #: it reads a whole rollout, never a window of a sampled transition's lane
    window = 1
    reads = "rollout"

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        record["learn"] = finished(record["terminated"] | record["truncated"], record["valid"])
        return record

    def __repr__(self) -> str:
        return "FinishedEpisodes()"


register("finished_episodes", FinishedEpisodes)
