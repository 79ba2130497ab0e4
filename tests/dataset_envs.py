"""Tiny image and Dict envs for the offline-dataset tests, registered at import (the CLI finds
them as ``dataset_envs:ID``, tests/ being on the subprocess's PYTHONPATH; see conftest.cli_env).

* ``rltrain-test/Stripes-v0``: a uint8 ``(10, 10, 3)`` HWC image, black but for one lit
  vertical stripe (columns ``3k..3k+2`` of channel ``k % 3``) at a random ``k`` in 0..2.
  Actions Discrete(3): naming the lit stripe earns 1, anything else 0; the third miss ends
  the episode (terminated), and a time limit truncates it after 8 steps.
* ``rltrain-test/Beacon-v0``: a Dict ``{"image": uint8 (6, 6, 1), "pos": Box float32 (2,) in
  [-1, 1], "flag": Discrete(3)}``, keys in that (unsorted) order. ``flag`` says which action
  earns 1 (the others 0); ``image`` lights the pixel at ``pos`` mapped to the grid; 6 steps,
  then a time limit truncates.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

STRIPES_ID = "rltrain-test/Stripes-v0"
BEACON_ID = "rltrain-test/Beacon-v0"
STRIPES_T = 8
BEACON_T = 6


class StripesEnv(gym.Env):
    """An image env whose reward depends on the image (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (10, 10, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.lit = 0
        self.misses = 0

    def _obs(self) -> np.ndarray:
        self.lit = int(self.np_random.integers(3))
        image = np.zeros((10, 10, 3), np.uint8)
        image[:, 3 * self.lit : 3 * self.lit + 3, self.lit] = 200
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.misses = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        right = int(action) == self.lit
        self.misses += not right
        return self._obs(), float(right), self.misses == 3, False, {}


class BeaconEnv(gym.Env):
    """A Dict env: an image key, a float key and a Discrete key (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        # a list of pairs keeps this order (a plain dict would be sorted by gymnasium)
        self.observation_space = gym.spaces.Dict([
            ("image", gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)),
            ("pos", gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
            ("flag", gym.spaces.Discrete(3)),
        ])
        self.action_space = gym.spaces.Discrete(3)
        self.flag = 0

    def _obs(self) -> dict[str, Any]:
        pos = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self.flag = int(self.np_random.integers(3))
        image = np.zeros((6, 6, 1), np.uint8)
        row, col = np.minimum(((pos + 1) * 3).astype(int), 5)
        image[row, col, 0] = 255
        return {"image": image, "pos": pos, "flag": np.int64(self.flag)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self.flag)
        return self._obs(), reward, False, False, {}


for _id, _cls, _t in ((STRIPES_ID, "StripesEnv", STRIPES_T), (BEACON_ID, "BeaconEnv", BEACON_T)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=f"dataset_envs:{_cls}", max_episode_steps=_t)


#: Stripes in grey seen through gymnasium's frame stack (4 frames of 10 x 10, stack axis
#: first), as Atari's preprocessing gives them: what datasets store once per frame
STACKED_ID = "rltrain-test/StackedStripes-v0"
STACK = 4


def stacked_stripes() -> gym.Env:
    grey = gym.wrappers.GrayscaleObservation(StripesEnv())
    return gym.wrappers.FrameStackObservation(
        gym.wrappers.TimeLimit(grey, max_episode_steps=STRIPES_T), STACK)


if STACKED_ID not in gym.registry:
    gym.register(STACKED_ID, entry_point="dataset_envs:stacked_stripes")
