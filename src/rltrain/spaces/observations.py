"""What an observation is on its way from the env to a network: how it is stored and how it
becomes tensors. Imports no other rltrain module.

- A vector (a Box of floats, or of integers such as an Atari RAM) is stored as float32 and
  reaches the networks as float32, as it always has.
- An image (a Box with three axes of uint8 or bool values, HWC or CHW) stays uint8: in the
  buffer, in datasets, on its way to the device. The encoder scales it inside the network
  (:mod:`rltrain.nets.encoders.image`), so the deployable policy and its ONNX graph take the
  env's own observation.
- A Dict observation is packed, per env, into one row of bytes laid out as a numpy
  structured dtype with one field per key (each at its own dtype: an image key stays
  uint8, a Discrete key is one int64). Buffers, datasets, checkpoints and the collector
  hold such rows as plain ``uint8`` arrays ``(n, row_bytes)`` and never look inside; the
  algorithm unpacks them into a dict of tensors (:meth:`DictLayout.unpack_torch`) for the
  dict encoder. The deployable policy takes one tensor per key, so an exported graph's
  inputs are named after the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

#: the numpy dtype a Discrete or MultiDiscrete key is stored as
INDEX_DTYPE = np.dtype(np.int64)


class ObservationSpaceError(ValueError):
    """An observation space rltrain cannot take, with what would work instead."""


def is_image(space: gym.Space) -> bool:
    """A Box of uint8 (or bool) values with three axes: an image, HWC or CHW."""
    return (isinstance(space, gym.spaces.Box) and len(space.shape) == 3
            and space.dtype in (np.uint8, np.bool_))


def is_dict(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict)


def _key_dtype(key: str, space: gym.Space) -> tuple[np.dtype, tuple[int, ...]]:
    """How one key of a Dict observation is stored: its dtype and shape."""
    if isinstance(space, gym.spaces.Box):
        kind = np.dtype(space.dtype)
        dtype = kind if kind in (np.uint8, np.bool_) else np.dtype(np.float32)
        return (np.dtype(np.uint8) if dtype == np.bool_ else dtype), tuple(space.shape)
    if isinstance(space, gym.spaces.Discrete):
        return INDEX_DTYPE, ()
    if isinstance(space, gym.spaces.MultiDiscrete):
        return INDEX_DTYPE, tuple(space.shape)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(np.uint8), tuple(np.atleast_1d(space.shape))
    hint = ("drop it with env.wrappers=[{name: gymnasium.wrappers.FilterObservation, kwargs: "
            "{filter_keys: [...]}}]")
    if isinstance(space, gym.spaces.Text) or type(space).__name__ == "MissionSpace":
        hint = ("rltrain does not encode text; " + hint
                + " (env=minigrid drops MiniGrid's mission for you)")
    raise ObservationSpaceError(f"observation key {key!r} is a {type(space).__name__}, which "
                                f"rltrain cannot store; it takes Box, Discrete, MultiDiscrete "
                                f"and MultiBinary keys: {hint}")


@dataclass(frozen=True)
class DictLayout:
    """How a Dict observation is packed into one row of bytes per env."""

    #: the keys, in the Dict space's order (the deployable policy's inputs, in this order)
    keys: tuple[str, ...]
    #: the structured dtype of one row (one field per key)
    dtype: np.dtype
    #: each key's subspace
    spaces: Mapping[str, gym.Space]

    @classmethod
    def of(cls, space: gym.spaces.Dict) -> DictLayout:
        fields = []
        for key, sub in space.spaces.items():
            if not isinstance(key, str):
                raise ObservationSpaceError(f"observation key {key!r} is not a string")
            if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
                raise ObservationSpaceError(
                    f"observation key {key!r} is itself a {type(sub).__name__}; rltrain takes "
                    "one level of keys: flatten the inner one with a wrapper in env.wrappers")
            dtype, shape = _key_dtype(key, sub)
            fields.append((key, dtype, shape))
        if not fields:
            raise ObservationSpaceError("the Dict observation space has no keys")
        return cls(tuple(f[0] for f in fields), np.dtype(fields), dict(space.spaces))

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize

    def pack(self, obs: Mapping[str, Any]) -> np.ndarray:
        """A batch of dict observations (each key ``(n, *shape)``) as ``(n, row_bytes)``
        uint8 rows."""
        n = len(np.asarray(obs[self.keys[0]]))
        rows = np.empty(n, dtype=self.dtype)
        for key in self.keys:
            rows[key] = np.asarray(obs[key]).reshape(rows[key].shape)
        return rows.view(np.uint8).reshape(n, self.row_bytes)

    def pack_one(self, obs: Mapping[str, Any]) -> np.ndarray:
        """One dict observation (no batch axis) as a ``(row_bytes,)`` row."""
        return self.pack({k: np.asarray(obs[k])[None] for k in self.keys})[0]

    def unpack(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """``(n, row_bytes)`` rows back into a dict of ``(n, *shape)`` arrays (copies)."""
        records = np.ascontiguousarray(rows).view(self.dtype).reshape(len(rows))
        return {key: records[key].copy() for key in self.keys}

    def unpack_torch(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(n, row_bytes)`` uint8 rows (on any device) into a dict of tensors, each key at
        its stored dtype and shape (uint8 images stay uint8: the encoder scales them)."""
        out = {}
        n = rows.shape[0]
        for key in self.keys:
            dtype, offset = self.dtype.fields[key][:2]  # type: ignore[index]
            base, shape = dtype.base, dtype.shape
            part = _packed(rows[:, offset : offset + dtype.itemsize])
            out[key] = part.view(TORCH_DTYPES[base]).reshape(n, *shape)
        return out


