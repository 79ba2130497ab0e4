"""Envs whose allowed actions change every step, and which fail loudly on a disallowed one.

* ``rltrain-test/Masked-v0``: ``{"obs": float32 (5,), "action_mask": MultiBinary(5)}``; each
  step allows a random non-empty subset of the 5 actions (and says which through ``obs``,
  one-hot of the allowed set's lowest action); reward 1 for the lowest allowed action,
  else 0. 20 steps per episode.
* ``rltrain-test/InfoMasked-v0``: the same, but the observation is the float32 vector alone
  and the mask is in ``info["action_mask"]`` (the other convention; ``rltrain.spaces.masking.
  InfoActionMask`` moves it into the observation).

A disallowed action raises, so a run that completes never took one: the tests' proof that
masks reach every place an action is picked (training, random warm-up, testing, eval).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MASKED_ID = "rltrain-test/Masked-v0"
INFO_MASKED_ID = "rltrain-test/InfoMasked-v0"
N = 5
STEPS = 20


class DisallowedAction(RuntimeError):
    pass


class MaskedEnv(gym.Env):
    def __init__(self, in_info: bool = False) -> None:
        vector = gym.spaces.Box(0.0, 1.0, (N,), np.float32)
        self.in_info = in_info
        self.observation_space = vector if in_info else gym.spaces.Dict(
            {"obs": vector, "action_mask": gym.spaces.MultiBinary(N)})
        self.action_space = gym.spaces.Discrete(N)
        self.mask = np.ones(N, np.int8)

    def _observe(self) -> tuple[Any, dict[str, Any]]:
        self.mask = (self.np_random.random(N) < 0.4).astype(np.int8)
        self.mask[self.np_random.integers(N)] = 1  # never empty
        vec = np.zeros(N, np.float32)
        vec[int(np.argmax(self.mask))] = 1.0
        if self.in_info:
            return vec, {"action_mask": self.mask.copy()}
        return {"obs": vec, "action_mask": self.mask.copy()}, {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._observe()

    def step(self, action: Any):
        a = int(action)
        if not self.mask[a]:
            raise DisallowedAction(f"action {a} taken, mask {self.mask.tolist()}")
        reward = float(a == int(np.argmax(self.mask)))
        obs, info = self._observe()
        return obs, reward, False, False, info


def _register() -> None:
    for env_id, kwargs in ((MASKED_ID, {}), (INFO_MASKED_ID, {"in_info": True})):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=MaskedEnv, kwargs=kwargs,
                         max_episode_steps=STEPS)


_register()
