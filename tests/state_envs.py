"""Tiny deterministic gymnasium envs whose state lives in odd places, registered at import.

They exercise :mod:`rltrain.envs.state` (and the CLI's resume, as
``env.id=state_envs:rltrain-test/DictState-v0``). All three share the same dynamics: a noisy
walk ``pos`` pushed left or right by a Discrete(2) action, the noise drawn from
``self.np_random`` so that a resume that misses any state (or the RNG) diverges. An episode
terminates when ``|pos| > 1`` (every few dozen steps); TimeLimit truncates it after
:data:`MAX_STEPS`. The observation is float32 ``[pos, vel, t / MAX_STEPS]``.

* ``rltrain-test/DictState-v0``: all episode state in one dict attribute, ``self.state``,
  holding numpy scalars of two dtypes and a tuple (walkers of ``vars()`` that skip dicts miss it).
* ``rltrain-test/OpaqueState-v0``: the state in a ctypes array, ``self.sim``: cannot be captured.
* ``rltrain-test/ProtocolState-v0``: the state in a ctypes array too, but the env offers
  ``state_dict()``/``load_state_dict()`` with plain data, so it is captured exactly.
"""

from __future__ import annotations

import ctypes
from typing import Any

import gymnasium as gym
import numpy as np

DICT_STATE_ID = "rltrain-test/DictState-v0"
OPAQUE_STATE_ID = "rltrain-test/OpaqueState-v0"
PROTOCOL_STATE_ID = "rltrain-test/ProtocolState-v0"
#: TimeLimit of all three
MAX_STEPS = 200


def _step(t: int, pos: float, vel: np.float32, action: int, rng: np.random.Generator
          ) -> tuple[float, np.float32, float, bool]:
    """One step of the shared dynamics: (pos, vel, reward, terminated)."""
    push = np.float32(0.25) if int(action) == 1 else np.float32(-0.25)
    vel = np.float32(np.float32(0.5) * vel + push + np.float32(rng.normal(0.0, 0.2)))
    pos = float(pos + 0.2 * float(vel) + rng.normal(0.0, 0.1))
    reward = 1.0 - abs(pos) + (0.1 * t / MAX_STEPS if int(action) == (pos < 0) else 0.0)
    return pos, vel, reward, abs(pos) > 1.0


class _StateEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)


class DictStateEnv(_StateEnv):
    """State in ``self.state``: ``t`` (int), ``pos`` (np.float64), ``vel`` (np.float32),
    ``history`` (tuple of the last two actions)."""

    def __init__(self) -> None:
        super().__init__()
        self.state: dict[str, Any] = {}

    def _obs(self) -> np.ndarray:
        s = self.state
        return np.array([s["pos"], s["vel"], s["t"] / MAX_STEPS], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = {"t": 0, "pos": np.float64(self.np_random.uniform(-0.5, 0.5)),
                      "vel": np.float32(0.0), "history": (0, 0)}
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        s = self.state
        pos, vel, reward, terminated = _step(s["t"], s["pos"], s["vel"], action, self.np_random)
        s.update(t=s["t"] + 1, pos=np.float64(pos), vel=vel,
                 history=(s["history"][1], int(action)))
        return self._obs(), reward + 0.05 * sum(s["history"]), terminated, False, {}


class OpaqueStateEnv(_StateEnv):
    """State in ``self.sim``, a ctypes ``double[4]``: ``[t, pos, vel, unused]``."""

    def __init__(self) -> None:
        super().__init__()
        self.sim = (ctypes.c_double * 4)()

    def _obs(self) -> np.ndarray:
        return np.array([self.sim[1], self.sim[2], self.sim[0] / MAX_STEPS], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.sim[:] = [0.0, self.np_random.uniform(-0.5, 0.5), 0.0, 0.0]
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        t = int(self.sim[0])
        pos, vel, reward, terminated = _step(t, self.sim[1], np.float32(self.sim[2]), action,
                                             self.np_random)
        self.sim[:3] = [t + 1, pos, float(vel)]
        return self._obs(), reward, terminated, False, {}


class ProtocolStateEnv(OpaqueStateEnv):
    """OpaqueState that saves and loads itself: ctypes values and its RNG as plain data."""

    def state_dict(self) -> dict[str, Any]:
        return {"sim": list(self.sim), "rng": self.np_random.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sim[:] = [float(x) for x in state["sim"]]
        self.np_random.bit_generator.state = state["rng"]


def _register() -> None:
    # guarded: importing this module twice (e.g. as ``state_envs`` and ``tests.state_envs``)
    # must neither fail nor re-register
    for env_id, entry_point in ((DICT_STATE_ID, DictStateEnv), (OPAQUE_STATE_ID, OpaqueStateEnv),
                                (PROTOCOL_STATE_ID, ProtocolStateEnv)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=MAX_STEPS)


_register()
