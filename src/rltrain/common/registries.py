"""Registries whose members register themselves: importing a package imports each module in it.
Ground floor: the standard library only."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_members(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
    """Import every module of ``package`` (its ``__path__``) but ``skip`` and private ones, so
    that each registers what it declares (an algorithm, an encoder, a logger)."""
    left_out = set(skip)
    for module in pkgutil.iter_modules(path):
        if module.name not in left_out and not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")
