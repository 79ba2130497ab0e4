"""Packed plain data back into live envs, in place: one walk over a packed state and the live
envs side by side (:class:`Restorer`).

Restoring imports and constructs nothing named by the state: the handlers are a fixed table
keyed by tag; enum members, object types, bit generators and adapted types are looked up
through the live objects or fixed tables (:mod:`rltrain.envs.state.encoding`, the registry of
:mod:`rltrain.envs.state.adapters`). A live object that the state holds as two is restored as
two. A bad or mismatched state gives problems, each naming its path, never an exception.
"""

from __future__ import annotations

import collections
import enum
import random
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.common.moved import current_name
from rltrain.envs.state.adapters import known
from rltrain.envs.state.encoding import (
    IMMUTABLE,
    IN_PLACE,
    KEEP,
    MISSING,
    PLAIN,
    bit_generator,
    dtype,
    found,
    has_protocol,
    is_constant,
    subspaces,
    type_name,
    unpack_array,
)

#: the tags whose packed value names a type by ``module.qualname``
NAMED = frozenset({"space", "protocol", "object"})


class Restorer:
    """One walk over a packed state and the live envs side by side, collecting problems.

    The handlers are a fixed table keyed by tag: nothing in the state chooses code to run.
    """

    def __init__(self) -> None:
        #: the registry as it stands for this walk
        self.known = known()
        self.problems: list[str] = []
        #: path -> the live object restored there, for the aliases that refer to it
        self.restored: dict[str, Any] = {}
        #: id -> each live object already written into in place (kept alive meanwhile)
        self.claimed: dict[int, Any] = {}
        self.handlers: dict[str, Callable[..., Any]] = {
            "alias": self._alias, "uncaptured": self._uncaptured, "skipped": self._skipped,
            "enum": self._enum, "npscalar": self._npscalar, "array": self._array,
            "tensor": self._tensor, "generator": self._generator,
            "randomstate": self._randomstate, "random": self._random, "space": self._space,
            "protocol": self._protocol, "dict": self._dict, "list": self._list,
            "tuple": self._tuple, "deque": self._deque, "set": self._set,
            "dtype": self._dtype_value, "object": self._object, "cstate": self._c_state,
        }

    def problem(self, path: str, message: str) -> object:
        self.problems.append(f"{path}: {message}")
        return KEEP

    def unpack(self, packed: Any, live: Any, path: str) -> Any:
        """The value to hold at ``path``: ``live`` itself restored in place where it allows,
        a new value, or KEEP (leave the live value; any problem is recorded)."""
        if not isinstance(packed, tuple):
            if type(packed) in PLAIN:
                return packed
            return self.problem(path, f"malformed state ({type(packed).__name__})")
        handler = self.handlers.get(packed[0]) if packed and isinstance(packed[0], str) else None
        if handler is None:
            return self.problem(path, f"malformed state (tag {packed[:1]!r})")
        if packed[0] in NAMED and len(packed) > 1 and isinstance(packed[1], str):
            # a type saved by its module's former path (rltrain.wrappers.MaskVelocity, in a
            # run made before rltrain's modules moved) is matched by its path now
            packed = (packed[0], current_name(packed[1]), *packed[2:])
        if packed[0] in IN_PLACE:
            live = self._claim(live)
        try:
            return handler(path, live, *packed[1:])
        except Exception as exc:  # a bad state is a problem to report, never a crash
            return self.problem(path, f"malformed state ({type(exc).__name__}: {exc})")

    def _claim(self, live: Any) -> Any:
        """``live`` to be written into in place, or MISSING when an earlier path was already
        written into it. The snapshot holds distinct objects there, and the live envs one: a
        frame stack's queue just after a reset holds one array four times, and writing the
        four saved frames into it in turn would leave the last frame in all four places."""
        if live is MISSING or type(live) in PLAIN or isinstance(live, IMMUTABLE):
            return live
        if id(live) in self.claimed:
            return MISSING
        self.claimed[id(live)] = live
        return live

    def _alias(self, path: str, live: Any, first: str) -> Any:
        if first not in self.restored:
            return self.problem(path, f"refers to {first}, which was not restored")
        return self.restored[first]

    def _uncaptured(self, path: str, live: Any, name: str) -> Any:
        if live is not MISSING:
            self.restored[path] = live
        return self.problem(path, f"not captured in the snapshot ({name}); left as it is")

    def _skipped(self, path: str, live: Any) -> Any:
        return self.problem(path, "a constant, and no live value") if live is MISSING else KEEP

    def _enum(self, path: str, live: Any, name: str) -> Any:
        if isinstance(live, enum.Enum) and name in type(live).__members__:
            return type(live).__members__[name]
        return self.problem(path, f"enum member {name!r} not found through the live value "
                                  f"({found(live)})")

    def _npscalar(self, path: str, live: Any, array: tuple) -> Any:
        if not (isinstance(array, tuple) and array[:1] == ("array",)):
            raise TypeError("bad scalar")
        return unpack_array(*array[1:])[()]

    def _array(self, path: str, live: Any, *data: Any) -> Any:
        array = unpack_array(*data)
        if (isinstance(live, np.ndarray) and live.shape == array.shape
                and live.dtype == array.dtype and live.flags.writeable):
            live[...] = array  # in place: views and other references see the restored data
            array = live
        self.restored[path] = array
        return array

    def _tensor(self, path: str, live: Any, data: Any) -> Any:
        if not isinstance(data, torch.Tensor):
            raise TypeError("bad tensor")
        if isinstance(live, torch.Tensor) and live.shape == data.shape and live.dtype == data.dtype:
            with torch.no_grad():
                live.copy_(data)
            data = live
        else:
            data = data.clone()  # never share memory with the state
        self.restored[path] = data
        return data

    def _generator(self, path: str, live: Any, packed: Any) -> Any:
        state = self.unpack(packed, MISSING, f"{path}.bit_generator.state")
        if state is KEEP:
            return KEEP
        cls = bit_generator(state)
        if not (isinstance(live, np.random.Generator) and type(live.bit_generator) is cls):
            live = np.random.Generator(cls())
        live.bit_generator.state = state
        self.restored[path] = live
        return live

    def _randomstate(self, path: str, live: Any, packed: Any) -> Any:
        state = self.unpack(packed, MISSING, f"{path}.state")
        if state is KEEP:
            return KEEP
        cls = bit_generator(state)
        if not (isinstance(live, np.random.RandomState)
                and live.get_state(legacy=False)["bit_generator"] == cls.__name__):
            live = np.random.RandomState(cls())
        live.set_state(state)
        self.restored[path] = live
        return live

    def _random(self, path: str, live: Any, state: Any) -> Any:
        if not isinstance(live, random.Random):
            live = random.Random()
        live.setstate(state)  # validates the state: raises on anything malformed
        self.restored[path] = live
        return live

    def _space(self, path: str, live: Any, name: str, rng: Any, children: dict) -> Any:
        if not isinstance(live, gym.spaces.Space) or type_name(live) != name:
            return self.problem(path, f"expected a {name}, the live value is {found(live)}")
        self.restored[path] = live
        if rng is not None:
            generator = self.unpack(rng, live.np_random, f"{path}.np_random")
            if generator is not KEEP and generator is not live.np_random:
                live._np_random = generator  # a Space has no public way to replace its RNG
        live_children = subspaces(live)
        for key, packed in children.items():
            if key not in live_children:
                self.problem(f"{path}.{key}", "the live space has no such sub-space")
            else:
                self.unpack(packed, live_children[key], f"{path}.{key}")
        return live

    def _c_state(self, path: str, live: Any, name: str, packed: Any) -> Any:
        """A value captured through its adapter: written back through the live type's."""
        adapter = self.known.adapters.get(type(live))
        if adapter is None or adapter.name != name:
            return self.problem(path, f"expected a {name}, the live value is {found(live)}")
        self.restored[path] = live
        data = self.unpack(packed, MISSING, f"{path}.<{name} state>")
        if data is KEEP:  # the problem is recorded
            return KEEP
        if not isinstance(data, dict):
            return self.problem(path, f"malformed {name} state")
        for problem in adapter.restore(live, data):
            self.problem(path, f"{problem}; left as it is")
        return live

    def _protocol(self, path: str, live: Any, name: str, packed: Any) -> Any:
        if live is MISSING or type_name(live) != name or not has_protocol(live):
            return self.problem(path, f"expected a {name} with load_state_dict(), the live "
                                      f"value is {found(live)}")
        self.restored[path] = live
        # the live state_dict() is the live counterpart: it gives enum members their type
        state = self.unpack(packed, live.state_dict(), f"{path}.state_dict()")
        if state is not KEEP:
            live.load_state_dict(state)
        return live

    def _key(self, packed: Any, candidates: Any, path: str) -> Any:
        """A dict key or set element; an enum member is found among the live ones."""
        if isinstance(packed, tuple) and packed[:1] == ("enum",) and len(packed) == 2:
            for candidate in candidates:
                if isinstance(candidate, enum.Enum) and packed[1] in type(candidate).__members__:
                    return type(candidate).__members__[packed[1]]
            return self.problem(path, f"enum member {packed[1]!r}: no live enum of it")
        return self.unpack(packed, MISSING, path)

    def _dict(self, path: str, live: Any, items: list) -> Any:
        target = live if isinstance(live, dict) else {}
        self.restored[path] = target
        new = {}
        for packed_key, packed_value in items:
            key = self._key(packed_key, list(target), f"{path}.keys()")
            if key is KEEP:
                return KEEP
            old = target.get(key, MISSING)
            value = self.unpack(packed_value, old, f"{path}[{key!r}]")
            if (value := old if value is KEEP else value) is MISSING:
                return KEEP
            new[key] = value
        kept = [(k, v) for k, v in target.items() if is_constant(k, self.known.constant)]
        target.clear()
        target.update(new)
        target.update(kept)
        return target

    def _items(self, path: str, live_items: list, items: list) -> list | None:
        """The restored items of a sequence, paired by position with the live ones where their
        numbers agree; None when one can be neither restored nor kept."""
        if len(live_items) != len(items):
            live_items = [MISSING] * len(items)
        new = [self.unpack(p, old, f"{path}[{i}]")
               for i, (p, old) in enumerate(zip(items, live_items, strict=True))]
        new = [old if v is KEEP else v for v, old in zip(new, live_items, strict=True)]
        return None if any(v is MISSING for v in new) else new

    def _list(self, path: str, live: Any, items: list) -> Any:
        target = live if isinstance(live, list) else []
        self.restored[path] = target
        if (new := self._items(path, list(target), items)) is None:
            return KEEP
        target[:] = new
        return target

    def _deque(self, path: str, live: Any, items: list, maxlen: int | None) -> Any:
        ok = isinstance(live, collections.deque) and live.maxlen == maxlen
        target = live if ok else collections.deque(maxlen=maxlen)
        self.restored[path] = target
        if (new := self._items(path, list(target), items)) is None:
            return KEEP
        target.clear()
        target.extend(new)
        return target

    def _tuple(self, path: str, live: Any, items: list) -> Any:
        old = list(live) if isinstance(live, tuple) else []
        if (new := self._items(path, old, items)) is None:
            return KEEP
        if isinstance(live, tuple) and len(new) == len(old):
            if all(a is b for a, b in zip(new, old, strict=True)):
                return live  # unchanged: keep the very tuple
            if hasattr(type(live), "_fields") and hasattr(live, "_make"):  # a namedtuple
                return live._make(new)  # stays one, of the live type (not a name from the file)
        return tuple(new)

    def _set(self, path: str, live: Any, items: list, frozen: bool) -> Any:
        candidates = list(live) if isinstance(live, (set, frozenset)) else []
        new = [self._key(p, candidates, f"{path}[{i}]") for i, p in enumerate(items)]
        if any(v is KEEP for v in new):
            return KEEP
        new += [v for v in candidates if is_constant(v, self.known.constant)]
        if frozen:
            return live if isinstance(live, frozenset) and live == set(new) else frozenset(new)
        target = live if isinstance(live, set) else set()
        target.clear()
        target.update(new)
        self.restored[path] = target
        return target

    def _dtype_value(self, path: str, live: Any, spec: Any) -> Any:
        return dtype(spec)

    def _object(self, path: str, live: Any, name: str, attrs: dict) -> Any:
        if live is MISSING or type_name(live) != name or not isinstance(
                getattr(live, "__dict__", None), dict):
            rebuildable = self.known.rebuildable.get(name)
            if rebuildable is None:
                return self.problem(path, f"expected a {name}, the live value is {found(live)}")
            # a plain value object the envs make as they go (a MiniGrid key in another
            # episode's grid): made bare, every attribute comes from the state below
            live = object.__new__(rebuildable)
            self.claimed[id(live)] = live
        self.restored[path] = live
        live_attrs = vars(live)
        for attr, packed in attrs.items():
            old = live_attrs.get(attr, MISSING)
            value = self.unpack(packed, old, f"{path}.{attr}")
            if value is not KEEP and value is not old:
                live_attrs[attr] = value
        return live
