"""Tiny deterministic gymnasium envs for the tests, registered at import.

* ``rltrain-test/Counter-v0``: reward 1 every step, never terminates; gymnasium's
  ``TimeLimit`` truncates every episode after :data:`COUNTER_T` steps. The
  observation is ``[t, episode, ident]``: the step count within the episode, the
  number of earlier resets of this env instance, and the seed of the env's first
  seeded reset (``-1`` if never seeded). The final observation of an episode is
  therefore ``[COUNTER_T, k, ident]`` and the reset observation after it is
  ``[0, k + 1, ident]``.
* ``rltrain-test/Terminating-v0``: reward 1 every step, terminates (never
  truncates) after ``length`` steps, where ``length`` is chosen by the seed of a
  seeded reset: ``lengths[seed % len(lengths)]`` (``lengths[0]`` before any seed).
  A vector env seeds sub-env ``i`` with ``base + i``, so the sub-envs get different
  episode lengths; later (unseeded) autoresets keep them. The observation is
  ``[t, length]``.

Both have float32 Box observations and Discrete(2) actions, and ignore the action.

* ``rltrain-test/Unbounded-v0``: like Counter, but with a Box action space whose first
  dimension is unbounded (-inf, inf) and whose second is [-1, 1]; reward -|a| summed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

COUNTER_ID = "rltrain-test/Counter-v0"
TERMINATING_ID = "rltrain-test/Terminating-v0"
#: steps per episode of the Counter env (its TimeLimit)
COUNTER_T = 5
#: default episode lengths of the Terminating env, picked by seed
TERMINATING_LENGTHS = (1, 4, 9)


class CounterEnv(gym.Env):
    """Constant reward 1; the observation counts the steps (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.episode = -1
        self.ident = -1

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode, self.ident], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and self.ident < 0:
            self.ident = seed
        self.t = 0
        self.episode += 1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 1.0, False, False, {}


class TerminatingEnv(gym.Env):
    """Constant reward 1; terminates after a seed-dependent number of steps."""

    metadata = {"render_modes": []}

    def __init__(self, lengths: tuple[int, ...] = TERMINATING_LENGTHS) -> None:
        if not lengths or min(lengths) < 1:
            raise ValueError("episode lengths must be >= 1")
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.lengths = tuple(int(n) for n in lengths)
        self.length = self.lengths[0]
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.length], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.length = self.lengths[seed % len(self.lengths)]
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 1.0, self.t >= self.length, False, {}


def terminating_length(seed: int, lengths: tuple[int, ...] = TERMINATING_LENGTHS) -> int:
    """Episode length of a Terminating env reset with ``seed``."""
    return lengths[seed % len(lengths)]


UNBOUNDED_ID = "rltrain-test/Unbounded-v0"


class UnboundedEnv(gym.Env):
    """Continuous actions, one dimension unbounded."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(np.array([-np.inf, -1], np.float32),
                                           np.array([np.inf, 1], np.float32))
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: np.ndarray):
        self.t += 1
        obs = np.array([self.t, float(action[0])], np.float32)
        return obs, -float(np.abs(action).sum()), False, False, {}


def _register() -> None:
    # guarded: importing this module twice (e.g. as ``toy_envs`` and ``tests.toy_envs``)
    # must neither fail nor re-register
    if COUNTER_ID not in gym.registry:
        gym.register(id=COUNTER_ID, entry_point=CounterEnv, max_episode_steps=COUNTER_T)
    if TERMINATING_ID not in gym.registry:
        gym.register(id=TERMINATING_ID, entry_point=TerminatingEnv)
    if UNBOUNDED_ID not in gym.registry:
        gym.register(id=UNBOUNDED_ID, entry_point=UnboundedEnv, max_episode_steps=COUNTER_T)


_register()
