"""Offline-RL datasets: transitions in time order, in a file, with what made them.

A :class:`Dataset` holds the transitions of whole episodes one after another (an
episode ends at a transition that is ``terminated`` or ``truncated``; the last
transition of a dataset always ends one), the env's own actions, and a ``meta``
record: the env, its spaces as plain data, the policy that acted, the episode returns.
Observations are held as rltrain's buffers hold them (:mod:`rltrain.observations`): images
(uint8 Boxes with three axes) as uint8, Dict observations as uint8 rows packed by their
:class:`~rltrain.observations.DictLayout`, anything else as float32; in memory and in files
alike.

Files: rltrain's own ``.h5``/``.hdf5`` (h5py; one HDF5 dataset per array, gzip, meta as a
JSON string attribute) and ``.npz`` (numpy; meta as a JSON string entry), written
atomically. Frame-stacked image observations (Atari's four frames) are written once per
frame, with the frames of each observation by index (:func:`chain_frames`), and rebuilt when
read; and Minari datasets from local storage (``minari:ID``, read only). Every
problem a user can fix (a missing or damaged file, a wrong space, a missing package)
raises :class:`rltrain.config.ConfigError` with one line that names the file or id.

For training, :func:`to_buffer` puts a dataset into a one-lane :class:`ReplayBuffer`
(actions in the algorithm's normalised space); :func:`from_replay_buffer` turns an
off-policy run's checkpointed replay buffer back into a dataset (the env's actions).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import signal
import stat
import threading
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import gymnasium as gym
import numpy as np

import rltrain
from rltrain import trust
from rltrain.config import ConfigError
from rltrain.files import open_new_bytes

if TYPE_CHECKING:
    from rltrain.data.storage import ReplayBuffer

# rltrain.actions, the buffers and rltrain.observations are imported where they are used: they
# import torch, which reading, writing and merging datasets of vectors (rltrain-collect
# --merge) do without; h5py (0.18 s) only where an HDF5 file is read or written, minari (an
# extra) only for minari:ID

#: the arrays of a dataset, in file order
ARRAYS = ("obs", "act", "rew", "next_obs", "terminated", "truncated")
#: what a file holds instead of obs and next_obs when they are frame stacks (see
#: :func:`chain_frames`): each frame once, and the frames of every observation by index
FRAME_ARRAYS = ("frames", "obs_frames", "next_obs_frames")
#: action spaces whose actions are integers (stored as int64)
INTEGER_ACTIONS = ("Discrete", "MultiDiscrete", "MultiBinary")
#: the file suffixes rltrain reads and writes
SUFFIXES = (".h5", ".hdf5", ".npz")
FORMAT = "rltrain-dataset"
FORMAT_VERSION = 1
MINARI_PREFIX = "minari:"
MINARI_INSTALL = 'pip install -e ".[minari]"'
#: bounds of two Box spaces closer than this are the same
BOUNDS_TOLERANCE = 1e-6


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
    #: :func:`describe_space`), policy, episode_returns, source, created, rltrain_version
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


# --------------------------------------------------------------------------- spaces as data
def describe_space(space: gym.Space) -> dict[str, Any]:
    """A space as plain JSON data: Box (bounds as flat lists of floats, infinite ones as
    "inf"/"-inf"; an image is a Box of uint8), Discrete, MultiDiscrete, MultiBinary, and a
    Dict of those (its keys in the space's order, which is the order a Dict observation is
    packed in; :mod:`rltrain.observations`)."""
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
    return _text(space)


def _text(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Dict):
        return f"Dict({', '.join(f'{k}: {_text(s)}' for k, s in space.spaces.items())})"
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


def check_spaces(ds: Dataset, obs_space: gym.Space, action_space: gym.Space, env_id: str,
                 spec: str) -> None:
    """Refuse a dataset whose observation or action space is not the env's, naming both.

    Only the spaces decide: a dataset collected on another env id with the same spaces (a
    registered copy, a variant) is accepted.
    """
    where = ds.meta.get("env_id")
    origin = f" (collected on {where})" if where and where != env_id else ""
    for what, space, key in (("observation", obs_space, "observation_space"),
                             ("action", action_space, "action_space")):
        mine = ds.meta.get(key)
        try:
            env_d = describe_space(space)
        except ConfigError:
            raise ConfigError(f"{env_id} has a {type(space).__name__} {what} space, which "
                              f"cannot be stored in a dataset; {SPACES_HELD}") from None
        if not isinstance(mine, Mapping):
            raise ConfigError(f"dataset {spec}{origin} records no {what} space but {env_id} "
                              f"has {space_text(env_d)}; collect the dataset on the same env")
        why = space_mismatch(mine, env_d)
        if why is not None:
            theirs = space_text(mine)
            # a Dict's line is long: say where they part
            detail = f" (they differ in {why})" if mine.get("type") == "Dict" and \
                why != "type" else ""
            raise ConfigError(f"dataset {spec}{origin} has {what} space {theirs} but {env_id} has "
                              f"{space_text(env_d)}{detail}; collect the dataset on the same env")
    dtype, shape = obs_storage(obs_space)
    for name in ("obs", "next_obs"):
        a = getattr(ds, name)
        if a.dtype != dtype or a.shape[1:] != shape:
            raise ConfigError(f"dataset {spec}{origin} holds {name} as {a.dtype} "
                              f"{a.shape[1:]}, but {env_id}'s observations "
                              f"({_text(obs_space)}) are stored as {dtype} {shape}; collect "
                              "the dataset on the same env with rltrain-collect")


def obs_storage(space: gym.Space) -> tuple[np.dtype, tuple[int, ...]]:
    """How a dataset holds observations of ``space``: the dtype and shape of one row, as
    rltrain's buffers do (:mod:`rltrain.observations`): uint8 for images and packed Dict rows
    ``(row_bytes,)``, float32 otherwise.

    :raises ConfigError: a Dict space rltrain cannot pack, with its reason.
    """
    if isinstance(space, gym.spaces.Box) and np.dtype(space.dtype) not in (np.uint8, np.bool_):
        # a Box of numbers: float32 in its own shape, known without rltrain.observations,
        # which imports torch (1 s) that reading, writing and merging vectors do without
        return np.dtype(np.float32), tuple(space.shape)
    from rltrain.observations import ObservationSpaceError, storage_dtype, stored_shape

    try:
        return storage_dtype(space), stored_shape(space)
    except ObservationSpaceError as e:
        raise ConfigError(str(e)) from None


# --------------------------------------------------------------------------- building
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


# --------------------------------------------------------------------------- files
def _suffix(path: Path, verb: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        shown = f"suffix {path.suffix!r}" if path.suffix else "no suffix"
        raise ConfigError(f"{path}: cannot {verb} a dataset with {shown}; use .h5, .hdf5 "
                          "(HDF5) or .npz (numpy)")
    return suffix


def save_dataset(ds: Dataset, path: Path | str) -> Path:
    """Write ``ds`` to ``path`` (.h5/.hdf5 or .npz) atomically: a temporary file in the same
    folder, renamed over ``path`` once complete, so that an old file there stays whole until
    then and an interrupted or failed write leaves nothing behind.

    An HDF5 file is made in memory first (h5py's core driver) and then written as plain
    bytes: the HDF5 library meets no full disk (its failed writes surface as errors at
    garbage collection, and a segmentation fault followed), and a signal during its work
    (which it may swallow) is held until it is done (:func:`_signals_held`).

    :raises ConfigError: an unknown suffix. OSError: the file system's own error; for a full
        disk (ENOSPC) its message says how much the file needs and how much is free.
    """
    path = Path(path)
    suffix = _suffix(path, "write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    meta = json.dumps(ds.meta, allow_nan=False)
    arrays = file_arrays(ds)
    if suffix == ".npz":
        # np.savez stores the arrays as they are: their bytes, headers and the zip directory
        size = sum(a.nbytes for a in arrays.values()) + len(meta.encode()) + 512 * len(arrays)

        def write(f: BinaryIO) -> None:
            np.savez(f, **arrays, meta=np.array(meta))  # a file object: no second ".npz"
    else:
        image = _hdf5_image(arrays, meta)
        size = len(image)

        def write(f: BinaryIO) -> None:
            f.write(image)
    _check_room(path, size)
    try:
        with open_new_bytes(tmp) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            raise _no_room(path, size) from None
        raise
    return path


#: a full disk, and a quota reached
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def encoded_size(ds: Dataset, suffix: str) -> int:
    """Bytes the file of ``ds`` takes as :func:`save_dataset` writes it (``suffix``: .npz,
    .h5 or .hdf5), compressed as it would be: for an estimate of what a whole collection
    will need from a part of it (rltrain-collect)."""
    meta = json.dumps(ds.meta, allow_nan=False)
    arrays = file_arrays(ds)
    if suffix.lower() == ".npz":
        return sum(a.nbytes for a in arrays.values()) + len(meta.encode()) + 512 * len(arrays)
    return len(_hdf5_image(arrays, meta))


def file_arrays(ds: Dataset) -> dict[str, Any]:
    """The arrays a file of ``ds`` holds: :data:`ARRAYS`, with obs and next_obs replaced by
    :data:`FRAME_ARRAYS` where they are chained frame stacks."""
    arrays: dict[str, Any] = {name: getattr(ds, name) for name in ARRAYS}
    chained = chain_frames(ds.obs, ds.next_obs, ds.dones)
    if chained is not None:
        del arrays["obs"], arrays["next_obs"]
        arrays.update(zip(FRAME_ARRAYS, chained, strict=True))
    return arrays


def chain_frames(obs: np.ndarray, next_obs: np.ndarray, dones: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(frames, obs_frames, next_obs_frames)``: each frame of a dataset of frame stacks once,
    and the indices of the k frames of every observation (``frames[obs_frames] == obs``), or
    None where the observations are not such stacks (not uint8 images of ``(k >= 2, ...)``,
    or not chained).

    Chained means what a frame-stacking wrapper gives: within an episode, each next
    observation is the following observation, and its frames are the observation's shifted
    by one, with one new frame last. An episode of L transitions then takes k + L frames, not
    2 k L; the result is checked to rebuild every observation exactly, or not used.
    """
    if obs.dtype != np.uint8 or obs.ndim < 4 or obs.shape[1] < 2 or len(obs) == 0:
        return None
    n, k = obs.shape[:2]
    starts = np.flatnonzero(np.concatenate(([True], dones[:-1])))
    episode = np.cumsum(np.isin(np.arange(n), starts)) - 1
    lengths = np.diff(np.append(starts, n))
    base = np.concatenate(([0], np.cumsum(lengths + k)[:-1]))
    obs_frames = (base[episode] + np.arange(n) - starts[episode])[:, None] + np.arange(k)
    next_obs_frames = obs_frames + 1
    frames = np.empty((int((lengths + k).sum()), *obs.shape[2:]), np.uint8)
    frames[obs_frames[starts]] = obs[starts]
    frames[next_obs_frames[:, -1]] = next_obs[:, -1]
    chunk = max(1, (64 << 20) // max(1, obs[0].nbytes))  # compare 64 MiB at a time
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        if not (np.array_equal(frames[obs_frames[lo:hi]], obs[lo:hi])
                and np.array_equal(frames[next_obs_frames[lo:hi]], next_obs[lo:hi])):
            return None
    return frames, obs_frames, next_obs_frames


def unchain_frames(arrays: dict[str, np.ndarray], spec: str) -> None:
    """Rebuild obs and next_obs in ``arrays`` from :data:`FRAME_ARRAYS` (in place), checking
    what a hostile file could hold: integer indices of one shape, each naming a frame.

    :raises ConfigError: indices that are not integers, of unequal shapes or outside the
        frames, or frames that are not uint8.
    """
    frames, obs_frames, next_obs_frames = (arrays.pop(name) for name in FRAME_ARRAYS)

    def bad(problem: str) -> ConfigError:
        return ConfigError(f"dataset {spec} {problem}; recollect it with rltrain-collect")

    if frames.dtype != np.uint8 or frames.ndim < 2:
        raise bad(f"has frames of shape {frames.shape} and dtype {frames.dtype}, not uint8 "
                  "images")
    for name, index in (("obs_frames", obs_frames), ("next_obs_frames", next_obs_frames)):
        if index.dtype.kind not in "iu" or index.ndim != 2 or index.shape != obs_frames.shape:
            raise bad(f"has {name} of shape {index.shape} and dtype {index.dtype}; it needs "
                      "the integer frame indices of each observation, one row per transition")
        outside = (index < 0) | (index >= len(frames))
        if outside.any():
            raise bad(f"has {name} naming frame {int(index[outside][0])}, but it holds "
                      f"{len(frames)} frames")
    arrays["obs"], arrays["next_obs"] = frames[obs_frames], frames[next_obs_frames]


def _hdf5_image(arrays: Mapping[str, np.ndarray], meta: str) -> bytes:
    """The bytes of rltrain's HDF5 file of these arrays, made in memory."""
    import h5py

    # backing_store=False: the name is only a label, nothing is written there
    with _signals_held(), h5py.File("rltrain-dataset.h5", "w", driver="core",
                                    backing_store=False) as f:
        f.attrs["format"] = FORMAT
        f.attrs["meta"] = meta
        for name, a in arrays.items():
            big = a.size > 1024
            f.create_dataset(name, data=a, track_times=False,
                             compression="gzip" if big else None,
                             compression_opts=4 if big else None, shuffle=big)
        f.flush()
        image: bytes = f.id.get_file_image()
    return image


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs, then take the first one that
    came as it would have been taken (Ctrl-C: KeyboardInterrupt). In the main thread only
    (elsewhere, signals go to the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    before = {s: signal.signal(s, lambda signum, _: came.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if came:
            signal.raise_signal(came[0])


def free_bytes(folder: Path) -> int | None:
    """Bytes this process may still write in ``folder``'s file system (None: not known)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail  # root may use the reserve
    return blocks * st.f_frsize


def _check_room(path: Path, size: int) -> None:
    """Refuse, before writing a byte, a file that cannot fit where it goes."""
    free = free_bytes(path.parent)
    if free is not None and size > free:
        raise _no_room(path, size)


def _no_room(path: Path, size: int) -> OSError:
    """ENOSPC for ``path``, saying what was short: bytes, or room for one more file."""
    free = free_bytes(path.parent)
    why = f"the dataset needs {size_text(size)}"
    if free is not None and free < size:
        why += f", and {size_text(free)} is free there"
    else:
        with contextlib.suppress(OSError):
            if os.statvfs(path.parent).f_ffree == 0:
                why = "the file system there holds as many files as it can"
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({why})", str(path))


def size_text(n: int) -> str:
    """A size for people: ``812 bytes``, ``1.3 MB``."""
    size: float = n  # the int itself while it is counted in bytes (no ".0")
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return str(size)


def _read_file(path: Path, spec: str) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays and the meta JSON of an rltrain dataset file."""
    suffix = _suffix(path, "read")
    arrays: dict[str, np.ndarray] = {}
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                names = set(z.files)
                for name in (*ARRAYS, *FRAME_ARRAYS):
                    if name in names:
                        arrays[name] = z[name]
                meta = str(z["meta"][()]) if "meta" in names else None
        except MemoryError:
            raise ConfigError(f"dataset {spec} declares arrays larger than the memory "
                              "available; it cannot be loaded here") from None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
            raise ConfigError(f"dataset {spec} is not a readable .npz file (damaged or "
                              f"truncated?): {_first_line(e)}") from None
    else:
        import h5py

        try:
            with h5py.File(path, "r") as f:
                for name in (*ARRAYS, *FRAME_ARRAYS):
                    if name not in f:
                        continue
                    _check_stored_here(f, name, spec)
                    if isinstance(f[name], h5py.Dataset):
                        arrays[name] = f[name][()]
                meta = f.attrs.get("meta")
        except ConfigError:
            raise
        except MemoryError:
            raise ConfigError(f"dataset {spec} declares arrays larger than the memory "
                              "available; it cannot be loaded here") from None
        except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:
            raise ConfigError(f"dataset {spec} is not a readable HDF5 file (damaged or "
                              f"truncated?): {_first_line(e)}") from None
        if isinstance(meta, bytes):
            meta = meta.decode("utf-8", "replace")
        elif meta is not None and not isinstance(meta, str):
            meta = str(meta)
    if all(name in arrays for name in FRAME_ARRAYS) and not {"obs", "next_obs"} & set(arrays):
        unchain_frames(arrays, spec)
    missing = [name for name in ARRAYS if name not in arrays]
    if len(missing) == len(ARRAYS):
        raise ConfigError(f"{spec} is not an rltrain dataset (it has none of the arrays "
                          f"{', '.join(ARRAYS)}); make one with rltrain-collect")
    if missing:
        raise ConfigError(f"dataset {spec} has no {' or '.join(missing)} array; an rltrain "
                          f"dataset holds {', '.join(ARRAYS)}")
    return arrays, meta


def _check_stored_here(f: Any, name: str, spec: str) -> None:
    """Every byte training reads must be in the file itself, so that its SHA-256 covers it:
    an array that is a link (to another file or place) or keeps its data in other files
    (external storage, a virtual dataset) is refused."""
    import h5py

    link = f.get(name, getlink=True)
    if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
        where = f"{link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink) \
            else link.path
        raise ConfigError(f"dataset {spec}: its {name} array is a link to {where}; rltrain reads "
                          "only data stored in the dataset file itself (its SHA-256 must cover "
                          "what training reads): write the arrays into the file")
    node = f[name]
    if isinstance(node, h5py.Dataset) and (node.external or node.is_virtual):
        what = "external storage" if node.external else "a virtual dataset"
        raise ConfigError(f"dataset {spec}: its {name} array uses {what}, keeping its data "
                          "in other files; rltrain reads only data stored in the dataset file "
                          "itself (its SHA-256 must cover what training reads)")


def _first_line(e: BaseException, limit: int = 160) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _validated(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], spec: str) -> Dataset:
    """Check what was read against rltrain's layout; one ConfigError naming ``spec`` and the
    first problem."""
    def bad(problem: str) -> ConfigError:
        return ConfigError(f"dataset {spec} {problem}")

    spaces, texts = {}, {}
    for key in ("observation_space", "action_space"):
        d = meta.get(key)
        if not isinstance(d, Mapping):
            raise bad(f"records no {key} in its meta; it was not written by rltrain-collect")
        try:
            spaces[key] = space_from_dict(d)
        except ValueError as e:
            raise bad(f"has a damaged {key} in its meta ({e})") from None
        texts[key] = space_text(d)
    lengths = {name: (len(a) if np.ndim(a) else 0) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} {count}" for name, count in lengths.items())
        raise bad(f"has arrays of unequal length ({shown}); every array needs one entry per "
                  "transition")
    if lengths["rew"] == 0:
        raise bad("holds no transitions")
    obs_space = spaces["observation_space"]
    try:
        obs_dtype, obs_shape = obs_storage(obs_space)
    except ConfigError as e:
        raise bad(f"has an observation space rltrain cannot store ({e})") from None
    for name in ("obs", "next_obs"):
        a = arrays[name]
        # uint8 storage (images, packed Dict rows) takes bytes (or bools, for an image);
        # anything else takes numbers, converted to float32
        fits = a.dtype.kind in "fiu" if obs_dtype != np.uint8 else a.dtype == np.uint8 or (
            a.dtype == np.bool_ and not isinstance(obs_space, gym.spaces.Dict))
        if a.shape[1:] != obs_shape or not fits:
            stored = "" if obs_shape == obs_space.shape and obs_dtype != np.uint8 else \
                f", stored as {obs_dtype} of shape {obs_shape}"
            raise bad(f"has {name} of shape {a.shape[1:]} and dtype {a.dtype}, but its "
                      f"observation space is {texts['observation_space']}{stored}")
        problem = _rows_problem(obs_space, a)
        if problem is None and isinstance(obs_space, gym.spaces.Box):
            problem = _beyond_bounds(obs_space, a)
        if problem is not None:
            raise bad(f"has {name} {problem}")
    act, act_space = arrays["act"], spaces["action_space"]
    if isinstance(act_space, gym.spaces.Discrete):
        if act.shape[1:] != () or act.dtype.kind not in "iu":
            raise bad(f"has act of shape {act.shape[1:]} and dtype {act.dtype}; its action "
                      f"space {act_space} needs one integer per transition")
        lo, hi = int(act_space.start), int(act_space.start + act_space.n)
        outside = (act < lo) | (act >= hi)
        if outside.any():
            raise bad(f"has action {int(act[outside][0])} outside its action space {act_space}")
    elif act.shape[1:] != act_space.shape or act.dtype.kind not in "fiu":
        raise bad(f"has act of shape {act.shape[1:]} and dtype {act.dtype}, but its action "
                  f"space is {texts['action_space']}")
    if arrays["rew"].ndim != 1 or arrays["rew"].dtype.kind not in "fiu":
        raise bad(f"has rew of shape {arrays['rew'].shape} and dtype {arrays['rew'].dtype}; "
                  "it needs one number per transition")
    for name in ("terminated", "truncated"):
        a = arrays[name]
        if a.ndim != 1 or not (a.dtype == bool or (a.dtype.kind in "iu" and
                                                   np.isin(a, (0, 1)).all())):
            raise bad(f"has {name} of shape {a.shape} and dtype {a.dtype}; it needs one bool "
                      "per transition")
    largest = float(np.finfo(np.float32).max)
    for name in ("obs", "next_obs", "act", "rew"):
        a = arrays[name]
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            where = int(np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0])
            raise bad(f"has a non-finite value in {name} (transition {where}); remove or "
                      "recollect it")
        if a.dtype.kind == "f" and a.dtype.itemsize > 4 and a.size:
            beyond = np.abs(a.reshape(len(a), -1)) > largest
            if beyond.any():
                where = int(np.flatnonzero(beyond.any(axis=1))[0])
                value = float(a.reshape(len(a), -1)[where][beyond[where]][0])
                raise bad(f"has {name} {value:g} (transition {where}), beyond float32's "
                          f"range (±{largest:.3g}) that rltrain trains in; rescale or remove "
                          "it")
    return make_dataset(arrays["obs"], arrays["act"], arrays["rew"], arrays["next_obs"],
                        arrays["terminated"], arrays["truncated"], meta=dict(meta))


#: rows scanned at a time for values beyond an integer space's bounds (a few MB of images)
_SCAN_ROWS = 1024


def _beyond_bounds(space: gym.spaces.Box, values: np.ndarray) -> str | None:
    """What lies outside an integer Box's bounds (an image's, or a uint8 Dict key's), or None.
    A network scales such values by the space's bounds (rltrain.encoders.image): a MinAtar
    frame holding 255 where its space says 1 reaches the network 255 times too bright, a
    silent wrong answer, so it is refused. Floats are not checked: many envs' vectors leave
    their declared bounds by design. Scanned in chunks, and not at all when the bounds are
    the dtype's own (nothing can lie beyond them)."""
    if values.dtype.kind not in "iub" or not len(values):
        return None
    low = np.broadcast_to(space.low, space.shape).reshape(-1)
    high = np.broadcast_to(space.high, space.shape).reshape(-1)
    info = np.iinfo(np.uint8 if values.dtype == np.bool_ else values.dtype)
    if (low <= info.min).all() and (high >= info.max).all():
        return None
    flat = values.reshape(len(values), -1)
    for start in range(0, len(flat), _SCAN_ROWS):
        chunk = flat[start:start + _SCAN_ROWS]
        wrong = (chunk < low) | (chunk > high)
        if wrong.any():
            row = int(np.flatnonzero(wrong.any(axis=1))[0])
            column = int(np.flatnonzero(wrong[row])[0])
            value = chunk[row, column]
            return (f"{int(value)} at transition {start + row}, outside its space's bounds "
                    f"[{low[column]:g}, {high[column]:g}] there: the network scales it by "
                    "those bounds, so it would see it wrongly; recollect the data, or fix the "
                    "space recorded with it")
    return None


def _rows_problem(space: gym.Space, rows: np.ndarray) -> str | None:
    """What is wrong in the packed rows of a Dict observation, which no dtype check sees: a
    Discrete, MultiDiscrete or MultiBinary key outside its space (its one-hot encoding would
    index past its size), or a non-finite number. None if nothing is (or ``space`` is no Dict)."""
    if not isinstance(space, gym.spaces.Dict):
        return None
    from rltrain.observations import DictLayout  # a Dict: torch is needed to train on it

    packing = DictLayout.of(space)
    records = np.ascontiguousarray(rows).view(packing.dtype).reshape(len(rows))
    for key in packing.keys:
        sub = packing.spaces[key]
        values = records[key].reshape(len(rows), -1)
        if isinstance(sub, gym.spaces.Box):
            if values.dtype.kind != "f":
                beyond = _beyond_bounds(sub, values)
                if beyond is not None:
                    return f"with key {key!r} {beyond}"
                continue
            wrong = ~np.isfinite(values)
        else:
            if isinstance(sub, gym.spaces.Discrete):
                low, high = np.int64(sub.start), np.int64(sub.start + sub.n)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                low = sub.start.reshape(-1).astype(np.int64)
                high = low + sub.nvec.reshape(-1).astype(np.int64)
            else:  # MultiBinary
                low, high = np.int64(0), np.int64(2)
            wrong = (values < low) | (values >= high)
        if wrong.any():
            where = int(np.flatnonzero(wrong.any(axis=1))[0])
            value = values[where][wrong[where]][0]
            if isinstance(sub, gym.spaces.Box):
                return (f"with a non-finite value in key {key!r} (transition {where}); remove "
                        "or recollect it")
            return (f"with key {key!r} {value} (transition {where}), outside its space "
                    f"{_text(sub)}; recollect it")
    return None


def load_dataset(spec: str, *, consent: bool = False) -> Dataset:
    """A dataset from an rltrain file (``.h5``, ``.hdf5``, ``.npz``) or a Minari dataset in
    local storage (``minari:ID``; ``MINARI_DATASETS_PATH`` chooses the storage). A Minari
    dataset whose env Minari would build from its recorded spec, with code other than
    gymnasium's, is refused unless ``consent`` (``trust=true``; :mod:`rltrain.trust`).

    :raises ConfigError: one line naming the file or id and what would be right.
    """
    spec = str(spec)
    if spec.startswith(MINARI_PREFIX):
        return _load_minari(spec[len(MINARI_PREFIX):], spec, consent)
    path = Path(spec)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"dataset {spec} does not exist; pass an .h5, .hdf5 or .npz file "
                          "written by rltrain-collect, or minari:ID") from None
    except OSError as e:
        raise ConfigError(f"dataset {spec} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ConfigError(f"dataset {spec} is {what}; pass an .h5, .hdf5 or .npz file "
                          "written by rltrain-collect, or minari:ID")
    arrays, meta_text = _read_file(path, spec)
    if meta_text is None:
        raise ConfigError(f"dataset {spec} has no meta record (env, spaces); it was not "
                          "written by rltrain-collect")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"dataset {spec} has a damaged meta record (not JSON: {e})") from None
    except RecursionError:
        raise ConfigError(f"dataset {spec} has a damaged meta record (JSON nested too deep "
                          "to read)") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"dataset {spec} has a damaged meta record (not a JSON object)")
    return _validated(arrays, meta, spec)


