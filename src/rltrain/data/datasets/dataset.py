"""The dataset type: transitions of whole episodes in time order, and what made them.

A :class:`Dataset` holds the transitions of whole episodes one after another (an episode
ends at a transition that is ``terminated`` or ``truncated``; the last transition of a
dataset always ends one), the env's own actions, and a ``meta`` record: the env, its spaces
as plain data (:mod:`rltrain.data.datasets.spaces`), the policy that acted, the episode
returns. Its array fields are a dataset's fields in file order, and :data:`ARRAYS` is read
from them: the one list of fields that the files, their validation, Minari's conversion and
the replay buffer's follow.

Beside them a dataset may carry declared fields (:class:`rltrain.data.fields.Field`: a
behaviour log-prob, a recurrent state, whatever an algorithm stores beside a transition,
``AlgoSpec.stored``): ``Dataset.fields``, one ``(N, *shape)`` array each, listed in
``meta["fields"]`` (name, shape, dtype; :func:`describe_fields`, read back by
:func:`fields_of_meta`) so that a file says what it holds. A dataset is a replay buffer's
transitions written down: the same fields, with the same names, shapes and dtypes. A dataset
without any has no ``"fields"`` entry, so its meta is what it always was.

:func:`make_dataset` builds one with rltrain's dtypes, :func:`new_meta` its meta record,
:func:`concatenate` joins datasets one after another.

Imports: numpy, :mod:`rltrain` (its version), :mod:`rltrain.data.fields` (numpy only) and
:mod:`rltrain.data.datasets.spaces`; no other module of this package.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rltrain
from rltrain.data.datasets.spaces import obs_storage, space_from_dict
from rltrain.data.fields import Field, declared

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
    #: source, created, rltrain_version; ``fields`` where it carries declared fields
    meta: dict[str, Any] = field(default_factory=dict)
    #: declared fields beside a transition's, by name: (N, *shape) each, in the dtype
    #: ``meta["fields"]`` lists (none: a transition's fields only)
    fields: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rew)

    @property
    def declared(self) -> tuple[Field, ...]:
        """Its declared fields (name, one transition's shape, dtype), in file order."""
        return tuple(Field(name, a.shape[1:], a.dtype) for name, a in self.fields.items())

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
                **stats, "env_id": self.meta.get("env_id"), "source": self.meta.get("source"),
                **({"fields": describe_fields(self.declared)} if self.fields else {})}


#: the arrays every dataset has, in file order: :class:`Dataset`'s fields but its meta
#: record and its declared fields
ARRAYS = tuple(f.name for f in dataclasses.fields(Dataset) if f.name not in ("meta", "fields"))
#: the dtypes a declared field of a dataset may have: bool, integers, floats (what a file
#: holds as plain numbers, and what a non-finite check can see)
FIELD_KINDS = "biuf"


def describe_fields(fields: tuple[Field, ...]) -> list[dict[str, Any]]:
    """Declared fields as ``meta["fields"]`` lists them: ``{"name", "shape", "dtype"}``."""
    return [{"name": f.name, "shape": list(f.shape), "dtype": f.dtype.name} for f in fields]


def fields_of_meta(meta: Mapping[str, Any]) -> tuple[Field, ...]:
    """The declared fields ``meta["fields"]`` lists (none where it has no such entry).

    :raises ValueError: a list that is not :func:`describe_fields`'s, saying what is wrong.
    """
    listed = meta.get("fields", [])
    if not isinstance(listed, list):
        raise ValueError("not a list")
    out = []
    for d in listed:
        if not isinstance(d, dict) or set(d) != {"name", "shape", "dtype"}:
            raise ValueError(f"{_short(d)} is not {{name, shape, dtype}}")
        name, shape, dtype = d["name"], d["shape"], d["dtype"]
        if not isinstance(name, str):
            raise ValueError(f"the name {_short(name)} is not a string")
        if not isinstance(shape, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31
                for n in shape) or len(shape) > 32:
            raise ValueError(f"{name}: the shape {_short(shape)} is not a list of sizes")
        try:
            parsed = np.dtype(dtype) if isinstance(dtype, str) else None
        except TypeError:
            parsed = None
        if parsed is None or parsed.kind not in FIELD_KINDS or parsed.name != dtype:
            raise ValueError(f"{name}: the dtype {_short(dtype)} is not a numpy dtype of "
                             "bools, integers or floats (bool, int16, float32, ...)")
        out.append(Field(name, tuple(shape), parsed))
    return declared(out)


