"""Action masks: the actions an env allows in a state, applied inside the networks.

Two conventions are in use, and rltrain takes both: a Dict observation with an
``action_mask`` key (PettingZoo's and Tianshou's ``obs.mask`` style), and
``info["action_mask"]`` (gymnasium's and TorchRL's ``ActionMask`` style), which
:class:`InfoActionMask` moves into the observation. Either way the mask then travels with the
observation: into the buffers (so the target's max over next actions sees the next state's
mask), the rollout, the deployable policy and the ONNX graph (an input named ``action_mask``).

:class:`ActionMask` is what a network applies to its per-action outputs (logits, Q values):
a disallowed action's output becomes the lowest finite float, so it is never the argmax and
softmax gives it probability 0. Finite rather than -inf so that a TD target multiplying it
by a zero discount stays 0, not NaN. A state that allows no action (a terminal state, in many
envs) is left unmasked: there is nothing to choose there, and a row of only masked values
would otherwise be a row of equal minima.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrain.spaces.observations import DictLayout

#: the Dict observation key that holds the mask (1: allowed)
KEY = "action_mask"


class ActionMaskError(ValueError):
    """A mask rltrain cannot apply, with what would work."""


def is_masked(obs_space: gym.Space | None) -> bool:
    """The observations carry an ``action_mask`` key."""
    return isinstance(obs_space, gym.spaces.Dict) and KEY in obs_space.spaces


def mask_space_problem(obs_space: gym.Space | None, num_actions: int | None) -> str | None:
    """Why the observation's ``action_mask`` key cannot mask these actions, or None (also
    when there is no such key)."""
    if not isinstance(obs_space, gym.spaces.Dict) or KEY not in obs_space.spaces:
        return None
    space = obs_space[KEY]
    if num_actions is None:
        return (f"the observation has an {KEY!r} key, and masks apply to Discrete actions "
                "only; drop the key (gymnasium.wrappers.FilterObservation) or use a Discrete "
                "action space")
    shape = tuple(space.shape or ())
    binary = isinstance(space, gym.spaces.MultiBinary) or (
        isinstance(space, gym.spaces.Box) and np.all(space.low == 0) and np.all(space.high == 1))
    if not binary or shape != (num_actions,):
        return (f"observation key {KEY!r} is {space}; a mask is MultiBinary({num_actions}) "
                f"or Box(0, 1, ({num_actions},)), one entry per action")
    return None


class ActionMask(nn.Module):
    """Reads the mask from a batch of observations (packed Dict rows, as buffers hold them,
    or one tensor per key, as the deployable policy takes them) and applies it."""

    def __init__(self, layout: DictLayout) -> None:
        super().__init__()
        self.layout = layout

    def allowed(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """``(batch, num_actions)`` bool: True where the action is allowed."""
        mask = obs[KEY] if isinstance(obs, dict) else self.layout.unpack_torch(obs)[KEY]
        return mask.reshape(mask.shape[0], -1) > 0

    def forward(self, out: torch.Tensor, obs: torch.Tensor | dict[str, torch.Tensor]
                ) -> torch.Tensor:
        """``out`` (batch, num_actions, ...) with each disallowed action's entries at the
        lowest finite value, in rows that allow some action."""
        allowed = self.allowed(obs)
        blocked = ~allowed & allowed.any(-1, keepdim=True)
        blocked = blocked.reshape(*blocked.shape, *([1] * (out.dim() - 2)))
        return out.masked_fill(blocked, torch.finfo(out.dtype).min)

    def allowed_numpy(self, obs: np.ndarray) -> np.ndarray:
        """The mask of packed rows on the host, ``(batch, num_actions)`` bool."""
        mask = self.layout.unpack(np.asarray(obs))[KEY]
        return mask.reshape(mask.shape[0], -1) > 0


def action_mask(obs_space: gym.Space | None, num_actions: int | None) -> ActionMask | None:
    """The mask of an observation space with an ``action_mask`` key, or None without one.

    :raises ActionMaskError: a mask that cannot mask these actions, saying why.
    """
    problem = mask_space_problem(obs_space, num_actions)
    if problem is not None:
        raise ActionMaskError(problem)
    if not isinstance(obs_space, gym.spaces.Dict) or KEY not in obs_space.spaces:
        return None
    return ActionMask(DictLayout.of(obs_space))


def random_allowed(rng: np.random.Generator, allowed: np.ndarray) -> np.ndarray:
    """One uniformly random allowed action per row of ``allowed`` (batch, num_actions); a
    row that allows none draws from all."""
    allowed = allowed | ~allowed.any(-1, keepdims=True)
    keys = rng.random(allowed.shape)
    return np.where(allowed, keys, -1.0).argmax(-1)


class InfoActionMask(gym.Wrapper):
    """Moves ``info["action_mask"]`` into the observation: a Dict of the env's observation
    (under ``observation``, or its own keys if it is a Dict) and ``action_mask``
    (MultiBinary(n)). For envs that give their mask in ``info`` (``env.wrappers`` entry
    ``rltrain.spaces.masking.InfoActionMask``). A reset or step whose info has no mask is an
    error, not a silent "everything allowed"."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ActionMaskError(f"InfoActionMask: masks apply to Discrete actions, and the "
                                  f"env's action space is {space}")
        self.n = int(space.n)
        inner = env.observation_space
        keys = dict(inner.spaces) if isinstance(inner, gym.spaces.Dict) else {
            "observation": inner}
        if KEY in keys:
            raise ActionMaskError(f"InfoActionMask: the observation already has an {KEY!r} "
                                  "key; drop the wrapper")
        self.observation_space = gym.spaces.Dict({**keys, KEY: gym.spaces.MultiBinary(self.n)})
        self._dict = isinstance(inner, gym.spaces.Dict)

    def _observe(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        mask = info.get(KEY)
        if mask is None:
            raise ActionMaskError(f"InfoActionMask: the env's info has no {KEY!r} (keys: "
                                  f"{', '.join(map(str, info)) or 'none'}); drop the wrapper")
        mask = np.asarray(mask, dtype=np.int8).reshape(-1)
        if mask.shape != (self.n,):
            raise ActionMaskError(f"info[{KEY!r}] has shape {mask.shape}, expected ({self.n},) "
                                  "(one entry per action)")
        parts = dict(obs) if self._dict else {"observation": obs}
        return {**parts, KEY: mask}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self._observe(obs, info), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool,
                                         dict[str, Any]]:
        obs, rew, terminated, truncated, info = self.env.step(action)
        return self._observe(obs, info), rew, terminated, truncated, info
