"""Generalized Advantage Estimation as a pure function over arrays, which the on-policy
algorithms call on their rollouts (the n-step returns of the off-policy ones are a transform
of the read path: :mod:`rltrain.data.transforms.nstep`).

Tested against a plain per-transition reference loop and against an env whose true value is
known (``tests/test_returns.py``).
"""

from __future__ import annotations

import numpy as np


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
    """Generalized Advantage Estimation (Schulman et al. 2016) over lanes of transitions.

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
