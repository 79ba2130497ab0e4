"""Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438): the transform the
on-policy actor-critics learn through (PPO, A2C; REINFORCE's Monte-Carlo returns are its
lambda = 1).

It reads a rollout's record (``(lanes, T)`` fields, :func:`rltrain.data.reading.read_rollout`)
and adds ``advantages`` and ``returns`` (the advantages plus ``values``: the critic's
regression targets). The values come from the algorithm's critic as it is at the update
(:class:`Critic`), never from acting time: the observation normaliser moves during a
collection, and the critic is evaluated on the rollout's observations as the update's losses
see them. What the critic computed along the way that the update reuses (a shared encoder's
features, a recurrent replay) stays in the record by name and reaches the update in
``Rollout.fields``.

The estimate itself, :func:`gae`, is a pure function over arrays, tested against a plain
per-transition reference loop and against an env whose true value is known
(``tests/data/test_returns.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from rltrain.data.transforms import Record, register

if TYPE_CHECKING:
    from rltrain.data.storage import ReplayBuffer


class Critic(Protocol):
    """What GAE asks of the algorithm whose state-value critic it bootstraps from."""

    def rollout_values(self, record: Record) -> Record:
        """``values`` and ``next_values``: V(s) and V(s') of every slot of the rollout,
        ``(lanes, T)`` arrays, by the critic as it is now (s' is each transition's own next
        observation, so an episode cut by its time limit bootstraps from its true last
        state); and, by name, whatever computing them produced that the update reuses."""
        ...

    def learning_rewards(self, rew: np.ndarray) -> np.ndarray:
        """The rewards as the losses take them (scaled when ``env.normalize.reward`` is on)."""
        ...


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Generalized Advantage Estimation over lanes of transitions.

    All arrays are ``(num_lanes, T)``, time along the last axis. ``next_values``
    holds V(s') for each transition's own next observation, so a truncated
    episode bootstraps from its true final observation and the last transition
    of a rollout needs no separate "last value". ``dones`` (terminated or
    truncated) cut the recursion; ``terminated`` alone drops the bootstrap.
    Entries with ``valid == False`` (unused slots at a lane's end) get advantage 0
    and do not leak into earlier entries.
    """
    not_term = 1.0 - terminated.astype(np.float32)
    carry = (gamma * lam) * (1.0 - dones.astype(np.float32))
    deltas = rewards + gamma * next_values * not_term - values
    advantages = np.zeros_like(deltas, dtype=np.float32)
    last = np.zeros(deltas.shape[0], dtype=np.float32)
    for t in range(deltas.shape[1] - 1, -1, -1):
        last = np.where(valid[:, t], deltas[:, t] + carry[:, t] * last, 0.0)
        advantages[:, t] = last
    return advantages


class GAE:
    """The advantages (with ``gamma`` and ``lam``) and returns of every slot of a rollout,
    from ``critic``'s values of its observations at update time: fills ``values``,
    ``next_values``, ``advantages`` and ``returns`` (and what the critic adds beside them)."""

    #: it reads a whole rollout, never a window of a sampled transition's lane
    window = 1
    reads = "rollout"

    def __init__(self, critic: Critic, gamma: float, lam: float) -> None:
        self.critic, self.gamma, self.lam = critic, gamma, lam

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        record.update(self.critic.rollout_values(record))
        terminated = record["terminated"]
        advantages = gae(self.critic.learning_rewards(record["rew"]), record["values"],
                         record["next_values"], terminated, terminated | record["truncated"],
                         record["valid"], self.gamma, self.lam)
        record.update(advantages=advantages, returns=advantages + record["values"])
        return record

    def __repr__(self) -> str:
        return f"GAE(gamma={self.gamma}, lam={self.lam})"


register("gae", GAE)
