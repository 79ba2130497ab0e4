"""The flat encoder: any Box observation as one vector, its entries in order (the MLP networks
of every algorithm take it). No parameters: the networks' first layers do the learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rltrain.nets.encoders.image import chw
from rltrain.nets.encoders.registry import Encoder, EncoderSpec, register
from rltrain.spaces.observations import is_image


class FlatEncoder(Encoder):
    """:param scale: per element, what a value is multiplied by (an image's ``1 / high``, so
        that its values reach the network in [0, 1] as a CNN's do); None: as they come."""

    scale: torch.Tensor | None

    def __init__(self, obs_shape: tuple[int, ...], scale: np.ndarray | None = None) -> None:
        super().__init__()
        self.out_dim = int(np.prod(obs_shape))
        self.register_buffer("scale", None if scale is None else torch.as_tensor(
            np.ascontiguousarray(scale).reshape(-1), dtype=torch.get_default_dtype()),
            persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # a batch of vectors passes as it is: this sits in front of every network call
        if obs.dtype != (dtype := torch.get_default_dtype()):  # a dict key, stored as it came
            obs = obs.to(dtype)
        obs = obs if obs.dim() == 2 else obs.reshape(obs.shape[0], -1)
        return obs if self.scale is None else obs * self.scale


def too_small_to_convolve(space: gym.Space) -> bool:
    """An image smaller than every convolution's kernel (3x3): a few numbers, which the flat
    encoder takes (scaled by their bounds) where no CNN could."""
    return is_image(space) and min(chw(tuple(space.shape or ()))[1:]) < 3


def accepts(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and (not is_image(space)
                                                  or too_small_to_convolve(space))


def build(space: gym.Space) -> FlatEncoder:
    shape = tuple(space.shape or ())
    if not is_image(space):
        return FlatEncoder(shape)
    assert isinstance(space, gym.spaces.Box)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), shape)
    scale = np.where(np.isfinite(high) & (high > 0), 1.0 / np.where(high > 0, high, 1), 1.0)
    return FlatEncoder(shape, scale)


def images_refused(space: gym.Space) -> str | None:
    if not is_image(space) or too_small_to_convolve(space):
        return None
    return (f"these are image observations ({space.dtype}, shape {space.shape}); the flat "
            "encoder would put an MLP on raw pixels: use algo.encoder=auto (a CNN)")


register(EncoderSpec(
    name="flat", accepts=accepts, build=build, priority=0,
    description="any Box observation but an image (or one smaller than 3x3), flattened into "
                "one vector",
    refusal=images_refused,
))
