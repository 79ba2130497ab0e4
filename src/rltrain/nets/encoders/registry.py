"""The encoder registry: one :class:`EncoderSpec` per encoder, declared next to its class.

An encoder maps a batch of observations, as the env gives them (normalised by
``env.normalize.obs`` when that is on), to a batch of feature vectors ``(batch, out_dim)``.
Every actor and critic in :mod:`rltrain.nets.actors_critics` starts with one, so what an observation
looks like (a vector, an image, a dict of both) is the encoder's business and no algorithm's: the
algorithms build their networks with :meth:`rltrain.algorithms.base.Algorithm.encoder`, which
asks :func:`make_encoder` for the one ``algo.encoder`` names (``auto``: the first registered
encoder, by priority, that accepts the observation space).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from torch import nn

from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.process.streams import echo


class Encoder(nn.Module):
    """Observations ``(batch, *obs_shape)`` to features ``(batch, out_dim)``."""

    #: the size of one feature vector
    out_dim: int


@dataclass(frozen=True)
class EncoderSpec:
    """What rltrain needs to know of an encoder."""

    #: ``algo.encoder=<name>``
    name: str
    #: whether it can encode observations of this space
    accepts: Callable[[gym.Space], bool]
    #: builds one encoder (its own parameters) for this space
    build: Callable[[gym.Space], Encoder]
    #: ``algo.encoder=auto`` takes the accepting encoder of highest priority (a convolutional
    #: one for images before the flat fallback that takes any Box)
    priority: int = 0
    #: one line for the docs and error messages
    description: str = ""
    #: why it refuses a space it could almost take, and what would work instead (None: no
    #: advice): said when no encoder takes the env's observations
    refusal: Callable[[gym.Space], str | None] | None = None


ENCODERS: dict[str, EncoderSpec] = {}


def register(spec: EncoderSpec) -> EncoderSpec:
    """Add ``spec`` to the registry (at the import of its module)."""
    if spec.name == "auto":
        raise ValueError("'auto' is algo.encoder's automatic choice, not an encoder's name")
    if spec.name in ENCODERS and ENCODERS[spec.name].build is not spec.build:
        raise ValueError(f"two encoders are registered as {spec.name!r}")
    ENCODERS[spec.name] = spec
    return spec


def observation_space(info: SpaceInfo) -> gym.Space:
    """The env's observation space, or a float Box of ``info.obs_shape`` when unknown."""
    if info.obs_space is not None:
        return info.obs_space
    return gym.spaces.Box(-np.inf, np.inf, info.obs_shape, np.float32)


def check_name(name: str) -> None:
    """Refuse an ``algo.encoder`` that names no registered encoder (before anything is built)."""
    if name != "auto" and name not in ENCODERS:
        raise ConfigError(f"algo.encoder={name} is not an encoder; use auto or one of "
                          f"{', '.join(sorted(ENCODERS))}")


def choose(info: SpaceInfo, name: str = "auto") -> EncoderSpec:
    """The encoder ``algo.encoder=name`` stands for on this env's observations; a name that is
    not registered, or an encoder that cannot take the space, is refused by name."""
    check_name(name)
    space = observation_space(info)
    if name == "auto":
        for spec in sorted(ENCODERS.values(), key=lambda s: -s.priority):
            if spec.accepts(space):
                return spec
        hints = [spec.refusal(space) for spec in ENCODERS.values() if spec.refusal is not None]
        hint = next((h for h in hints if h), "")
        raise ConfigError(f"no observation encoder takes {info.env_id}'s observations "
                          f"({echo(space)}): algo.encoder=auto found none among "
                          f"{', '.join(sorted(ENCODERS))}"
                          + (f"; {hint}" if hint else ""))
    spec = ENCODERS[name]
    if not spec.accepts(space):
        fits = sorted((s for s in ENCODERS.values() if s.accepts(space)),
                      key=lambda s: -s.priority)
        if fits:  # a way out that works: what auto would take, and the others that would do
            others = [s.name for s in fits[1:]]
            way = (f"use algo.encoder=auto (it takes {fits[0].name} here)"
                   + (f", or {' or '.join(others)}" if others else ""))
        else:
            hints = [h for h in (s.refusal(space) for s in ENCODERS.values()
                                 if s.refusal is not None) if h]
            way = "no registered encoder takes them" + (f": {hints[0]}" if hints else "")
        raise ConfigError(f"algo.encoder={name} cannot encode {info.env_id}'s observations "
                          f"({echo(space)}); {way}")
    return spec


def make_encoder(info: SpaceInfo, name: str = "auto") -> Encoder:
    """A new encoder (its own parameters) for the env's observations."""
    return choose(info, name).build(observation_space(info))