def _short(value: Any, limit: int = 60) -> str:
    """A value of a damaged meta record, shown in a message at bounded length."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def new_meta(**fields: Any) -> dict[str, Any]:
    """A meta record with rltrain's own fields (format, version, creation time) filled in."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "rltrain_version": rltrain.__version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **fields}


def make_dataset(obs: np.ndarray, act: np.ndarray, rew: np.ndarray, next_obs: np.ndarray,
                 terminated: np.ndarray, truncated: np.ndarray, meta: dict[str, Any],
                 fields: Mapping[str, np.ndarray] | None = None) -> Dataset:
    """A dataset from arrays in time order, with rltrain's dtypes (observations as
    :func:`obs_storage` says for ``meta["observation_space"]``: images and packed Dict rows
    stay uint8); its last transition is marked truncated if it ends no episode, and
    ``meta["episode_returns"]`` is set from the arrays (so the two always agree). ``fields``:
    declared fields beside them, by name, one row per transition each, kept in their own
    dtypes and listed in ``meta["fields"]`` (which is dropped where there are none).

    :raises ValueError: observations of a uint8 space that are not all bytes (0..255); a
        declared field that is not one row per transition of bools or numbers, or whose
        name is taken (:func:`rltrain.data.fields.declared`).
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
                 terminated=terminated, truncated=truncated, meta=dict(meta),
                 fields=_checked_fields(fields or {}, len(terminated)))
    ds.meta.pop("fields", None)
    if ds.fields:
        ds.meta["fields"] = describe_fields(ds.declared)
    ds.meta["episode_returns"] = [float(r) for r in ds.episode_returns()]
    return ds


def _checked_fields(fields: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Declared fields as a dataset holds them: names a field may take, one row per
    transition each, bools or numbers."""
    arrays = {name: np.asarray(a) for name, a in fields.items()}
    declared([Field(name, a.shape[1:], a.dtype) for name, a in arrays.items()])
    for name, a in arrays.items():
        if a.ndim < 1 or len(a) != n:
            raise ValueError(f"declared field {name!r}: shape {a.shape}, expected one row per "
                             f"transition ({n})")
        if a.dtype.kind not in FIELD_KINDS:
            raise ValueError(f"declared field {name!r}: dtype {a.dtype}, expected bools or "
                             "numbers")
    return arrays


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
    """The datasets one after another (each ends an episode, so episodes stay whole), with
    their declared fields, which must be the same in each.

    :raises ValueError: parts that declare different fields, naming them.
    """
    for i, part in enumerate(parts[1:], start=1):
        if part.declared != parts[0].declared:
            raise ValueError(f"dataset {i + 1} declares {fields_text(part.declared)} but "
                             f"dataset 1 {fields_text(parts[0].declared)}")
    obs, act, rew, next_obs, terminated, truncated = (
        np.concatenate([getattr(p, name) for p in parts]) for name in ARRAYS)
    fields = {f.name: np.concatenate([p.fields[f.name] for p in parts])
              for f in parts[0].declared}
    return make_dataset(obs, act, rew, next_obs, terminated, truncated, meta=meta,
                        fields=fields)


def fields_text(fields: tuple[Field, ...]) -> str:
    """Declared fields in a message: ``logp (float32), memo (int16 of shape (3,))``, or
    ``no fields``."""
    if not fields:
        return "no fields"
    return ", ".join(f"{f.name} ({f.dtype.name}{f' of shape {f.shape}' if f.shape else ''})"
                     for f in fields)


def json_safe(obj: Any) -> Any:
    """JSON-safe: what json cannot write becomes its repr."""
    try:
        json.dumps(obj, allow_nan=False)
        return obj
    except (TypeError, ValueError):
        if isinstance(obj, dict):
            return {str(k): json_safe(v) for k, v in obj.items()}
        return repr(obj)

