"""The packed form of env state, shared by the two walks (:mod:`.packer` and :mod:`.restorer`).

A packed value is a bool/int/float/str/None as is, or a tuple ``(tag, ...)``: arrays as typed
tensors or raw bytes, bit generators by a name from a fixed table, the rest by the tags the
walks know. Nothing here imports or constructs anything a state names: dtypes holding objects
and bit generators outside :data:`BIT_GENERATORS` are refused.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec, WrapperSpec

PLAIN = (bool, int, float, str, type(None))
#: configuration, not state: skipped without a report
CONSTANT = (EnvSpec, WrapperSpec, type, types.ModuleType, functools.partial,
            types.FunctionType, types.BuiltinFunctionType, types.MethodType,
            types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
            staticmethod, classmethod)
#: gymnasium's record of constructor arguments (constant, and may hold anything)
SKIPPED_ATTRS = frozenset({"_saved_kwargs"})
#: immutable: the same object reached twice needs no alias
IMMUTABLE = (tuple, frozenset, np.dtype)
#: the only bit generators a restore will build: never looked up by a name from the file
BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM,
                                                 np.random.MT19937, np.random.Philox,
                                                 np.random.SFC64)}
# Instances of a class written in Python without __slots__ have this size. A larger one means
# the class, or a C base of it (ctypes, pybind11, float...), keeps state outside __dict__.
PLAIN_BASICSIZE = type("_Probe", (), {}).__basicsize__
SKIP = object()  # pack(): a constant, leave it out
KEEP = object()  # unpack(): leave the live value as it is
MISSING = object()  # unpack(): there is no live value
#: the tags whose handlers write into the live value in place (or make a new one without it)
IN_PLACE = frozenset({"array", "tensor", "generator", "randomstate", "random", "dict", "list",
                      "deque", "set", "object"})


def type_name(value: Any) -> str:
    """``module.qualname`` of the value's type: how states, gaps and problems name it."""
    return f"{type(value).__module__}.{type(value).__qualname__}"


def found(live: Any) -> str:
    """What restore found where the state expected something (for problem messages)."""
    return "missing" if live is MISSING else type_name(live)


def is_constant(value: Any, constant: tuple[type, ...]) -> bool:
    """Configuration, e.g. SyncVectorEnv.env_fns (a list of functions), MuJoCo's MjModel;
    ``constant``: :data:`CONSTANT` and the registered C-backed constant types."""
    if isinstance(value, list) and value:
        return all(isinstance(v, constant) for v in value)
    return isinstance(value, constant)


def has_protocol(value: Any) -> bool:
    """The value saves and loads itself: ``state_dict()`` and ``load_state_dict()``."""
    # looked up on the type: gym.Wrapper-like __getattr__ forwarding must not answer for it
    cls = type(value)
    return callable(getattr(cls, "state_dict", None)) and callable(
        getattr(cls, "load_state_dict", None))


def subspaces(space: gym.spaces.Space) -> dict[str, gym.spaces.Space]:
    """The spaces inside a composite space (Dict, Tuple, Sequence...): each has its own RNG."""
    out: dict[str, gym.spaces.Space] = {}
    for attr, value in vars(space).items():
        if isinstance(value, gym.spaces.Space):
            out[attr] = value
        elif isinstance(value, (tuple, list)):
            out.update({f"{attr}[{i}]": s for i, s in enumerate(value)
                        if isinstance(s, gym.spaces.Space)})
        elif isinstance(value, dict):
            out.update({f"{attr}[{k!r}]": s for k, s in value.items()
                        if isinstance(s, gym.spaces.Space)})
    return out


def pack_array(a: np.ndarray) -> tuple:
    """A typed tensor where torch has the dtype (readable), else the raw bytes: exact for all."""
    spec = a.dtype.str if a.dtype.fields is None else a.dtype.descr
    data = np.array(a, copy=True, order="C")
    if a.dtype.isnative and a.dtype.fields is None:
        try:
            tensor = torch.from_numpy(data)
        except TypeError:  # a dtype torch lacks (strings, datetimes, long double...)
            tensor = None
        if tensor is not None and tensor.numpy().dtype == a.dtype:
            return ("array", spec, list(a.shape), tensor, False)
    raw = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=np.uint8).copy())
    return ("array", spec, list(a.shape), raw, True)


def dtype(spec: Any) -> np.dtype:
    """The dtype a state names; never one holding objects."""
    if not isinstance(spec, (str, list)):
        raise TypeError(f"bad dtype {spec!r}")
    kind = np.dtype(spec)
    if kind.hasobject:  # object arrays could only hold pickled objects: never built
        raise ValueError(f"object dtype {spec!r} refused")
    return kind


def unpack_array(spec: Any, shape: Any, data: Any, raw: Any) -> np.ndarray:
    """The array :func:`pack_array` packed, checked against its dtype and shape."""
    kind = dtype(spec)
    if not (isinstance(data, torch.Tensor) and isinstance(shape, list)
            and all(type(n) is int and n >= 0 for n in shape)):
        raise TypeError("bad array data")
    array = data.detach().cpu().numpy()
    if raw:
        if array.dtype != np.uint8 or array.size != kind.itemsize * int(np.prod(shape)):
            raise ValueError("raw array data of the wrong size")
        return np.frombuffer(array.tobytes(), dtype=kind).reshape(shape).copy()
    if array.dtype != kind or list(array.shape) != shape:
        raise ValueError("array data of the wrong dtype or shape")
    return array.copy()


def bit_generator(state: Any) -> type:
    """The bit generator class a generator state names, from a fixed table only."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if not isinstance(name, str) or name not in BIT_GENERATORS:
        raise ValueError(f"bit generator {name!r} refused")
    return BIT_GENERATORS[name]
