"""Observation encoders: every module of this package (but ``registry``) declares one and
registers it, so importing the package fills :data:`ENCODERS`. Actors and critics are built on
an encoder chosen from the observation space (``algo.encoder=auto``) or named
(``algo.encoder=<name>``); adding one is one module here, and no algorithm changes."""

from rltrain.encoders.registry import ENCODERS, Encoder, EncoderSpec, make_encoder, register
from rltrain.modules import import_members

import_members(__name__, __path__, skip=("registry",))

__all__ = ["ENCODERS", "Encoder", "EncoderSpec", "make_encoder", "register"]