# --------------------------------------------------------------------------- Minari
def _minari(spec: str) -> Any:
    try:
        import minari
    except ImportError:
        raise ConfigError(f"{spec} needs the minari package, which is not installed: "
                          f"{MINARI_INSTALL} (in the rltrain repository)") from None
    return minari


def _minari_dir(dataset_id: str, spec: str) -> Path:
    """The local folder of a Minari dataset; ConfigError listing the local ids if none."""
    minari = _minari(spec)
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage.datasets_root_dir import get_dataset_path

    try:
        parse_dataset_id(dataset_id)
    except ValueError:
        raise ConfigError(f"{spec}: {dataset_id!r} is not a Minari dataset id (they read "
                          "[namespace/]name-vN, e.g. minari:D4RL/door/human-v2)") from None
    path = get_dataset_path(dataset_id)
    if not (path / "data").is_dir():
        with warnings.catch_warnings():  # a misconfigured neighbour is not this error
            warnings.simplefilter("ignore")
            local = sorted(minari.list_local_datasets())
        root = get_dataset_path()
        have = (f"local datasets: {', '.join(local[:10])}{', ...' if len(local) > 10 else ''}"
                if local else "there are no local datasets")
        raise ConfigError(f"{spec}: no Minari dataset {dataset_id!r} in {root} ({have}); "
                          "download it with `minari download ID`, or set MINARI_DATASETS_PATH")
    return path


