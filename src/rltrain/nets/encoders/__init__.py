"""Observation encoders: every module of this package (but ``registry``) declares one and
registers it, so importing the package fills :data:`ENCODERS`. Actors and critics are built on
an encoder chosen from the observation space (``algo.encoder=auto``) or named
(``algo.encoder=<name>``); adding one is one module here, and no algorithm changes.

Of rltrain, the encoders import :mod:`rltrain.spaces`, :mod:`rltrain.process` (a value echoed
short in a message), :mod:`rltrain.config` and :mod:`rltrain.common`; no other module of
:mod:`rltrain.nets`."""

from rltrain.common.registries import import_members
from rltrain.nets.encoders.registry import ENCODERS, Encoder, EncoderSpec, make_encoder, register

import_members(__name__, __path__, skip=("registry",))

__all__ = ["ENCODERS", "Encoder", "EncoderSpec", "make_encoder", "register"]
