"""Return estimators as pure functions over arrays: GAE and n-step returns, and the
stage that turns sampled indices into a batch of n-step targets.

The estimators are tested against plain per-transition reference loops and against an env
whose true value is known (``tests/test_returns.py``). The learning maths lives here, not
in the buffer: the buffer stores and answers "what is at these indices", a sampler chooses
the indices, and :func:`nstep_batch` combines them with the algorithm's gamma and n.
"""

from __future__ import annotations

import numpy as np
import torch

from rltrain.data.batch import Batch
from rltrain.data.storage import ReplayBuffer


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


def nstep_returns(
    rewards: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    gamma: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Discounted n-step returns for a batch of windows of consecutive transitions.

    Arrays are ``(batch, n)``: row b holds the transitions t, t+1, ..., t+n-1 of
    one lane. A window stops after the first done (the episode ended) and before
    the first invalid entry (not yet collected); position 0 is always used.

    Returns ``(returns, last, discount)``: the summed discounted rewards, the
    index of the last transition used (whose next observation is the bootstrap
    state), and the factor for the bootstrap value, ``gamma**(last+1)`` or 0 if
    that transition terminated.
    """
    batch, n = rewards.shape
    used = np.empty((batch, n), dtype=bool)
    used[:, 0] = True
    if n > 1:
        # transition k is used if every earlier one in the window did not end the
        # episode and every one up to k has been collected
        np.logical_and.accumulate(~dones[:, :-1] & valid[:, 1:], axis=1, out=used[:, 1:])
    powers = gamma ** np.arange(n, dtype=np.float64)
    returns = (rewards * used * powers).sum(axis=1).astype(np.float32)
    last = used.sum(axis=1) - 1
    ended = terminated[np.arange(batch), last]
    discount = np.where(ended, 0.0, gamma ** (last + 1.0)).astype(np.float32)
    return returns, last, discount


def nstep_batch(buffer: ReplayBuffer, lanes: np.ndarray, positions: np.ndarray, n: int,
                gamma: float) -> Batch:
    """The batch of transitions ``(lanes[i], positions[i])`` of ``buffer`` with n-step
    targets ``rew + discount * V(next_obs)``.

    n == 1 is one-step TD: the stored reward, discount ``gamma`` or 0 if the transition
    terminated (a truncated one keeps its bootstrap). Otherwise each window of n
    transitions stops after the first done and before entries not yet stored
    (:func:`nstep_returns`), and bootstraps from the next observation of its last
    transition.
    """
    if n < 1:
        raise ValueError(f"n-step returns need n >= 1, got {n}")
    if n == 1 and buffer.mirror is not None:  # gathered on the buffer's device copy
        obs_t, act_t, rew_t, terminated_t, next_obs_t = buffer.device_transitions(lanes,
                                                                                  positions)
        discount_t = torch.full_like(rew_t, gamma).masked_fill_(terminated_t, 0.0)
        return Batch(obs=obs_t, act=act_t, rew=rew_t, next_obs=next_obs_t,
                     discount=discount_t, lanes=lanes, positions=positions)
    if n == 1:  # every gradient step of SAC, TD3, DDPG: one gather per field
        obs, act, rew, terminated, next_obs = buffer.transitions(lanes, positions)
        discount = np.where(terminated, np.float32(0.0), np.float32(gamma))
        return Batch(obs=obs, act=act, rew=rew, next_obs=next_obs, discount=discount,
                     lanes=lanes, positions=positions)
    window = buffer.window(lanes, positions, n)
    rew, last, discount = nstep_returns(
        window.rew, window.terminated, window.terminated | window.truncated, window.stored,
        gamma)
    first = window.flat[:, 0]
    return Batch(
        obs=buffer.obs_at_flat(first),
        act=buffer.act_at_flat(first),
        rew=rew,
        next_obs=buffer.next_obs_at_flat(window.flat[np.arange(len(last)), last], lanes),
        discount=discount,
        lanes=lanes,
        positions=positions,
    )
