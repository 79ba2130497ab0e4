"""Tiny envs with image and Dict observations, for smoke runs of every algorithm on them.

* ``rltrain-test/Pixels-v0``: a uint8 (12, 12, 2) HWC image with one lit pixel in channel 0
  (channel 1 is a constant 255); reward 1 when the action says which half of the image the
  pixel is in (Discrete(2): 0 left, 1 right; with ``continuous=True``, a Box(-1, 1, (1,))
  action whose sign says it), else 0. 20 steps per episode.
* ``rltrain-test/PixelDict-v0``: ``{"image": uint8 (6, 6, 1) with one lit pixel, "pos": the
  pixel's position as float32 (2,), "flag": Discrete(3)}``; reward 1 when the action equals
  the flag (Discrete(3); continuous: a Box(-1, 1, (1,)) action within 0.5 of flag - 1).
  20 steps per episode.

Both are learnable in a few thousand steps, so they also show that a network sees its
observations.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

PIXELS_ID = "rltrain-test/Pixels-v0"
DICT_ID = "rltrain-test/PixelDict-v0"
STEPS = 20


class PixelsEnv(gym.Env):
    def __init__(self, continuous: bool = False) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (12, 12, 2), np.uint8)
        self.continuous = continuous
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous
                             else gym.spaces.Discrete(2))
        self.col = 0

    def _obs(self) -> np.ndarray:
        row, self.col = self.np_random.integers(12, size=2)
        obs = np.zeros((12, 12, 2), np.uint8)
        obs[row, self.col, 0] = 255
        obs[:, :, 1] = 255
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        right = self.col >= 6
        said = float(np.asarray(action).reshape(-1)[0]) > 0 if self.continuous else action == 1
        return self._obs(), float(said == right), False, False, {}


class DictObsEnv(gym.Env):
    def __init__(self, continuous: bool = False) -> None:
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8),
            "pos": gym.spaces.Box(0.0, 5.0, (2,), np.float32),
            "flag": gym.spaces.Discrete(3),
        })
        self.continuous = continuous
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous
                             else gym.spaces.Discrete(3))
        self.flag = 0

    def _obs(self) -> dict[str, Any]:
        pos = self.np_random.integers(6, size=2)
        image = np.zeros((6, 6, 1), np.uint8)
        image[pos[0], pos[1], 0] = 255
        self.flag = int(self.np_random.integers(3))
        return {"image": image, "pos": pos.astype(np.float32), "flag": self.flag}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        if self.continuous:
            hit = abs(float(np.asarray(action).reshape(-1)[0]) - (self.flag - 1)) < 0.5
        else:
            hit = int(action) == self.flag
        return self._obs(), float(hit), False, False, {}


def _register() -> None:
    for env_id, entry in ((PIXELS_ID, PixelsEnv), (DICT_ID, DictObsEnv)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry, max_episode_steps=STEPS)


_register()
