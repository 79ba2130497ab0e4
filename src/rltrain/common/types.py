"""Types every layer shares: what the networks need from the env, what a collector calls, where
training stands. Ground floor: imports no other rltrain module.

- :class:`SpaceInfo` is computed from the env's spaces by the composition root
  (:func:`rltrain.envs.vector.space_info`), never written in YAML; algorithms, encoders and the
  deployable policy are built from it.
- :data:`Policy` is what a collector steps envs with: observations in, actions out (or
  :class:`Acted`: the actions with the values the algorithm stores beside them).
- :class:`Progress` is what schedules read (learning rate, exploration, target updates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

#: the episode limit of an env that registers none and gets no env.max_episode_steps
DEFAULT_MAX_EPISODE_STEPS = 10_000

class Acted(NamedTuple):
    """What a policy returns when its algorithm stores values of the acting time beside each
    transition (``AlgoSpec.stored``: a behaviour log-prob, a value estimate): the actions,
    and those values by field name, ``(num_envs, *shape)`` each."""

    actions: np.ndarray
    fields: dict[str, np.ndarray]


#: observations (num_envs, *obs_shape) in, actions (num_envs, *action_shape) out, or
#: :class:`Acted` with the values the buffer stores beside them
Policy = Callable[[np.ndarray], "np.ndarray | Acted"]

#: the kinds of action space an algorithm may accept (its registry entry lists them):
#: Discrete; MultiDiscrete or MultiBinary (a vector of independent discrete choices); Box
DISCRETE, MULTIDISCRETE, CONTINUOUS = "discrete", "multidiscrete", "continuous"


@dataclass(frozen=True)
class SpaceInfo:
    """What the networks need from the env: computed, never written in YAML.

    Integer actions (Discrete, MultiDiscrete, MultiBinary) are what the networks index: 0 to
    n - 1 in each entry. Where the env's values start elsewhere (a ``start`` of Discrete or
    MultiDiscrete), :attr:`action_start` is added on the way to the env
    (:class:`rltrain.spaces.actions.ShiftActions`, the deployable policy's head)."""

    obs_shape: tuple[int, ...]
    #: number of actions of a Discrete space, or None (MultiDiscrete, MultiBinary, Box)
    num_actions: int | None
    #: shape of one action (() for Discrete)
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
    #: MultiDiscrete and MultiBinary: the number of values of each action entry, the entries
    #: in C order (MultiBinary: all 2); None for Discrete and Box
    nvec: tuple[int, ...] | None = None
    #: integer actions: the env's value of each entry's action 0 (shape ``action_shape``,
    #: int64); None when every entry starts at 0, as nearly every env's do
    action_start: np.ndarray | None = None

    @property
    def discrete(self) -> bool:
        """Integer actions (Discrete, MultiDiscrete, MultiBinary): stored as int64 indices,
        chosen by an argmax, never scaled."""
        return self.num_actions is not None or self.nvec is not None

    @property
    def action_kind(self) -> str:
        """:data:`DISCRETE`, :data:`MULTIDISCRETE` or :data:`CONTINUOUS`: what an algorithm's
        registry entry must accept."""
        if self.nvec is not None:
            return MULTIDISCRETE
        return DISCRETE if self.num_actions is not None else CONTINUOUS

    @property
    def actions_text(self) -> str:
        """The action space in a few words, for logs and messages."""
        if self.num_actions is not None:
            return f"Discrete({self.num_actions})"
        if self.nvec is not None:
            return (" ".join(str(self.action_space).split()) if self.action_space is not None
                    else f"MultiDiscrete({list(self.nvec)})")
        return f"Box{self.action_shape}"

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def action_dim(self) -> int:
        """Discrete: the number of actions; MultiDiscrete, MultiBinary: the number of logits of
        a policy over them (the sum of :attr:`nvec`); Box: the number of action entries."""
        if self.num_actions is not None:
            return self.num_actions
        if self.nvec is not None:
            return sum(self.nvec)
        return int(np.prod(self.action_shape))


@dataclass(frozen=True)
class Progress:
    """Where training stands, for schedules (learning rate, exploration, target updates)."""

    env_step: int
    gradient_step: int
    #: the fraction of the planned steps done, in [0, 1] (env steps online, gradient steps
    #: offline)
    fraction: float
