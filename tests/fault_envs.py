"""Envs and a wrapper that a user's own package might hold, registered at import; the CLI
tests name them as ``env.id=fault_envs:rltrain-test/...`` or ``env.imports=[fault_envs]``
(with this directory on PYTHONPATH), exactly as a user names their own package.

* ``rltrain-test/NaNReward-v0``: reward 1 per step until its ``nan_at``-th step (counted
  over the env's life), which returns NaN; time limit 50.
* ``rltrain-test/Endless-v0``: never terminates and registers no time limit.
* ``rltrain-test/Image-v0``: uint8 image observations (32, 32, 3).
* ``rltrain-test/DictObs-v0``: Dict observations (``pos`` and ``vel``); time limit 20.
* ``rltrain-test/Broken-v0``: its constructor raises RuntimeError.
* :class:`ScaleReward`: a user's own wrapper with an argument.
* Importing this module registers an ``atexit`` handler that writes the file named by
  ``RLTRAIN_TEST_ATEXIT_FILE`` (if set): a user's clean-up that must run at exit.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

NAN_ID = "rltrain-test/NaNReward-v0"
ENDLESS_ID = "rltrain-test/Endless-v0"
IMAGE_ID = "rltrain-test/Image-v0"
DICT_ID = "rltrain-test/DictObs-v0"
BROKEN_ID = "rltrain-test/Broken-v0"


class _Base(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> Any:
        return np.array([self.t % 7, 1.0], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 1.0, False, False, {}


class NaNRewardEnv(_Base):
    def __init__(self, nan_at: int = 300) -> None:
        super().__init__()
        self.nan_at, self.lived = nan_at, 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        self.lived += 1
        return obs, float("nan") if self.lived == self.nan_at else reward, terminated, \
            truncated, info


class ImageEnv(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 255, shape=(32, 32, 3), dtype=np.uint8)

    def _obs(self) -> Any:
        return np.zeros((32, 32, 3), dtype=np.uint8)


class DictObsEnv(_Base):
    def __init__(self) -> None:
        super().__init__()
        box = gym.spaces.Box(-10, 10, shape=(2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict({"pos": box, "vel": box})

    def _obs(self) -> Any:
        return {"pos": np.full(2, self.t % 3, np.float32), "vel": np.ones(2, np.float32)}


class BrokenEnv(_Base):
    """Its constructor raises, as a user's env with a bug might."""

    def __init__(self) -> None:
        raise RuntimeError("the simulator failed to start")


class ScaleReward(gym.RewardWrapper):
    """Multiplies every reward by ``scale``."""

    def __init__(self, env: gym.Env, scale: float = 1.0) -> None:
        super().__init__(env)
        self.scale = scale

    def reward(self, reward: Any) -> Any:
        return self.scale * reward


def _register() -> None:
    if NAN_ID not in gym.registry:
        gym.register(id=NAN_ID, entry_point=NaNRewardEnv, max_episode_steps=50)
        gym.register(id=ENDLESS_ID, entry_point=_Base)
        gym.register(id=IMAGE_ID, entry_point=ImageEnv, max_episode_steps=50)
        gym.register(id=DICT_ID, entry_point=DictObsEnv, max_episode_steps=20)
        gym.register(id=BROKEN_ID, entry_point=BrokenEnv, max_episode_steps=20)


def touch_marker(path: str) -> None:
    """Not an env: proof that it was called (a Minari env_spec's entry point in the trust
    tests), by the file it creates."""
    Path(path).touch()


def _write_marker() -> None:
    path = os.environ.get("RLTRAIN_TEST_ATEXIT_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"atexit ran in pid {os.getpid()}\n")


_register()
atexit.register(_write_marker)
