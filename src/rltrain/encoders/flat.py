"""The flat encoder: any Box observation as one vector, its entries in order (the MLP networks
of every algorithm take it). No parameters: the networks' first layers do the learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rltrain.encoders.registry import Encoder, EncoderSpec, register


class FlatEncoder(Encoder):
    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.out_dim = int(np.prod(obs_shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # a batch of vectors passes as it is: this sits in front of every network call
        return obs if obs.dim() == 2 else obs.reshape(obs.shape[0], -1)


def is_image(space: gym.Space) -> bool:
    """A Box of uint8 with three axes: an image (HWC or CHW)."""
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
            and len(space.shape) == 3)


def images_refused(space: gym.Space) -> str | None:
    if not is_image(space):
        return None
    return (f"these are image observations (uint8, shape {space.shape}) and rltrain has no image "
            "encoder yet; the flat one would put an MLP on raw pixels, huge and learning poorly: "
            "use the env's feature-vector observations (e.g. an Atari '-ram' variant) or a "
            "wrapper in env.wrappers that turns images into features")


register(EncoderSpec(
    name="flat",
    accepts=lambda space: isinstance(space, gym.spaces.Box) and not is_image(space),
    build=lambda space: FlatEncoder(tuple(space.shape or ())), priority=0,
    description="any Box observation but an image, flattened into one vector",
    refusal=images_refused,
))