def _packed(part: torch.Tensor) -> torch.Tensor:
    """``part`` with its rows back to back (strides ``(width, 1)``), as reinterpreting its
    bytes as a wider dtype needs. ``Tensor.contiguous()`` is not enough: a slice of one row
    (one env) already counts as contiguous, since a stride along an axis of size 1 is never
    used, and keeps the parent's row stride, which ``view(dtype)`` then refuses."""
    width = part.shape[1]
    if part.stride() == (width, 1):
        return part
    return part.clone(memory_format=torch.contiguous_format)


#: numpy storage dtypes and their torch equivalents
TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32,
                INDEX_DTYPE: torch.int64}


def layout(space: gym.Space | None) -> DictLayout | None:
    """The packing of a Dict observation space; None for any other space."""
    return DictLayout.of(space) if isinstance(space, gym.spaces.Dict) else None


def describe(space: gym.Space, shape: tuple[int, ...]) -> str:
    """A short text for the log: ``(4, 84, 84) uint8``, ``(3,)``, ``Dict(image (7, 7, 3)
    uint8, direction Discrete(4))``."""
    packing = layout(space)
    if packing is not None:
        parts = []
        for key in packing.keys:
            sub = packing.spaces[key]
            parts.append(f"{key} {sub}" if not isinstance(sub, gym.spaces.Box)
                         else f"{key} {tuple(sub.shape)} {np.dtype(sub.dtype).name}")
        return f"Dict({', '.join(parts)})"
    return f"{shape} uint8" if storage_dtype(space) == np.uint8 else str(shape)


def storage_dtype(space: gym.Space | None) -> np.dtype:
    """The dtype observations of ``space`` are stored in: uint8 for images and packed dicts,
    float32 for everything else (a vector of integers is stored as the floats the networks
    read)."""
    if space is not None and (is_image(space) or is_dict(space)):
        return np.dtype(np.uint8)
    return np.dtype(np.float32)


def stored_shape(space: gym.Space) -> tuple[int, ...]:
    """The shape of one stored observation: the space's, or ``(row_bytes,)`` for a Dict."""
    packing = layout(space)
    return (packing.row_bytes,) if packing is not None else tuple(space.shape or ())


def raw_tensors(space: gym.Space | None) -> bool:
    """Whether observations reach the encoder as stored (uint8 images, packed dicts) rather
    than as float32 vectors."""
    return storage_dtype(space) == np.uint8


class Packer:
    """Turns what a vector env returns into stored observations: dicts are packed into rows,
    anything else passes through."""

    def __init__(self, space: gym.Space) -> None:
        self.layout = layout(space)

    def __call__(self, obs: Any) -> Any:
        return obs if self.layout is None else self.layout.pack(obs)

    def final(self, finals: Any) -> np.ndarray:
        """The final observations gymnasium puts in ``info["final_obs"]`` (an object array
        of per-env observations) as one stored batch."""
        if self.layout is None:
            return np.stack(finals)
        return np.stack([self.layout.pack_one(f) for f in finals])