def minari_surface(path: Path) -> list[str]:
    """What loading a Minari dataset would run beyond gymnasium: Minari builds the env from
    the recorded ``env_spec`` (its entry point and wrappers) when the metadata holds no
    spaces. Read from the JSON alone, nothing imported."""
    try:
        metadata = json.loads((path / "data" / "metadata.json").read_text())
    except (OSError, ValueError, RecursionError):
        return []  # Minari reports a damaged or missing file itself, building nothing
    if not isinstance(metadata, dict):
        return []
    if "observation_space" in metadata and "action_space" in metadata:
        return []
    items = []
    for key in ("env_spec", "eval_env_spec"):
        raw = metadata.get(key)
        try:
            spec = json.loads(raw) if isinstance(raw, str) else None
        except (ValueError, RecursionError):
            spec = None
        if not isinstance(spec, dict):
            continue
        points = [spec.get("entry_point")] + [
            w.get("entry_point") for w in spec.get("additional_wrappers") or []
            if isinstance(w, dict)]
        for point in points:
            if isinstance(point, str) and not point.startswith("gymnasium."):
                items.append(f"call {point} (the dataset's {key}, to build its env)")
    return items


def _load_minari(dataset_id: str, spec: str, consent: bool = False) -> Dataset:
    """Convert a local Minari dataset: each episode's T+1 observations and T actions,
    rewards, terminations and truncations become T transitions."""
    path = _minari_dir(dataset_id, spec)
    trust.check(minari_surface(path), f"dataset={spec} ({path})", consent=consent,
                allow="add trust=true to the command")
    minari = _minari(spec)
    try:
        data = minari.load_dataset(dataset_id)
    except Exception as e:  # noqa: BLE001 - minari's own errors are plain ValueError etc.
        raise ConfigError(f"{spec}: Minari could not load {path}: {_first_line(e)}") from None
    spaces = {}
    for key, what in (("observation_space", "observation"), ("action_space", "action")):
        space = getattr(data, key)
        allowed = (gym.spaces.Box, gym.spaces.Dict) if key == "observation_space" else (
            gym.spaces.Box, gym.spaces.Discrete)
        if not isinstance(space, allowed):
            kinds = "Box and Dict" if key == "observation_space" else "Box and Discrete"
            raise ConfigError(f"{spec} has a {type(space).__name__} {what} space; rltrain "
                              f"reads {kinds} {what}s")
        try:
            spaces[key] = describe_space(space)
        except ConfigError as e:
            raise ConfigError(f"{spec} has a {what} space rltrain cannot read: {e}") from None
    # a Dict observation: Minari gives each episode's as a dict of arrays; packed into rows
    # here as the collector packs an env's (rltrain.observations)
    packing = None
    if isinstance(data.observation_space, gym.spaces.Dict):
        from rltrain.observations import DictLayout, ObservationSpaceError

        try:
            packing = DictLayout.of(data.observation_space)
        except ObservationSpaceError as e:
            raise ConfigError(f"{spec}: {e}") from None
    fields: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS}
    try:
        for ep in data.iterate_episodes():
            o = (np.asarray(ep.observations) if packing is None
                 else packing.pack(ep.observations))
            t = len(ep.rewards)
            if t == 0:
                continue
            if len(o) != t + 1 or len(ep.actions) != t:
                raise ConfigError(f"{spec}: episode {ep.id} has {len(o)} observations and "
                                  f"{len(ep.actions)} actions for {t} rewards (expected "
                                  f"{t + 1} and {t})")
            term = np.asarray(ep.terminations, dtype=bool)
            trunc = np.asarray(ep.truncations, dtype=bool).copy()
            if not (term[-1] or trunc[-1]):  # the recording stopped mid-episode
                trunc[-1] = True
            for name, value in (("obs", o[:-1]), ("next_obs", o[1:]),
                                ("act", np.asarray(ep.actions)),
                                ("rew", np.asarray(ep.rewards)), ("terminated", term),
                                ("truncated", trunc)):
                fields[name].append(value)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged storage file
        raise ConfigError(f"{spec}: reading {path} failed: {_first_line(e)}") from None
    if not fields["rew"]:
        raise ConfigError(f"{spec} holds no transitions")
    env_spec = data.env_spec
    meta = new_meta(
        env_id=None if env_spec is None else env_spec.id,
        env_kwargs={} if env_spec is None else json_safe(dict(env_spec.kwargs or {})),
        **spaces,
        policy={"kind": "minari", "algorithm": json_safe(
            data.storage.metadata.get("algorithm_name"))},
        source=spec,
        minari_version=str(data.minari_version),
    )
    arrays = {name: np.concatenate(parts) for name, parts in fields.items()}
    return _validated(arrays, meta, spec)


