"""Preallocated transition storage with one lane per env.

A lane is a circular array of the transitions of one env, in time order, so
consecutive entries of a lane are consecutive steps of that env (what n-step
returns and GAE need). The collector writes only real transitions: under
gymnasium's next-step autoreset, the reset step of a finished env is skipped,
so lanes may hold different counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rltrain.data.returns import nstep_returns


class BufferFullError(RuntimeError):
    pass


@dataclass(frozen=True)
class Batch:
    """Sampled transitions with n-step returns applied: the target is
    ``rew + discount * V(next_obs)``."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    next_obs: np.ndarray
    discount: np.ndarray
    #: (lane, position) of each sampled transition, for priority updates
    lanes: np.ndarray
    positions: np.ndarray


@dataclass(frozen=True)
class Rollout:
    """Every stored transition as ``(num_lanes, T, ...)`` arrays in time order, with a
    ``valid`` mask for the unused slots at the end of shorter lanes."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    @property
    def num_transitions(self) -> int:
        return int(self.valid.sum())


class ReplayBuffer:
    """Circular (replay) or append-only (rollout) storage, ``num_lanes`` x ``lane_capacity``.

    :param circular: overwrite the oldest transitions when a lane is full (replay);
        if False, a full lane raises :class:`BufferFullError` (on-policy rollouts).
    :param n_step: length of the return windows built by :meth:`sample`.
    :param gamma: discount used for the n-step returns.
    """

    def __init__(
        self,
        num_lanes: int,
        lane_capacity: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: np.dtype | type,
        *,
        circular: bool = True,
        n_step: int = 1,
        gamma: float = 0.99,
        seed: int = 0,
    ) -> None:
        if num_lanes <= 0 or lane_capacity <= 0:
            raise ValueError("a buffer needs at least one lane and one slot per lane")
        self.num_lanes, self.lane_capacity = num_lanes, lane_capacity
        self.circular, self.n_step, self.gamma = circular, n_step, gamma
        shape = (num_lanes, lane_capacity)
        self.obs = np.zeros(shape + tuple(obs_shape), dtype=np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.act = np.zeros(shape + tuple(act_shape), dtype=act_dtype)
        self.rew = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.truncated = np.zeros(shape, dtype=bool)
        #: next write position and number of stored transitions, per lane
        self.ptr = np.zeros(num_lanes, dtype=np.int64)
        self.size = np.zeros(num_lanes, dtype=np.int64)
        self._all_lanes = np.arange(num_lanes)
        self._flat = [a.reshape(num_lanes * lane_capacity, *a.shape[2:]) for a in (
            self.obs, self.act, self.rew, self.next_obs, self.terminated, self.truncated)]
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return int(self.size.sum())

    def clear(self) -> None:
        self.ptr[:] = 0
        self.size[:] = 0

    def add(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> None:
        """Append one step of every env (arrays with a leading ``num_lanes`` axis);
        lanes whose ``valid`` entry is False are left untouched."""
        if valid is None:
            lanes = self._all_lanes
        else:
            lanes = np.flatnonzero(valid)
            obs, act, rew = obs[lanes], act[lanes], rew[lanes]
            next_obs, terminated, truncated = next_obs[lanes], terminated[lanes], truncated[lanes]
        pos = self.ptr[lanes]
        if not self.circular and (self.size[lanes] >= self.lane_capacity).any():
            raise BufferFullError(
                f"rollout storage is full ({self.lane_capacity} transitions per env)"
            )
        # one flat index into (lanes * capacity) views: cheaper than 2-D fancy indexing
        flat = lanes * self.lane_capacity + pos
        for view, value in zip(self._flat, (obs, act, rew, next_obs, terminated, truncated),
                               strict=True):
            view[flat] = value
        pos += 1
        if self.circular:
            pos[pos == self.lane_capacity] = 0
        self.ptr[lanes] = pos
        self.size[lanes] = np.minimum(self.size[lanes] + 1, self.lane_capacity)

    _ARRAYS = ("obs", "next_obs", "act", "rew", "terminated", "truncated", "ptr", "size")

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions as tensors sharing memory with the arrays (saving them
        makes no copy and pickles no Python object graph), plus the sampling RNG."""
        return {
            **{name: torch.from_numpy(getattr(self, name)) for name in self._ARRAYS},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._ARRAYS:
            target = getattr(self, name)
            source = state[name].numpy()
            if source.shape != target.shape:
                raise ValueError(f"buffer {name}: stored shape {source.shape}, "
                                 f"expected {target.shape}")
            target[...] = source
        self.rng.bit_generator.state = state["rng"]

    def _oldest(self) -> np.ndarray:
        """Position of the oldest stored transition of each lane."""
        return np.where(self.size == self.lane_capacity, self.ptr, 0)

    def sample(self, batch_size: int) -> Batch:
        """Uniform sample over all stored transitions, with n-step returns."""
        total = len(self)
        if total == 0:
            raise ValueError("cannot sample from an empty buffer")
        ends = np.cumsum(self.size)
        flat = self.rng.integers(total, size=batch_size)
        lanes = np.searchsorted(ends, flat, side="right")
        offsets = flat - (ends - self.size)[lanes]
        oldest = self._oldest()[lanes]
        positions = (oldest + offsets) % self.lane_capacity
        if self.n_step == 1:
            ret, disc = self.rew[lanes, positions], np.where(
                self.terminated[lanes, positions], 0.0, self.gamma
            ).astype(np.float32)
            boot = positions
        else:
            window = offsets[:, None] + np.arange(self.n_step)
            in_lane = window < self.size[lanes][:, None]
            wpos = (oldest[:, None] + window) % self.lane_capacity
            lane_col = lanes[:, None]
            ret, last, disc = nstep_returns(
                self.rew[lane_col, wpos],
                self.terminated[lane_col, wpos],
                self.terminated[lane_col, wpos] | self.truncated[lane_col, wpos],
                in_lane,
                self.gamma,
            )
            boot = wpos[np.arange(batch_size), last]
        return Batch(
            obs=self.obs[lanes, positions],
            act=self.act[lanes, positions],
            rew=ret,
            next_obs=self.next_obs[lanes, boot],
            discount=disc,
            lanes=lanes,
            positions=positions,
        )

    def rollout(self) -> Rollout:
        """All transitions of an append-only buffer, lanes x time."""
        if self.circular:
            raise RuntimeError("rollout() reads append-only storage; this buffer is circular")
        t = int(self.size.max(initial=0))
        valid = np.arange(t)[None, :] < self.size[:, None]
        return Rollout(
            obs=self.obs[:, :t],
            act=self.act[:, :t],
            rew=self.rew[:, :t],
            next_obs=self.next_obs[:, :t],
            terminated=self.terminated[:, :t],
            truncated=self.truncated[:, :t],
            valid=valid,
        )
