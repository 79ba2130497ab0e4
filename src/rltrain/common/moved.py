"""Where rltrain's modules were before they moved into packages, for the names files keep.

A run's config names rltrain's own wrappers by their dotted path (``env.wrappers:
[rltrain.wrappers.MaskVelocity]``, ``env.imports: [rltrain.wrappers]`` for MinAtar's ids,
``rltrain.masking.InfoActionMask``), and its checkpoints' env state names the type of each
wrapper it walked (``rltrain.actions.ScaleActions``). Those modules moved in issue 46 (the
layout by layers); the code is the same, so an old path is read as the new one, without a word:
a run made before resumes exactly and evaluates, and a user's YAML that names an old path
still works. :func:`current_name` is applied where such a name is resolved: importing
``env.imports`` and ``env.wrappers`` (:mod:`rltrain.envs.vector`), deciding what is rltrain's
own code (:mod:`rltrain.rundir.trust`), and matching a saved env state's types to the live
ones (:mod:`rltrain.envs.state.restorer`). Names are never written in their old form.

Only the modules whose names reach files are listed; any other module's old path is an
import error, as a removed name is.

Ground floor: imports nothing.
"""

from __future__ import annotations

#: a module's former dotted path -> its path now
MOVED = {
    "rltrain.wrappers": "rltrain.envs.wrappers",
    "rltrain.actions": "rltrain.spaces.actions",
    "rltrain.masking": "rltrain.spaces.masking",
}


def current_name(name: str) -> str:
    """``name`` (a module, or a dotted name in one) with a former module path replaced by its
    path now; any other name as it is."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name
