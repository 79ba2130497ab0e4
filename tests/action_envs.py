"""Tiny envs with MultiDiscrete and MultiBinary actions, for smoke runs and learning checks of
the algorithms that accept them.

* ``rltrain-test/MultiDiscrete-v0``: the observation shows two targets, one-hot (a value of 3,
  then one of 2: float32 (5,)); the action is ``MultiDiscrete([3, 2], start=[1, -1])``, so an
  entry's values are {1, 2, 3} and {-1, 0}: reward 0.5 for each entry equal to its target
  plus its start. An action outside the space (e.g. an index that was never shifted by the
  start) raises. 20 steps per episode.
* ``rltrain-test/MultiBinary-v0``: the observation is 4 random bits (float32 (4,)); the action
  is ``MultiBinary(4)``: reward 0.25 for each bit copied. 20 steps per episode.

Both are solved (return 20) by a policy that reads its observation, learnable in a few
thousand steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MULTIDISCRETE_ID = "rltrain-test/MultiDiscrete-v0"
MULTIBINARY_ID = "rltrain-test/MultiBinary-v0"
STEPS = 20
NVEC, START = (3, 2), (1, -1)


class MultiDiscreteEnv(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(NVEC),), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(NVEC, start=START)
        self.target = np.zeros(len(NVEC), np.int64)

    def _obs(self) -> np.ndarray:
        self.target = np.array([self.np_random.integers(n) for n in NVEC])
        obs = np.zeros(sum(NVEC), np.float32)
        obs[self.target + np.cumsum((0, *NVEC[:-1]))] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        action = np.asarray(action)
        if not self.action_space.contains(action.astype(self.action_space.dtype)) or \
                action.shape != (len(NVEC),):
            raise ValueError(f"action {action} is not in {self.action_space}")
        hits = action == self.target + np.asarray(START)
        return self._obs(), float(hits.mean()), False, False, {}


class MultiBinaryEnv(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.MultiBinary(4)
        self.bits = np.zeros(4, np.int64)

    def _obs(self) -> np.ndarray:
        self.bits = self.np_random.integers(2, size=4)
        return self.bits.astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        action = np.asarray(action)
        if action.shape != (4,) or not np.isin(action, (0, 1)).all():
            raise ValueError(f"action {action} is not in {self.action_space}")
        reward = float((action == self.bits).mean())
        return self._obs(), reward, False, False, {}


def _register() -> None:
    for env_id, entry in ((MULTIDISCRETE_ID, MultiDiscreteEnv), (MULTIBINARY_ID, MultiBinaryEnv)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry, max_episode_steps=STEPS)


_register()
