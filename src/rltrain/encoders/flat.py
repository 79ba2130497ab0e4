"""The flat encoder: any Box observation as one vector, its entries in order (the MLP networks
of every algorithm take it). No parameters: the networks' first layers do the learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rltrain.encoders.registry import Encoder, EncoderSpec, register
from rltrain.observations import is_image


class FlatEncoder(Encoder):
    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.out_dim = int(np.prod(obs_shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # a batch of vectors passes as it is: this sits in front of every network call
        if obs.dtype != (dtype := torch.get_default_dtype()):  # a dict key, stored as it came
            obs = obs.to(dtype)
        return obs if obs.dim() == 2 else obs.reshape(obs.shape[0], -1)


def accepts(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and not is_image(space)


def images_refused(space: gym.Space) -> str | None:
    if not is_image(space):
        return None
    return (f"these are image observations ({space.dtype}, shape {space.shape}); the flat "
            "encoder would put an MLP on raw pixels: use algo.encoder=auto (a CNN)")


register(EncoderSpec(
    name="flat", accepts=accepts, build=lambda space: FlatEncoder(tuple(space.shape or ())),
    priority=0, description="any Box observation but an image, flattened into one vector",
    refusal=images_refused,
))
