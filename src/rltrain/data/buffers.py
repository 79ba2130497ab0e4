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
        self._lane_base = np.arange(num_lanes) * lane_capacity
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
        self.extend(*(np.asarray(a)[None] for a in (obs, act, rew, next_obs, terminated,
                                                     truncated)),
                    None if valid is None else np.asarray(valid)[None])

    def extend(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> None:
        """Append ``T`` consecutive steps of every env at once (arrays with leading axes
        ``(T, num_lanes)``): the same as ``T`` calls of :meth:`add`, in a few array
        operations. A step's lanes whose ``valid`` entry is False are left untouched.

        :raises BufferFullError: if a lane of an append-only buffer would overflow; then
            nothing is written.
        """
        steps = len(rew)
        if self.circular and steps > self.lane_capacity:
            # within lane_capacity steps no lane wraps onto a slot written in the same block
            for t in range(0, steps, self.lane_capacity):
                part = slice(t, t + self.lane_capacity)
                self.extend(obs[part], act[part], rew[part], next_obs[part], terminated[part],
                            truncated[part], None if valid is None else valid[part])
            return
        if valid is None:
            counts = np.arange(1, steps + 1)[:, None]
            added = np.full(self.num_lanes, steps)
        else:
            counts = valid.cumsum(0)
            added = counts[-1]
        if not self.circular and (self.ptr + added > self.lane_capacity).any():
            raise BufferFullError(
                f"rollout storage is full ({self.lane_capacity} transitions per env)"
            )
        pos = self.ptr + counts - 1  # (T, lanes): the slot of each step of each lane
        if self.circular:
            pos %= self.lane_capacity
        # one flat index into (lanes * capacity) views: cheaper than 2-D fancy indexing
        flat = self._lane_base + pos
        values = (obs, act, rew, next_obs, terminated, truncated)
        if valid is not None:
            flat, values = flat[valid], tuple(v[valid] for v in values)
        else:
            flat, values = flat.reshape(-1), tuple(
                v.reshape(-1, *v.shape[2:]) for v in values)
        for view, value in zip(self._flat, values, strict=True):
            view[flat] = value
        self.ptr += added
        if self.circular:
            self.ptr %= self.lane_capacity
        np.minimum(self.size + added, self.lane_capacity, out=self.size)

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
