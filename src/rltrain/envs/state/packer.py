"""Live envs to packed plain data: one walk over ``vars()``, recursively (:class:`Packer`).

Objects offering ``state_dict()``/``load_state_dict()`` are captured through those; types with
a registered :class:`~rltrain.envs.state.adapters.StateAdapter` through it; constants (specs,
functions, classes, recorded constructor kwargs) are skipped. Values whose state lives where
``vars()`` cannot see it are reported in :attr:`Packer.not_captured`, never silently dropped.
A mutable object met a second time is packed as ``("alias", first_path)``; that keeps aliasing
and stops reference cycles.
"""

from __future__ import annotations

import collections
import enum
import random
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv

from rltrain.envs.state.adapters import NotCapturable, StateAdapter, known
from rltrain.envs.state.encoding import (
    BIT_GENERATORS,
    IMMUTABLE,
    PLAIN,
    PLAIN_BASICSIZE,
    SKIP,
    SKIPPED_ATTRS,
    has_protocol,
    is_constant,
    pack_array,
    subspaces,
    type_name,
)


class Packer:
    """One walk over live envs: packs values, remembers first paths, collects the gaps."""

    def __init__(self) -> None:
        #: the registry as it stands for this walk
        self.known = known()
        # id -> (first path, the object itself: kept alive so that no id is reused meanwhile)
        self.seen: dict[int, tuple[str, Any]] = {}
        self.not_captured: list[str] = []
        #: (id of the value, what its state leaves out), until the walk knows which values
        #: a record completes
        self.open_caveats: list[tuple[int, str]] = []
        #: ids of the values whose state a record beside them completes
        self.completed: set[int] = set()

    @property
    def caveats(self) -> list[str]:
        return [text for key, text in self.open_caveats if key not in self.completed]

    def uncaptured(self, path: str, value: Any, why: str = "") -> tuple:
        name = type_name(value) + (f": {why}" if why else "")
        self.not_captured.append(f"{path} ({name})")
        return ("uncaptured", name)

    def pack(self, value: Any, path: str) -> Any:
        """The packed form of ``value`` found at ``path``, or SKIP for a constant."""
        if type(value) in PLAIN:
            return value
        if isinstance(value, enum.Enum):  # by name: restored through the live value's type
            return ("enum", value.name) if value.name else self.uncaptured(path, value)
        if isinstance(value, np.generic):  # keeps its dtype: np.float32 arithmetic differs
            return ("npscalar", pack_array(np.asarray(value)))
        if is_constant(value, self.known.constant):
            return SKIP
        if not isinstance(value, IMMUTABLE):
            first = self.seen.get(id(value))
            if first is not None:
                return ("alias", first[0])
            self.seen[id(value)] = (path, value)
        return self._pack_new(value, path)

    def _pack_new(self, value: Any, path: str) -> Any:
        if (adapter := self.known.adapters.get(type(value))) is not None:
            return self._pack_adapted(adapter, value, path)
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return self.uncaptured(path, value, "object array")
            return pack_array(value)
        if isinstance(value, torch.Tensor):
            return ("tensor", value.detach().cpu().clone())
        if isinstance(value, (np.random.Generator, np.random.RandomState)):
            return self._pack_rng(value, path)
        if isinstance(value, random.Random):
            try:
                return ("random", value.getstate())  # (int, tuple of ints, float | None)
            except NotImplementedError:  # SystemRandom has no state to save
                return self.uncaptured(path, value)
        if isinstance(value, gym.spaces.Space):
            return self._pack_space(value, path)
        if isinstance(value, AsyncVectorEnv):
            return self.uncaptured(path, value, "sub-envs run in other processes")
        if has_protocol(value):
            state = self.pack(value.state_dict(), f"{path}.state_dict()")
            return ("protocol", type_name(value), ("skipped",) if state is SKIP else state)
        if isinstance(value, dict):
            return ("dict", [[self.pack(k, f"{path}.keys()"), self._item(v, f"{path}[{k!r}]")]
                             for k, v in value.items()
                             if not is_constant(k, self.known.constant)])
        if isinstance(value, (list, tuple, collections.deque)):
            items = [self._item(v, f"{path}[{i}]") for i, v in enumerate(value)]
            if isinstance(value, collections.deque):
                return ("deque", items, value.maxlen)
            return ("list" if isinstance(value, list) else "tuple", items)
        if isinstance(value, (set, frozenset)):
            items = [self.pack(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return ("set", [v for v in items if v is not SKIP], isinstance(value, frozenset))
        if isinstance(value, np.dtype):
            return ("dtype", value.str if value.fields is None else value.descr)
        return self._pack_object(value, path)

    def _item(self, value: Any, path: str) -> Any:
        packed = self.pack(value, path)
        return ("skipped",) if packed is SKIP else packed  # keeps the positions of the others

    def _pack_rng(self, value: np.random.Generator | np.random.RandomState, path: str) -> Any:
        if isinstance(value, np.random.Generator):
            tag, state, where = "generator", value.bit_generator.state, "bit_generator.state"
        else:
            tag, state, where = "randomstate", value.get_state(legacy=False), "state"
        if state["bit_generator"] not in BIT_GENERATORS:
            return self.uncaptured(path, value, "a bit generator restore would not build")
        return (tag, self.pack(state, f"{path}.{where}"))

    def _pack_adapted(self, adapter: StateAdapter, value: Any, path: str) -> tuple:
        """A value of a type with an adapter: its state through the adapter, as ``("cstate",
        name, packed data)``; its caveat, unless a record beside it completes it."""
        try:
            data = adapter.capture(value)
        except NotCapturable as e:
            return self.uncaptured(path, value, str(e))
        caveat = adapter.caveat(value)
        if caveat is not None:
            self.open_caveats.append((id(value), f"{path} ({type_name(value)}: {caveat})"))
        if (completed := adapter.completes(value)) is not None:
            # its id stays that object's: the value, kept alive in self.seen, holds it
            self.completed.add(id(completed))
        return ("cstate", adapter.name, self.pack(data, f"{path}.<{adapter.name} state>"))

    def _pack_space(self, space: gym.spaces.Space, path: str) -> tuple:
        """A space is configuration, except for its RNG (which sample() draws from)."""
        rng = space._np_random  # the np_random property would create one
        children = {key: self.pack(sub, f"{path}.{key}") for key, sub in subspaces(space).items()}
        return ("space", type_name(space),
                None if rng is None else self.pack(rng, f"{path}.np_random"), children)

    def _pack_object(self, value: Any, path: str) -> tuple:
        attrs = getattr(value, "__dict__", None)
        if (not isinstance(attrs, dict) or type(value).__basicsize__ > PLAIN_BASICSIZE
                or type(attrs.get("this")).__name__ == "SwigPyObject"):
            # the state lives in C (or in slots): vars() would look empty or partial
            return self.uncaptured(path, value)
        packed = {}
        for attr, v in attrs.items():
            if attr not in SKIPPED_ATTRS and (p := self.pack(v, f"{path}.{attr}")) is not SKIP:
                packed[attr] = p
        return ("object", type_name(value), packed)
