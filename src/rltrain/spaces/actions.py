"""One action-scaling convention for continuous actions.

Algorithms act in a normalised space: each dimension of a Box with finite bounds maps to [-1,
1] (squashing policies output exactly that; Gaussian ones may go beyond and are clipped). The
env receives ``offset + scale * clip(a, -1, 1)``, i.e. -1 -> low and 1 -> high. A dimension
with an infinite bound is passed through as it is (scale 1, offset 0, no clipping); algorithms
that squash their actions (SAC, TD3, DDPG) refuse such spaces instead.

The result is clipped once more to [low, high], so that rounding can never put it an ulp
outside the env's space. The replay buffer stores the normalised action the algorithm produced
(PPO needs its unclipped Gaussian sample for log-probabilities). Train and test envs get
:class:`ScaleActions`; the deployable policy ends in :class:`ActionScale`, the same arithmetic
in torch (multiply, then add, each rounded once, as numpy does), so eval reproduces the test
step exactly.

Integer actions (Discrete, MultiDiscrete, MultiBinary) are indices 0 to n - 1 of each entry
for the algorithms and the buffers. An env whose values start elsewhere (gymnasium's
``start``) gets ``start + a``: train and test envs through :class:`ShiftActions`, the
deployable policy by adding :func:`integer_start` after its argmax; datasets, which hold the
env's values, are shifted back when a buffer is made from them.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorActionWrapper, VectorEnv
from torch import nn


def scaling(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, ...]:
    """(offset, scale, lo, hi) as float32 arrays: env action = offset + scale * clip(a, lo, hi)."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    finite = np.isfinite(low) & np.isfinite(high)
    low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)  # no inf - inf
    offset = np.where(finite, (high + low) / 2, 0.0).astype(np.float32)
    scale = np.where(finite, (high - low) / 2, 1.0).astype(np.float32)
    lo = np.where(finite, -1.0, -np.inf).astype(np.float32)
    hi = np.where(finite, 1.0, np.inf).astype(np.float32)
    return offset, scale, lo, hi


def to_env(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    offset, scale, lo, hi = scaling(low, high)
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    return np.clip(np.clip(np.asarray(a, dtype=np.float32), lo, hi) * scale + offset, low, high)


def to_agent(env_action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The normalised action that :func:`to_env` maps to ``env_action`` (datasets, tests)."""
    offset, scale, _, _ = scaling(low, high)
    return ((np.asarray(env_action, dtype=np.float32) - offset) / scale).astype(np.float32)


class ScaleActions(VectorActionWrapper):
    """The vector env seen by the algorithm: actions in the normalised space."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        space = env.single_action_space
        assert isinstance(space, gym.spaces.Box)
        self.offset, self.scale, self.lo, self.hi = scaling(space.low, space.high)
        self.low, self.high = space.low.astype(np.float32), space.high.astype(np.float32)
        self.single_action_space = gym.spaces.Box(self.lo, self.hi, space.shape, np.float32)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         env.num_envs)

    def actions(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, *self.lo.shape)
        return np.clip(np.clip(a, self.lo, self.hi) * self.scale + self.offset, self.low,
                       self.high)


class ActionScale(nn.Module):
    """The same map in torch: the last step of a deployable continuous policy."""

    # buffers (registered in __init__), each of shape [action_dim]: see :func:`scaling`
    offset: torch.Tensor
    scale: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        values = (*scaling(low, high), np.asarray(low, np.float32), np.asarray(high, np.float32))
        for name, value in zip(("offset", "scale", "lo", "hi", "low", "high"), values,
                               strict=True):
            self.register_buffer(name, torch.as_tensor(value).reshape(-1))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        a = torch.minimum(torch.maximum(a, self.lo), self.hi) * self.scale + self.offset
        return torch.minimum(torch.maximum(a, self.low), self.high)


def integer_start(space: gym.Space) -> np.ndarray | None:
    """The env's value of action 0 in each entry of an integer action space (int64, shape
    ``space.shape``), or None when it is 0 everywhere (or the space is not an integer one)."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        start = np.broadcast_to(np.asarray(space.start, dtype=np.int64), space.shape or ())
        return np.array(start) if start.any() else None
    return None


class ShiftActions(VectorActionWrapper):
    """The vector env seen by the algorithm when its integer actions do not start at 0: the
    algorithm's indices in, ``start + index`` to the env."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        space = env.single_action_space
        start = integer_start(space)
        if start is None:
            raise ValueError(f"{space} starts at 0: there is nothing to shift")
        self.start = start
        if isinstance(space, gym.spaces.Discrete):
            self.single_action_space: gym.Space = gym.spaces.Discrete(int(space.n))
        else:
            assert isinstance(space, gym.spaces.MultiDiscrete)
            self.single_action_space = gym.spaces.MultiDiscrete(space.nvec, space.dtype)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         env.num_envs)

    def actions(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, dtype=np.int64) + self.start
