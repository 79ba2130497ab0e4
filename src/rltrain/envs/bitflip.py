"""Bit flipping: the goal-conditioned test env of hindsight experience replay.

Andrychowicz et al. 2017 ("Hindsight Experience Replay", arXiv:1707.01495, section 3.1 and
figure 1): the state is ``n`` bits, the goal another ``n`` bits, an action flips one bit, and
the reward is -1 at every step that does not end at the goal (0 at the one that does). With
``n`` beyond about 13, a random walk almost never meets its goal, so an agent learning from
its rewards alone sees no success to learn from; relabelling the goals it did reach is what
solves it. The env is written the way goal-conditioned envs of gymnasium-robotics are, so that
the same code path serves both: a Dict observation ``{observation, achieved_goal,
desired_goal}``, ``info["is_success"]``, and a vectorised :meth:`BitFlipEnv.compute_reward`.

An episode terminates at the goal and is truncated after ``n`` steps (``conf/env/bitflip.yaml``
sets the time limit to ``n``): every goal is reachable within ``n`` flips. Start and goal are
drawn uniformly, never equal, from the env's own seeded generator.

Registered as ``rltrain/BitFlip-v0`` when this module is imported (``env.imports`` in
``conf/env/bitflip.yaml``). Imports gymnasium and numpy only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "rltrain/BitFlip-v0"


class BitFlipEnv(gym.Env[dict[str, Any], np.int64]):
    """``n_bits`` bits to turn into the goal's, one flip per step.

    :param n_bits: the state's and the goal's length (the paper's figure goes to 50; 15 is
        where plain DQN stops finding the goal at all).
    :raises ValueError: ``n_bits < 1``.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, n_bits: int = 15, render_mode: str | None = None) -> None:
        if isinstance(n_bits, bool) or not isinstance(n_bits, int) or n_bits < 1:
            raise ValueError(f"BitFlip needs n_bits, an integer >= 1, got {n_bits!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"BitFlip renders as text only (render_mode='ansi'), got "
                             f"{render_mode!r}")
        self.n_bits, self.render_mode = n_bits, render_mode
        bits = gym.spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space: gym.spaces.Dict = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = gym.spaces.Discrete(n_bits)
        self._state = np.zeros(n_bits, np.float32)
        self._goal = np.ones(n_bits, np.float32)

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray,
                       info: Any) -> np.ndarray:
        """0 where the achieved goal is the desired one, else -1: for one goal, or a batch of
        them along the leading axes (what relabelling calls, with goals it chose)."""
        achieved, desired = np.asarray(achieved_goal), np.asarray(desired_goal)
        if achieved.shape != desired.shape or achieved.shape[-1:] != (self.n_bits,):
            raise ValueError(f"compute_reward takes goals of {self.n_bits} bits, both of one "
                             f"shape; got {achieved.shape} and {desired.shape}")
        return -(achieved != desired).any(axis=-1).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        if np.array_equal(self._state, self._goal):  # never start at the goal: flip one bit
            flip = int(self.np_random.integers(self.n_bits))
            self._goal[flip] = 1.0 - self._goal[flip]
        return self._observation(), {"is_success": False}

    def step(self, action: np.int64 | int
             ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"BitFlip's actions are 0..{self.n_bits - 1}, got {action!r}")
        self._state[int(action)] = 1.0 - self._state[int(action)]
        reward = float(self.compute_reward(self._state, self._goal, None))
        success = reward == 0.0
        return self._observation(), reward, success, False, {"is_success": success}

    def render(self) -> str:
        """The state and the goal, as bits."""
        def bits(x: np.ndarray) -> str:
            return "".join("1" if b else "0" for b in x)
        return f"state {bits(self._state)}  goal {bits(self._goal)}"

    def _observation(self) -> dict[str, np.ndarray]:
        return {"observation": self._state.copy(), "achieved_goal": self._state.copy(),
                "desired_goal": self._goal.copy()}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:BitFlipEnv", max_episode_steps=15)
