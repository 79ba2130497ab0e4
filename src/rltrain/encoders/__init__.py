"""Observation encoders: every module of this package (but ``registry``) declares one and
registers it, so importing the package fills :data:`ENCODERS`. Actors and critics are built on
an encoder chosen from the observation space (``algo.encoder=auto``) or named
(``algo.encoder=<name>``); adding one is one module here, and no algorithm changes."""

import importlib
import pkgutil

from rltrain.encoders.registry import ENCODERS, Encoder, EncoderSpec, make_encoder, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ENCODERS", "Encoder", "EncoderSpec", "make_encoder", "register"]
