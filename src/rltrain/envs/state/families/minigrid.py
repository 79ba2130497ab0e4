"""MiniGrid: no C-side state (its envs are plain Python, captured by the walker), but world
objects a restore may have to make.

An episode's grid holds its own Key, Door, Wall... instances, so the grid of the episode a
checkpoint was taken in holds objects at cells where a fresh env holds others, or none. They
are plain value objects whose attributes are all their state, so a restore may make them bare
and fill them from the state (:func:`~rltrain.envs.state.adapters.register_rebuildable`).
"""

from __future__ import annotations

import sys

from rltrain.envs.state.adapters import register_rebuildable
from rltrain.envs.state.encoding import PLAIN_BASICSIZE


def world_objects() -> list[type]:
    """MiniGrid's world object classes (those without slots or a C base), if MiniGrid is
    imported (an env made them), else none."""
    world = sys.modules.get("minigrid.core.world_object")
    base = getattr(world, "WorldObj", None)
    if not isinstance(base, type):
        return []
    return [value for value in vars(world).values()
            if isinstance(value, type) and issubclass(value, base)
            and value.__basicsize__ == PLAIN_BASICSIZE]


register_rebuildable(world_objects)
