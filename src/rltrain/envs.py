"""Vector envs for training and testing, their seeds, and what the algorithm needs to know.

Gymnasium 1.x explicitly. The autoreset mode is chosen here, once: an env's own
vector implementation keeps whatever it supports (CartPole's is next-step), and
sync/async vector envs are built in same-step mode, which wastes no step on
resets. The collector handles both modes (see ``collector.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from rltrain.config import ConfigError, EnvConfig


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

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def action_dim(self) -> int:
        return self.num_actions if self.num_actions is not None else int(np.prod(self.action_shape))


def env_seeds(seed: int, num_train_envs: int) -> tuple[int, int]:
    """Base seeds for the train and test vector envs.

    A vector env seeds sub-env i with ``base + i``; the train envs take
    ``[seed, seed + m)`` and the test envs start at ``seed + m``, so the two
    ranges never overlap within a run.
    """
    return seed, seed + num_train_envs


def _spec(env_id: str) -> gym.envs.registration.EnvSpec:
    try:
        return gym.spec(env_id)
    except gym.error.Error as e:
        raise ConfigError(f"env.id={env_id!r} is not a registered gymnasium env: {e}") from None


def make_vector_env(cfg: EnvConfig, num_envs: int) -> VectorEnv:
    """Build a vector env of ``num_envs`` copies, as the config says."""
    spec = _spec(cfg.id)
    kwargs = dict(cfg.kwargs)
    mode = cfg.vectorization
    if mode == "auto":
        mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    vector_kwargs = {} if mode == "vector_entry_point" else {
        "autoreset_mode": AutoresetMode.SAME_STEP
    }
    try:
        envs = gym.make_vec(cfg.id, num_envs=num_envs, vectorization_mode=mode,
                            vector_kwargs=vector_kwargs, **kwargs)
    except (gym.error.Error, TypeError, ValueError) as e:
        raise ConfigError(f"could not make env {cfg.id!r} with env.kwargs={kwargs}: {e}") from None
    if isinstance(envs.single_action_space, gym.spaces.Box):
        # The policy's raw action is stored for learning; the env sees it clipped to bounds.
        envs = gym.wrappers.vector.ClipAction(envs)
    return envs


def autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        raise ConfigError(f"vector envs with autoreset mode {mode} are not supported")
    return mode


def space_info(envs: VectorEnv, env_id: str) -> SpaceInfo:
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"{env_id} has observation space {obs_space}; rltrain supports Box observations "
            "(wrap the env, e.g. with gymnasium's FlattenObservation, to use it)"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        num_actions, shape, low, high = int(act_space.n), (), None, None
    elif isinstance(act_space, gym.spaces.Box):
        num_actions, shape = None, act_space.shape
        low, high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
    else:
        raise ConfigError(
            f"{env_id} has action space {act_space}; rltrain supports Discrete and Box actions"
        )
    return SpaceInfo(
        obs_shape=tuple(obs_space.shape),
        num_actions=num_actions,
        action_shape=tuple(shape),
        action_low=low,
        action_high=high,
        reward_threshold=_spec(env_id).reward_threshold,
        env_id=env_id,
    )


# --------------------------------------------------------------------------- env state
# Checkpoints hold an env's state as plain data (arrays as tensors, generator states as
# dicts), never as a pickled object, so that loading one can execute no code. The state is
# read off the attributes of the env, its wrappers and sub-envs: numbers, arrays and
# random generators. Spaces, specs and render surfaces are not state.
_PLAIN = (bool, int, float, str, type(None))


def _is_env(value: Any) -> bool:
    return isinstance(value, (gym.Env, gym.Wrapper, VectorEnv, VectorWrapper))


def _pack(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, np.random.Generator):
        return ("rng", value.bit_generator.state)
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("array", torch.from_numpy(np.array(value, copy=True)))
    if isinstance(value, np.generic):
        return ("value", value.item())
    if isinstance(value, _PLAIN):
        return ("value", value)
    if _is_env(value):
        return ("env", _snapshot(value))
    if isinstance(value, list) and value:
        packed = [_pack(v) for v in value]
        if all(p is not None for p in packed):
            return ("list", packed)
    return None


def _unpack(kind: str, data: Any, live: Any) -> Any:
    if kind == "rng":
        rng = live if isinstance(live, np.random.Generator) else np.random.default_rng()
        rng.bit_generator.state = data
        return rng
    if kind == "array":
        return data.numpy().copy()
    if kind == "env":
        _restore(live, data)
        return live
    if kind == "list":
        return [_unpack(k, d, lv) for (k, d), lv in zip(data, live or [None] * len(data),
                                                        strict=True)]
    return data


def _snapshot(obj: Any) -> dict[str, Any]:
    out = {}
    for name, value in vars(obj).items():
        packed = _pack(value)
        if packed is not None:
            out[name] = packed
    return out


def _restore(obj: Any, state: dict[str, Any]) -> None:
    for name, (kind, data) in state.items():
        setattr(obj, name, _unpack(kind, data, getattr(obj, name, None)))


def env_state(envs: VectorEnv) -> dict[str, Any] | None:
    """The full state of a vector env as plain data, or None when it lives in other
    processes (async vector envs) and cannot be read."""
    inner = envs
    while isinstance(inner, VectorWrapper):
        inner = inner.env
    if isinstance(inner, gym.vector.AsyncVectorEnv):
        return None
    return _snapshot(envs)


def restore_env_state(envs: VectorEnv, state: dict[str, Any]) -> None:
    _restore(envs, state)
