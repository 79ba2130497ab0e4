"""The dataset type: transitions of whole episodes in time order, and what made them.

A :class:`Dataset` holds the transitions of whole episodes one after another (an episode
ends at a transition that is ``terminated`` or ``truncated``; the last transition of a
dataset always ends one), the env's own actions, and a ``meta`` record: the env, its spaces
as plain data (:mod:`rltrain.data.datasets.spaces`), the policy that acted, the episode
returns. Its array fields are a dataset's fields in file order, and :data:`ARRAYS` is read
from them: the one list of fields that the files, their validation, Minari's conversion and
the replay buffer's follow.

:func:`make_dataset` builds one with rltrain's dtypes, :func:`new_meta` its meta record,
:func:`concatenate` joins datasets one after another.

Imports: numpy, :mod:`rltrain` (its version) and :mod:`rltrain.data.datasets.spaces`; no
other module of this package.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rltrain
from rltrain.data.datasets.spaces import obs_storage, space_from_dict

#: action spaces whose actions are integers (stored as int64)
INTEGER_ACTIONS = ("Discrete", "MultiDiscrete", "MultiBinary")
FORMAT = "rltrain-dataset"
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class Dataset:
    """Transitions of whole episodes in time order (see the module docstring)."""

    #: (N, *stored_shape): float32, or uint8 for images and packed Dict rows (see
    #: :func:`obs_storage`)
    obs: np.ndarray
    #: (N, *act_shape): the env's own actions (int64 for Discrete, float32 for Box)
    act: np.ndarray
    #: (N,) float32
    rew: np.ndarray
    #: (N, *stored_shape), as ``obs``: the true next observation, also at an episode's end
    next_obs: np.ndarray
    #: (N,) bool
    terminated: np.ndarray
    #: (N,) bool: the last transition of every episode that did not terminate (time
    #: limit, or cut by the end of collection)
    truncated: np.ndarray
    #: env_id, env_kwargs, observation_space, action_space (plain dicts, see
    #: :func:`~rltrain.data.datasets.spaces.describe_space`), policy, episode_returns,
    #: source, created, rltrain_version
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rew)

    @property
    def dones(self) -> np.ndarray:
        """Episode boundaries: the last transition of each episode."""
        return self.terminated | self.truncated

    def episode_starts(self) -> np.ndarray:
        """Index of the first transition of each episode."""
        ends = np.flatnonzero(self.dones)
        return np.concatenate([[0], ends[:-1] + 1]).astype(np.int64) if len(ends) else \
            np.zeros(0, dtype=np.int64)

    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.append(self.episode_starts(), len(self)))

    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each episode, summed in float64 from the stored rewards."""
        starts = self.episode_starts()
        if not len(starts):
            return np.zeros(0)
        return np.add.reduceat(self.rew.astype(np.float64), starts)

    @property
    def num_episodes(self) -> int:
        return int(self.dones.sum())

    def summary(self) -> dict[str, Any]:
        """Transitions, episodes and their returns, for printing."""
        returns = self.episode_returns()
        stats = ({"return_mean": float(returns.mean()), "return_std": float(returns.std()),
                  "return_min": float(returns.min()), "return_max": float(returns.max())}
                 if len(returns) else {})
        return {"transitions": len(self), "episodes": len(returns),
                "terminated": int(self.terminated.sum()),
                "length_mean": float(self.episode_lengths().mean()) if len(returns) else 0.0,
                **stats, "env_id": self.meta.get("env_id"), "source": self.meta.get("source")}


#: the arrays of a dataset, in file order: :class:`Dataset`'s fields but its meta record
ARRAYS = tuple(f.name for f in dataclasses.fields(Dataset) if f.name != "meta")


def new_meta(**fields: Any) -> dict[str, Any]:
    """A meta record with rltrain's own fields (format, version, creation time) filled in."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "rltrain_version": rltrain.__version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **fields}


def make_dataset(obs: np.ndarray, act: np.ndarray, rew: np.ndarray, next_obs: np.ndarray,
                 terminated: np.ndarray, truncated: np.ndarray, meta: dict[str, Any]) -> Dataset:
    """A dataset from arrays in time order, with rltrain's dtypes (observations as
    :func:`obs_storage` says for ``meta["observation_space"]``: images and packed Dict rows
    stay uint8); its last transition is marked truncated if it ends no episode, and
    ``meta["episode_returns"]`` is set from the arrays (so the two always agree).

    :raises ValueError: observations of a uint8 space that are not all bytes (0..255).
    """
    discrete = meta["action_space"]["type"] in INTEGER_ACTIONS
    obs_dtype, _ = obs_storage(space_from_dict(meta["observation_space"]))
    truncated = np.array(truncated, dtype=bool)
    terminated = np.asarray(terminated, dtype=bool)
    if len(truncated) and not (terminated[-1] or truncated[-1]):
        truncated[-1] = True
    ds = Dataset(obs=_as_stored(obs, obs_dtype, "obs"),
                 act=np.asarray(act, dtype=np.int64 if discrete else np.float32),
                 rew=np.asarray(rew, dtype=np.float32),
                 next_obs=_as_stored(next_obs, obs_dtype, "next_obs"),
                 terminated=terminated, truncated=truncated, meta=dict(meta))
    ds.meta["episode_returns"] = [float(r) for r in ds.episode_returns()]
    return ds


def _as_stored(a: Any, dtype: np.dtype, name: str) -> np.ndarray:
    """``a`` in the storage dtype; to uint8 only exactly (an older replay buffer held images
    as float32 copies of their bytes)."""
    a = np.asarray(a)
    if dtype != np.uint8 or a.dtype == np.uint8:
        return a.astype(dtype, copy=False)
    with np.errstate(invalid="ignore"):  # NaN: refused below
        as_bytes = a.astype(np.uint8)
    if not np.array_equal(as_bytes, a):
        raise ValueError(f"{name} ({a.dtype}) holds values that are not bytes (0..255), but "
                         "its observation space is stored as uint8")
    return as_bytes


def concatenate(parts: list[Dataset], meta: dict[str, Any]) -> Dataset:
    """The datasets one after another (each ends an episode, so episodes stay whole)."""
    obs, act, rew, next_obs, terminated, truncated = (
        np.concatenate([getattr(p, name) for p in parts]) for name in ARRAYS)
    return make_dataset(obs, act, rew, next_obs, terminated, truncated, meta=meta)


def json_safe(obj: Any) -> Any:
    """JSON-safe: what json cannot write becomes its repr."""
    try:
        json.dumps(obj, allow_nan=False)
        return obj
    except (TypeError, ValueError):
        if isinstance(obj, dict):
            return {str(k): json_safe(v) for k, v in obj.items()}
        return repr(obj)