def json_safe(obj: Any) -> Any:
    """JSON-safe: what json cannot write becomes its repr."""
    try:
        json.dumps(obj, allow_nan=False)
        return obj
    except (TypeError, ValueError):
        if isinstance(obj, dict):
            return {str(k): json_safe(v) for k, v in obj.items()}
        return repr(obj)


# --------------------------------------------------------------------------- fingerprint
def _hash_file(path: Path, h: Any, chunk: int = 1 << 20) -> None:
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)


def dataset_fingerprint(spec: str) -> dict[str, Any]:
    """What identifies a dataset's contents: ``{"spec", "path", "sha256"}``. The hash is
    of the file's bytes, or for ``minari:ID`` of the dataset folder's files (relative path
    and bytes, in sorted order); both are read in chunks."""
    spec = str(spec)
    h = hashlib.sha256()
    if spec.startswith(MINARI_PREFIX):
        path = _minari_dir(spec[len(MINARI_PREFIX):], spec).resolve()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(file.relative_to(path).as_posix().encode() + b"\0")
            _hash_file(file, h)
    else:
        path = Path(spec).resolve()
        if not path.is_file():
            raise ConfigError(f"dataset {spec} does not exist")
        _hash_file(path, h)
    return {"spec": spec, "path": str(path), "sha256": h.hexdigest()}


