"""Python's cyclic garbage collector held off while a run starts, and handed every object
that start-up made as permanent before training.

Importing torch leaves about 185,000 objects that the collector tracks, and each full
collection walks all of them: while Hydra, OmegaConf and rltrain import and compose, the
collections they trigger cost about 0.1 s of a 1.5 s smoke run (measured on the 2-core VM,
2026-11-26; ``scripts/bench_startup.py``). :func:`hold` (the ``rltrain`` command's first
step) turns collection off; :func:`release` (just before the first training step) moves every
object alive then into the permanent generation (``gc.freeze``), which collections skip, and
turns collection back on. The cost is that cyclic garbage made during start-up is kept rather
than freed: one run's composition temporaries, a few megabytes at most, once per process.
Ground floor: imports no other rltrain module.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Turn automatic collection off until :func:`release` (if it is on now)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """After :func:`hold`: freeze what start-up made and turn collection back on. Does
    nothing otherwise, or a second time (a sweep's later jobs)."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
