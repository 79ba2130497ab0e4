"""What the rest of rltrain calls: :func:`snapshot` and :func:`restore`, the :class:`Snapshot`
a snapshot returns, and the :data:`FORMAT` of the state it holds (re-exported by
:mod:`rltrain.envs.state`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltrain.envs.state.encoding import SKIP
from rltrain.envs.state.packer import Packer
from rltrain.envs.state.restorer import Restorer

#: the state's format, saved with it: a restore refuses any other
FORMAT = "rltrain.envstate/1"


@dataclass(frozen=True)
class Snapshot:
    """What :func:`snapshot` returns: the state, and the honest list of what it lacks."""

    #: plain data only: ``torch.load(weights_only=True)`` loads it
    state: dict[str, Any]
    #: one ``"<path> (<module>.<qualname>)"`` per value holding state that was not captured
    not_captured: list[str]
    #: one ``"<path> (<type>: <what>)"`` per value that was captured and is restored, but whose
    #: library's state is known to leave something out (an adapter's caveat: ALE with sticky
    #: actions, where no :class:`~rltrain.envs.state.families.ale.AleStickyAction` keeps the
    #: held action): a restore goes on from it, and is not exact
    caveats: list[str] = field(default_factory=list)


def snapshot(envs: Any) -> Snapshot:
    """The state of ``envs`` (a vector env, an env, a wrapper) and what it lacks."""
    packer = Packer()
    root = packer.pack(envs, "envs")
    return Snapshot({"format": FORMAT, "root": ("skipped",) if root is SKIP else root},
                    packer.not_captured, packer.caveats)


def restore(envs: Any, state: dict[str, Any]) -> list[str]:
    """Write ``state`` back into ``envs`` in place; the problems met ([] means exactly).

    Never raises on a bad or mismatched state: each problem names its path and the restore goes
    on, so the live envs may end up partly restored when the list is not empty.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT or "root" not in state:
        return [f"envs: not an env state of format {FORMAT!r}"]
    restorer = Restorer()
    restorer.unpack(state["root"], envs, "envs")
    return restorer.problems
