"""State the walker cannot see, captured through its library: the adapter protocol and its
registry.

The walker reads state off ``vars()``. Some envs keep theirs where ``vars()`` cannot see it:
in C (MuJoCo's ``MjData``, ALE's emulator), behind ``__slots__`` or an opaque handle. Where the
library offers an API to read and write that state as numbers, a :class:`StateAdapter` says
how; without one, such a value is *reported* as not captured (:attr:`Snapshot.not_captured
<rltrain.envs.state.api.Snapshot.not_captured>`), never silently dropped.

An adapter names its type by module and name, and the registry looks the type up in
``sys.modules`` when a walk starts (:func:`known`): registering an adapter imports nothing, so
rltrain runs without the mujoco or atari extras, and an adapter whose library no env imported
simply matches nothing. Matching is by exact type.

The env families rltrain knows register their adapters in :mod:`rltrain.envs.state.families`
(one module each); an env of one's own may register its own, e.g. in the module that
registers the env::

    from rltrain.envs.state.adapters import StateAdapter, register

    class DialState(StateAdapter):
        name = "mylib.Dial"            # in the checkpoint: never change it
        module, type_name = "mylib", "Dial"

        def capture(self, dial):
            return {"angle": np.array(dial.angle())}

        def restore(self, dial, saved):
            if not isinstance(saved.get("angle"), np.ndarray):
                return ["not a Dial state"]
            dial.set_angle(float(saved["angle"]))
            return []

    register(DialState())

Two more kinds of fact a family may declare: C-backed *configuration* that is skipped like a
spec (:func:`register_constant`, MuJoCo's compiled ``MjModel``), and plain Python classes a
restore may make where the live envs hold none (:func:`register_rebuildable`, MiniGrid's
world objects).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from rltrain.envs.state.encoding import CONSTANT


class NotCapturable(Exception):
    """Raised by :meth:`StateAdapter.capture`: a value of a known type whose state cannot be
    captured in this configuration; the message says why, and the value is reported as not
    captured."""


class StateAdapter:
    """Reads and writes the state of one type held where the walker cannot see it.

    Subclass it, set the three names and write :meth:`capture` and :meth:`restore`;
    :meth:`caveat` and :meth:`completes` are optional. What :meth:`capture` returns is packed
    by the walker like any other value, so it may hold anything the walker captures (dicts,
    lists, numpy arrays, numbers, strings); :meth:`restore` receives it back unpacked.
    """

    #: the name the state is saved under; restore finds the adapter by it and checks the live
    #: type: part of the checkpoint format, so never renamed
    name: ClassVar[str]
    #: the module that defines the type (never imported here: looked up in ``sys.modules``)
    module: ClassVar[str]
    #: the type's name in that module
    type_name: ClassVar[str]

    def live_type(self) -> type | None:
        """The type this adapter captures, if its module has been imported."""
        kind = getattr(sys.modules.get(self.module), self.type_name, None)
        return kind if isinstance(kind, type) else None

    def capture(self, value: Any) -> dict[str, Any]:
        """The value's state as plain data; raises :class:`NotCapturable` with the reason."""
        raise NotImplementedError

    def restore(self, value: Any, saved: dict[str, Any]) -> list[str]:
        """Write ``saved`` (what :meth:`capture` returned, through a checkpoint) into the live
        value; the problems met, and then nothing written (all or nothing)."""
        raise NotImplementedError

    def caveat(self, value: Any) -> str | None:
        """What the captured state is known to leave out, or None: reported in
        :attr:`Snapshot.caveats <rltrain.envs.state.api.Snapshot.caveats>` (the state is still
        kept and restored, and the restore is not exact)."""
        return None

    def completes(self, value: Any) -> Any:
        """The value whose state this one completes (a record kept beside a library's state
        of what that state leaves out), or None: that value's caveat is then not reported,
        and this value's own says whether it could complete it."""
        return None


#: name -> adapter
ADAPTERS: dict[str, StateAdapter] = {}
#: (module, type name) of C-backed configuration, skipped like a spec
_CONSTANTS: list[tuple[str, str]] = []
#: functions listing the classes a restore may make bare (see register_rebuildable)
_REBUILDABLE: list[Callable[[], Iterable[type]]] = []


def register(adapter: StateAdapter) -> StateAdapter:
    """Add ``adapter`` to the registry (its type is looked up when a walk starts)."""
    for other in ADAPTERS.values():
        if other.name == adapter.name or (other.module, other.type_name) == (
                adapter.module, adapter.type_name):
            raise ValueError(f"an adapter for {adapter.module}.{adapter.type_name} named "
                             f"{adapter.name!r} clashes with {type(other).__qualname__} "
                             f"({other.name!r}, {other.module}.{other.type_name})")
    ADAPTERS[adapter.name] = adapter
    return adapter


def register_constant(module: str, type_name: str) -> None:
    """A C-backed type that is configuration, not state (a compiled model): skipped like a
    spec, without a report."""
    _CONSTANTS.append((module, type_name))


def register_rebuildable(find: Callable[[], Iterable[type]]) -> None:
    """``find()`` lists plain Python classes (no ``__slots__``, no C base) whose instances a
    restore may make bare where the live envs hold none, or another type: value objects an
    env creates anew each episode, whose attributes are all their state. It must look only at
    modules already imported (``sys.modules``) and return nothing when there are none."""
    _REBUILDABLE.append(find)


def _loaded(module: str, type_name: str) -> type | None:
    kind = getattr(sys.modules.get(module), type_name, None)
    return kind if isinstance(kind, type) else None


@dataclass(frozen=True)
class Known:
    """The registry resolved against the modules imported now: what one walk looks up."""

    #: live type -> its adapter, by exact type
    adapters: dict[type, StateAdapter]
    #: what is skipped as configuration: the walker's constants and the registered ones
    constant: tuple[type, ...]
    #: ``module.qualname`` -> a class a restore may make bare
    rebuildable: dict[str, type]


def known() -> Known:
    """The registry as it stands against ``sys.modules``: only types of imported modules."""
    adapters = {kind: adapter for adapter in ADAPTERS.values()
                if (kind := adapter.live_type()) is not None}
    constant = tuple(kind for module, name in _CONSTANTS
                     if (kind := _loaded(module, name)) is not None)
    rebuildable = {f"{kind.__module__}.{kind.__qualname__}": kind
                   for find in _REBUILDABLE for kind in find()}
    return Known(adapters, CONSTANT + constant, rebuildable)
