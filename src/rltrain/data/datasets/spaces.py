"""Spaces as plain data: how a dataset records its env's observation and action spaces.

A dataset's meta holds each space as JSON (:func:`describe_space`), read back without
importing or evaluating anything (:func:`space_from_dict`), compared with tolerance on Box
bounds (:func:`space_mismatch`) and shown in one line for messages (:func:`space_text`,
:func:`space_line`). :func:`obs_storage` says how observations of a space are held: the
dtype and shape of one row, as rltrain's buffers hold them.

Imports: gymnasium, numpy and :mod:`rltrain.config.schemas`; :mod:`rltrain.spaces.observations` only
where a space that is not a Box of numbers is stored (it imports torch, which reading, writing and
merging datasets of vectors do without). No other module of this package.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from rltrain.config.schemas import ConfigError

#: bounds of two Box spaces closer than this are the same
BOUNDS_TOLERANCE = 1e-6


def describe_space(space: gym.Space) -> dict[str, Any]:
    """A space as plain JSON data: Box (bounds as flat lists of floats, infinite ones as
    "inf"/"-inf"; an image is a Box of uint8), Discrete, MultiDiscrete, MultiBinary, and a
    Dict of those (its keys in the space's order, which is the order a Dict observation is
    packed in; :mod:`rltrain.spaces.observations`)."""
    if isinstance(space, gym.spaces.Dict):
        parts = []
        for key, sub in space.spaces.items():
            refused = ConfigError(f"Dict key {key!r} is a {type(sub).__name__}, which cannot be "
                                  f"stored in a dataset; {SPACES_HELD}")
            if not isinstance(key, str) or isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
                raise refused
            try:
                parts.append([key, describe_space(sub)])
            except ConfigError:
                raise refused from None
        return {"type": "Dict", "spaces": parts}
    if isinstance(space, gym.spaces.Discrete):
        d: dict[str, Any] = {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
        if space.dtype != np.int64:  # gymnasium's default, left out as before
            d["dtype"] = np.dtype(space.dtype).name
        return d
    if isinstance(space, gym.spaces.Box):
        def bounds(a: np.ndarray) -> list[Any]:
            return [float(x) if np.isfinite(x) else ("inf" if x > 0 else "-inf")
                    for x in np.asarray(a, dtype=np.float64).reshape(-1)]
        return {"type": "Box", "shape": list(space.shape), "low": bounds(space.low),
                "high": bounds(space.high), "dtype": np.dtype(space.dtype).name}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(),
                "start": space.start.tolist(), "dtype": np.dtype(space.dtype).name}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise ConfigError(f"{type(space).__name__} spaces cannot be stored in a dataset; "
                      f"{SPACES_HELD}")


#: what :func:`describe_space` takes, for messages
SPACES_HELD = ("rltrain datasets hold Box, Discrete, MultiDiscrete and MultiBinary spaces, and "
               "Dict spaces of those (one level of string keys)")


def _dtype(name: Any, kinds: str) -> np.dtype:
    """A dtype named in a description, one of ``kinds`` (numpy's kind letters) or ValueError:
    a name is only ever looked up, and object or string dtypes are refused."""
    if not isinstance(name, str):
        raise ValueError(f"dtype {name!r} is not a name")
    dtype = np.dtype(name)
    if dtype.kind not in kinds or dtype.shape or dtype.names:
        raise ValueError(f"dtype {name!r} is not one of numpy's kinds {kinds!r}")
    return dtype


def _ints(values: Any, what: str) -> np.ndarray:
    """A (nested) list of integers, as int64; ValueError otherwise (floats included)."""
    a = np.array(values, dtype=object)  # a ragged list: an array of lists, refused below
    flat = a.reshape(-1)
    if a.ndim < 1 or not all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
        raise ValueError(f"{what} is not a list of integers")
    return np.array(flat.tolist(), dtype=np.int64).reshape(a.shape)


def space_from_dict(d: Mapping[str, Any]) -> gym.Space:
    """The gymnasium space that :func:`describe_space` described (ValueError if malformed).
    Only data is read: type names are matched against a fixed list, dtypes looked up by name
    among the numeric ones; nothing is imported or evaluated."""
    try:
        return _space_from_dict(d, nested=False)
    # AssertionError: gymnasium's own checks (Discrete(0), a MultiDiscrete nvec of 0)
    except (KeyError, TypeError, ValueError, OverflowError, AssertionError) as e:
        raise ValueError(f"malformed space description ({type(e).__name__}: {e})") from None


def _space_from_dict(d: Mapping[str, Any], nested: bool) -> gym.Space:
    if not isinstance(d, Mapping):
        raise TypeError("a space is described by a JSON object")
    kind = d.get("type")
    if kind == "Discrete":
        return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)),
                                   dtype=_dtype(d.get("dtype", "int64"), "iu"))
    if kind == "Box":
        shape = tuple(int(n) for n in d["shape"])
        dtype = _dtype(d.get("dtype", "float32"), "fiub")
        low, high = (np.array([float(x) for x in d[k]]).reshape(shape)
                     for k in ("low", "high"))
        if dtype.kind == "f":  # exact: the bounds were written from this dtype
            low, high = low.astype(dtype), high.astype(dtype)
        with warnings.catch_warnings():  # gymnasium's notes on casting integer bounds
            warnings.simplefilter("ignore")
            return gym.spaces.Box(low, high, shape, dtype)
    if kind == "MultiDiscrete":
        nvec = _ints(d["nvec"], "nvec")
        start = _ints(d["start"], "start") if "start" in d else None
        return gym.spaces.MultiDiscrete(nvec, dtype=_dtype(d.get("dtype", "int64"), "iu"),
                                        start=start)
    if kind == "MultiBinary":
        n = d["n"]
        return gym.spaces.MultiBinary(int(n) if isinstance(n, int) else _ints(n, "n"))
    if kind == "Dict":
        if nested:
            raise ValueError("a Dict inside a Dict (rltrain takes one level of keys)")
        pairs = d["spaces"]
        if not isinstance(pairs, list) or not pairs:
            raise ValueError("a Dict needs a non-empty list of [key, space] pairs")
        keys = []
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise ValueError(f"a Dict entry {str(pair)[:40]} is not a [key, space] pair")
            keys.append(pair[0])
        if len(set(keys)) != len(keys):
            raise ValueError(f"a Dict names a key twice ({keys})")
        # a list of pairs keeps the order (gymnasium sorts the keys of a plain dict)
        return gym.spaces.Dict([(key, _space_from_dict(sub, nested=True))
                                for key, sub in pairs])
    raise ValueError(f"unknown space type {kind!r}")


def space_text(d: Mapping[str, Any]) -> str:
    """A described space in one short line, as gymnasium prints it where it can:
    ``Discrete(3)``, ``Box(-2.0, 2.0, (1,), float32)``, per-dimension bounds as lists (the
    middle of a long one left out), a Dict as ``Dict(key: space, ...)`` in its order."""
    try:
        space = space_from_dict(d)
    except ValueError:
        return json.dumps(d)[:80]
    return space_line(space)


def space_line(space: gym.Space) -> str:
    """A space in one short line (see :func:`space_text`)."""
    if isinstance(space, gym.spaces.Dict):
        return f"Dict({', '.join(f'{k}: {space_line(s)}' for k, s in space.spaces.items())})"
    if not isinstance(space, gym.spaces.Box):
        return " ".join(str(space).split())  # one line (a 2-D MultiDiscrete prints two)
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    if len(low) and (low == low[0]).all() and (high == high[0]).all():
        return str(space)

    def values(a: np.ndarray) -> str:
        shown = [f"{x:.6g}" for x in (a if len(a) <= 6 else [*a[:3], *a[-2:]])]
        if len(a) > 6:
            shown.insert(3, "...")
        return f"[{', '.join(shown)}]"
    return f"Box({values(low)}, {values(high)}, {space.shape}, {space.dtype})"


def _bytes_valued(d: Mapping[str, Any]) -> bool:
    """A Box of uint8 or bool values: stored as bytes where it is an image or a Dict key."""
    return str(d.get("dtype", "float32")) in ("uint8", "bool")


def space_mismatch(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why two described spaces differ (None if they are the same for rltrain): type, and
    Box shape and bounds (within :data:`BOUNDS_TOLERANCE` where finite), Discrete n and
    start, MultiDiscrete nvec and start, MultiBinary n, a Dict's keys in order and each
    key's space (the reason then names the key). A Box dtype counts only where it changes
    how the observations are stored: bytes (uint8, bool) against any other; among the
    others it does not (they are all stored as float32)."""
    if a.get("type") != b.get("type"):
        return "type"
    if a["type"] == "Dict":
        keys_a, keys_b = [k for k, _ in a["spaces"]], [k for k, _ in b["spaces"]]
        if keys_a != keys_b:
            # the order is the packing's (Minari's files, for one, keep the keys sorted)
            return "key order" if sorted(keys_a) == sorted(keys_b) else "keys"
        for (key, sub_a), (_, sub_b) in zip(a["spaces"], b["spaces"], strict=True):
            why = space_mismatch(sub_a, sub_b)
            if why is not None:
                return f"key {key!r}: {why}"
        return None
    if a["type"] == "Discrete":
        if (int(a["n"]), int(a.get("start", 0))) != (int(b["n"]), int(b.get("start", 0))):
            return "n or start"
        return None
    if a["type"] == "MultiDiscrete":
        same = (np.array_equal(a["nvec"], b["nvec"])
                and np.array_equal(a.get("start", np.zeros_like(a["nvec"])),
                                   b.get("start", np.zeros_like(b["nvec"]))))
        return None if same else "nvec or start"
    if a["type"] == "MultiBinary":
        return None if np.array_equal(a["n"], b["n"]) else "n"
    if list(a["shape"]) != list(b["shape"]):
        return "shape"
    if _bytes_valued(a) != _bytes_valued(b):
        return "dtype"
    for key in ("low", "high"):
        x = np.array([float(v) for v in a[key]])
        y = np.array([float(v) for v in b[key]])
        finite = np.isfinite(x)
        if x.shape != y.shape or not (finite == np.isfinite(y)).all() or \
                (x[~finite] != y[~finite]).any() or \
                (np.abs(x[finite] - y[finite]) > BOUNDS_TOLERANCE).any():
            return "bounds"
    return None



def obs_storage(space: gym.Space) -> tuple[np.dtype, tuple[int, ...]]:
    """How a dataset holds observations of ``space``: the dtype and shape of one row, as
    rltrain's buffers do (:mod:`rltrain.spaces.observations`): uint8 for images and packed Dict rows
    ``(row_bytes,)``, float32 otherwise.

    :raises ConfigError: a Dict space rltrain cannot pack, with its reason.
    """
    if isinstance(space, gym.spaces.Box) and np.dtype(space.dtype) not in (np.uint8, np.bool_):
        # a Box of numbers: float32 in its own shape, known without rltrain.spaces.observations,
        # which imports torch (1 s) that reading, writing and merging vectors do without
        return np.dtype(np.float32), tuple(space.shape)
    from rltrain.spaces.observations import ObservationSpaceError, storage_dtype, stored_shape

    try:
        return storage_dtype(space), stored_shape(space)
    except ObservationSpaceError as e:
        raise ConfigError(str(e)) from None