# --------------------------------------------------------------------------- buffers
def to_buffer(ds: Dataset, *, discrete: bool, action_low: np.ndarray | None,
              action_high: np.ndarray | None, frame_stack: int = 1) -> ReplayBuffer:
    """A one-lane replay buffer holding ``ds`` in order, for offline training.

    With ``frame_stack`` > 1 (a frame-stacked image env), the buffer stores a frame per
    transition when the rows are consecutive frame stacks, as the buffer checks on writing;
    rows that are not (a dataset merged from pieces cut mid-episode) are stored whole.

    Continuous actions are mapped into the algorithm's normalised space with
    :func:`rltrain.actions.to_agent`; integer ones (Discrete, MultiDiscrete, MultiBinary) are
    stored as int64 indices from 0 (the space's ``start`` taken off, where it has one). Each
    observation is stored once: the next observation of a transition is the next row's,
    except where the dataset says otherwise (an episode's end; rows that are not
    consecutive), which the buffer keeps aside, so batches see exactly ``ds.next_obs``. The
    n-step windows of :func:`rltrain.data.returns.nstep_batch` stop at ``terminated |
    truncated``, which :func:`make_dataset` guarantees at the end of every episode, the
    dataset's last included.
    """
    from rltrain.actions import integer_start, to_agent
    from rltrain.data.storage import ReplayBuffer

    is_discrete = ds.meta.get("action_space", {}).get("type") in INTEGER_ACTIONS
    if is_discrete != discrete:
        kind = "discrete" if is_discrete else "continuous"
        raise ConfigError(f"dataset has {kind} actions, but the algorithm was built for "
                          f"{'discrete' if discrete else 'continuous'} ones")
    if discrete:
        act = ds.act.astype(np.int64)
        start = integer_start(space_from_dict(ds.meta["action_space"]))
        if start is not None:
            act = act - start
    elif action_low is None or action_high is None:
        raise ValueError("continuous actions need action_low and action_high")
    else:
        act = to_agent(ds.act, action_low, action_high)
    if not len(ds):
        raise ConfigError("the dataset holds no transitions")
    # the buffer stores observations as the dataset does (make_dataset: images and Dict rows
    # uint8), as an online run's buffer stores the env's
    obs_dtype, obs_shape = obs_storage(space_from_dict(ds.meta["observation_space"]))
    if ds.obs.dtype != obs_dtype or ds.obs.shape[1:] != obs_shape:
        raise ValueError(f"dataset obs are {ds.obs.dtype} {ds.obs.shape[1:]}, but its "
                         f"observation space is stored as {obs_dtype} {obs_shape}")
    truncated = ds.truncated.copy()
    truncated[-1] |= not ds.terminated[-1]  # the data ends: so does its last episode
    for stack in dict.fromkeys((frame_stack, 1)):
        buffer = ReplayBuffer(1, len(ds), obs_shape, ds.act.shape[1:],
                              np.int64 if discrete else np.float32, obs_dtype=obs_dtype,
                              circular=True, frame_stack=stack)
        try:
            buffer.extend(*(a[:, None] for a in (ds.obs, act, ds.rew, ds.next_obs,
                                                 ds.terminated, truncated)))
        except ValueError:  # not consecutive frame stacks: store the observations whole
            if stack == 1:
                raise
            continue
        return buffer
    raise AssertionError("unreachable: frame_stack=1 stores any observation")


