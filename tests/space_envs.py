"""An env whose spaces are whatever its kwargs say: for the edges of what rltrain takes
(spaces with no values, images too small for a convolution, spaces too large for memory).

``rltrain-test/Spaces-v0`` (``env=gym env.id=rltrain-test/Spaces-v0 env.kwargs.obs=[2,2,3]
env.kwargs.dtype=uint8 env.kwargs.action=discrete:3``):

* ``obs``: the observation's shape; ``dtype``: ``float32`` (values in [-1, 1]) or ``uint8``
  (an image when it has three axes, values in [0, ``high``]);
* ``action``: ``discrete:N``, ``box:D1,D2,...`` (bounds [-1, 1]) or ``multidiscrete:N1,N2``;
* ``crash_at``: ``step`` raises RuntimeError at this step of the env's life (0: never);
* ``stall``: a file's path: the constructor first writes it, then spends tens of seconds in
  one C call that answers no signal (a matrix power, as a weight initialisation of billions
  of weights would), then writes ``<file>.done``.

Observations are zeros but for one random entry; the reward is 1 when the first action
entry is 0 (or below 0, continuous), else 0. Episodes of 20 steps. Nothing is allocated but
one observation at a time, so a space larger than memory costs nothing until rltrain sizes
what it would build for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

SPACES_ID = "rltrain-test/Spaces-v0"
STEPS = 20


def action_space(text: str) -> gym.Space:
    kind, _, sizes = text.partition(":")
    numbers = [int(n) for n in sizes.split(",") if n.strip()] if sizes else []
    if kind == "discrete":
        return gym.spaces.Discrete(numbers[0])
    if kind == "box":
        return gym.spaces.Box(-1.0, 1.0, tuple(numbers), np.float32)
    if kind == "multidiscrete":
        return gym.spaces.MultiDiscrete(numbers)
    raise ValueError(f"action={text!r}: discrete:N, box:D1,... or multidiscrete:N1,...")


def stall_in_c(marker: Path) -> None:
    """Tens of seconds in one C call (see the module's docstring), between two marker files."""
    import torch

    marker.write_text("stalling")
    torch.set_num_threads(1)
    torch.linalg.matrix_power(torch.rand(3000, 3000), 2**62)  # 62 squarings: ~1 min
    marker.with_name(marker.name + ".done").write_text("done")


class SpacesEnv(gym.Env):
    def __init__(self, obs: list[int] | tuple[int, ...] = (4,), dtype: str = "float32",
                 high: int = 255, action: str = "discrete:2", stall: str = "",
                 crash_at: int = 0) -> None:
        if stall:
            stall_in_c(Path(stall))
        self.crash_at, self.lived = crash_at, 0
        shape = tuple(int(n) for n in obs)
        if dtype == "uint8":
            self.observation_space = gym.spaces.Box(0, high, shape, np.uint8)
        else:
            self.observation_space = gym.spaces.Box(-1.0, 1.0, shape, np.float32)
        self.action_space = action_space(action)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        if obs.size:
            obs.flat[int(self.np_random.integers(obs.size))] = self.observation_space.high.flat[0]
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        self.lived += 1
        if self.lived == self.crash_at:
            raise RuntimeError(f"the simulator diverged at step {self.lived}")
        first = np.asarray(action, dtype=np.float64).reshape(-1)
        hit = first.size > 0 and first[0] <= 0
        return self._obs(), float(hit), False, False, {}


if SPACES_ID not in gym.registry:
    gym.register(id=SPACES_ID, entry_point=SpacesEnv, max_episode_steps=STEPS)
