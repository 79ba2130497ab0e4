"""What the storage hands out: a sampled :class:`Batch`, an on-policy :class:`Rollout`, an
n-step :class:`Window` of consecutive transitions.

Plain types, built by :mod:`rltrain.data.storage` (rollouts, windows) and the read path,
:mod:`rltrain.data.reading` (batches, and rollouts with what their transforms computed), read
by the algorithms. Imports numpy and torch only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch


@dataclass(frozen=True)
class Batch:
    """Sampled transitions, as the read path (rltrain.data.reading) gives them to an update:
    with n-step returns applied, the target is ``rew + discount * V(next_obs)``. Host
    arrays, or tensors on the device when the buffer
    keeps a device copy (:meth:`rltrain.data.storage.ReplayBuffer.mirror_on`) and the batch
    is one-step."""

    obs: np.ndarray | torch.Tensor
    act: np.ndarray | torch.Tensor
    rew: np.ndarray | torch.Tensor
    next_obs: np.ndarray | torch.Tensor
    #: the bootstrap value's factor, from the algorithm's returns transform
    #: (rltrain.data.transforms); None for an algorithm that declares none (BC)
    discount: np.ndarray | torch.Tensor | None
    #: (lane, position) of each sampled transition, for priority updates
    lanes: np.ndarray
    positions: np.ndarray
    #: importance-sampling weights (float32, ``(batch,)``) when the sampler is prioritised
    #: (:class:`rltrain.data.samplers.prioritized.PrioritizedSampler`); None under uniform sampling
    weights: np.ndarray | None = None
    #: the algorithm's declared fields (``AlgoSpec.stored``) and what its transforms added,
    #: by name, ``(batch, ...)`` each
    fields: dict[str, np.ndarray | torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Rollout:
    """Every stored transition as ``(num_lanes, T, ...)`` arrays in time order, with a
    ``valid`` mask for the unused slots at the end of shorter lanes.

    As storage hands it out (``ReplayBuffer.rollout``) it holds what was stored; as the
    on-policy read path hands it to an update (rltrain.data.reading.read_rollout) it holds
    what the algorithm's transforms computed too (rltrain.data.transforms: GAE's advantages,
    returns and values; the slots to learn from), ``(num_lanes, T)`` each."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    #: the algorithm's declared fields (``AlgoSpec.stored``), ``(num_lanes, T, ...)`` each,
    #: and what its transforms computed beside the attributes below, by name (e.g. a shared
    #: encoder's features of the observations, which the update reuses)
    fields: dict[str, Any] = field(default_factory=dict)
    #: the advantage of every slot (0 on the unused ones), from the algorithm's transforms
    #: (GAE, rltrain.data.transforms.gae); None as storage hands it out
    advantages: np.ndarray | None = None
    #: the advantages plus :attr:`values`: the critic's regression targets
    returns: np.ndarray | None = None
    #: the critic's V(s) of every slot at the update, which the advantages were computed with
    values: np.ndarray | None = None
    #: the slots to learn from: the valid ones, or fewer (a transform's choice: REINFORCE
    #: learns from finished episodes alone); None as storage hands it out
    learn: np.ndarray | None = None

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    @property
    def num_transitions(self) -> int:
        return int(self.valid.sum())


class Window(NamedTuple):
    """For each of ``B`` starting transitions, the ``n`` consecutive transitions of its lane
    from there on: ``(B, n)`` arrays. ``stored`` is False past the lane's newest transition
    (those entries hold whatever the slot holds and must be ignored). (A named tuple: it is
    built for every batch, and cheaper to build than a frozen dataclass.)"""

    rew: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    stored: np.ndarray
    positions: np.ndarray
    #: the entries' flat indices (lane * lane_capacity + position), for the gathers that follow
    flat: np.ndarray
