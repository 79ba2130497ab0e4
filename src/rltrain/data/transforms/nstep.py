"""N-step returns (Sutton and Barto 2018, section 7.1; as DQN's variants use them, Hessel et
al. 2018): the transform every temporal-difference algorithm learns through.

For each sampled transition, the rewards of up to ``n`` consecutive transitions of its lane,
discounted, and the discount its bootstrap value takes: ``rew + discount * V(next_obs)`` is
the target. ``n == 1`` is one-step TD. A window stops after the first transition that ended
its episode and before any not yet stored; a terminated transition bootstraps from nothing
(discount 0), a truncated one keeps its bootstrap. Tested against per-transition reference
loops (``tests/data/test_returns.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms import Record, register


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


class NStepReturns:
    """The ``n``-step return and bootstrap discount of each sampled transition, with
    ``gamma``: fills ``rew``, ``discount`` and ``next_obs`` (the observation the last
    transition used leads to).

    :raises ValueError: ``n < 1``.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n-step returns need n >= 1, got {n}")
        self.n, self.gamma = n, gamma
        self.window = n
        #: it reads sampled transitions and windows of their lanes
        self.reads = "batch"

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        if self.n == 1:
            record["discount"] = _one_step_discount(record["terminated"], record["rew"],
                                                    self.gamma)
            return record
        window = record.pop("window")
        rew, last, discount = nstep_returns(
            window.rew, window.terminated, window.terminated | window.truncated,
            window.stored, self.gamma)
        record.update(
            rew=rew, discount=discount,
            next_obs=storage.next_obs_at_flat(window.flat[np.arange(len(last)), last],
                                              record["lanes"]))
        return record

    def __repr__(self) -> str:
        return f"NStepReturns(n={self.n}, gamma={self.gamma})"


def _one_step_discount(terminated: np.ndarray | torch.Tensor, rew: np.ndarray | torch.Tensor,
                       gamma: float) -> np.ndarray | torch.Tensor:
    """``gamma``, or 0 where the transition terminated (a truncated one keeps its bootstrap);
    on the device when the transitions were gathered there."""
    if isinstance(terminated, torch.Tensor):
        assert isinstance(rew, torch.Tensor)
        return torch.full_like(rew, gamma).masked_fill_(terminated, 0.0)
    return np.where(terminated, np.float32(0.0), np.float32(gamma))


register("nstep", NStepReturns)