def from_replay_buffer(state: Mapping[str, Any], *, discrete: bool,
                       action_low: np.ndarray | None, action_high: np.ndarray | None,
                       meta: dict[str, Any]) -> Dataset:
    """A dataset from a replay buffer's ``state_dict()`` (the buffer in an off-policy
    run's checkpoint; today's format or the previous release's full-capacity one): lanes
    one after another, each in time order (oldest first), its last transition marked
    truncated when the episode was still running. Continuous actions go back to the env's
    space with :func:`rltrain.actions.to_env` (the buffer holds the algorithm's normalised
    actions), integer ones get the action space's ``start`` back (``meta["action_space"]``).

    The first episode of a lane that has wrapped around is a tail: its start was
    overwritten.

    :raises ConfigError: the buffer is empty. ValueError: its state is damaged (the field
        named; the caller names the checkpoint).
    """
    from rltrain.actions import integer_start, to_env
    from rltrain.data.state_format import stored_transitions

    out = stored_transitions(state)
    size = out.pop("size")
    if not size.sum():
        raise ConfigError("the replay buffer is empty")
    # each lane's last transition: cut there if its episode was still running (copies: the
    # checkpoint's state is left as it was)
    ends = np.cumsum(size)[size > 0] - 1
    truncated = out["truncated"].astype(bool)
    truncated[ends] |= ~out["terminated"][ends].astype(bool)
    out["truncated"] = truncated
    if not discrete:
        if action_low is None or action_high is None:
            raise ValueError("continuous actions need action_low and action_high")
        out["act"] = to_env(out["act"], action_low, action_high)
    else:
        start = integer_start(space_from_dict(meta["action_space"]))
        if start is not None:
            out["act"] = out["act"] + start
    return make_dataset(out["obs"], out["act"], out["rew"], out["next_obs"], out["terminated"],
                        out["truncated"], meta=meta)
