"""Types every layer shares: what the networks need from the env, what a collector calls, where
training stands. Ground floor: imports no other rltrain module.

- :class:`SpaceInfo` is computed from the env's spaces by the composition root
  (:func:`rltrain.envs.space_info`), never written in YAML; algorithms, encoders and the
  deployable policy are built from it.
- :data:`Policy` is what a collector steps envs with: observations in, actions out.
- :class:`Progress` is what schedules read (learning rate, exploration, target updates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the episode limit of an env that registers none and gets no env.max_episode_steps
DEFAULT_MAX_EPISODE_STEPS = 10_000

#: observations (num_envs, *obs_shape) in, actions (num_envs, *action_shape) out
Policy = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class SpaceInfo:
    """What the networks need from the env: computed, never written in YAML."""

    obs_shape: tuple[int, ...]
    #: number of discrete actions, or None for a Box action space
    num_actions: int | None
    #: shape of one action (() for discrete)
    action_shape: tuple[int, ...]
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    reward_threshold: float | None
    env_id: str
    #: the longest an episode can run (the time limit every env of the run has)
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS
    #: the env's single observation space (a gymnasium space), which the observation encoder
    #: is chosen from; None: a float Box of ``obs_shape``
    obs_space: Any = None
    #: the env's single action space (a gymnasium space; a dataset is checked against it)
    action_space: Any = None

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def action_dim(self) -> int:
        return self.num_actions if self.num_actions is not None else int(np.prod(self.action_shape))


@dataclass(frozen=True)
class Progress:
    """Where training stands, for schedules (learning rate, exploration, target updates)."""

    env_step: int
    gradient_step: int
    #: the fraction of the planned steps done, in [0, 1] (env steps online, gradient steps
    #: offline)
    fraction: float
