"""The dict encoder: a Dict observation, each key through its own encoder, concatenated.

A key's encoder is chosen as the whole observation's would be (``auto``: a CNN for an image
key, the flat encoder for a vector); a Discrete key is one-hot encoded, a MultiDiscrete key
one-hot per entry, a MultiBinary key read as 0/1 floats. Its input is the packed rows the
buffers hold (:mod:`rltrain.spaces.observations`), which it unpacks into one tensor per key at its
stored dtype (images stay uint8), or that dict of tensors itself (the deployable policy's); its
output the concatenated features, keys in the space's
order (as Stable-Baselines3's ``MultiInputPolicy`` combines its extractors).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.nets.encoders.registry import ENCODERS, Encoder, EncoderSpec, register
from rltrain.process.streams import echo
from rltrain.spaces.observations import DictLayout, ObservationSpaceError


class OneHot(Encoder):
    """Integer values ``(batch, *shape)``, entry i in ``[low_i, low_i + sizes_i)``, as one-hot
    vectors, concatenated per entry."""

    starts: torch.Tensor

    def __init__(self, sizes: list[int], low: list[int]) -> None:
        super().__init__()
        self.sizes = sizes
        self.out_dim = int(sum(sizes))
        # entry i's value v lands at start_i + v - low_i
        starts = np.cumsum([0, *sizes[:-1]]) - np.asarray(low)
        self.register_buffer("starts", torch.as_tensor(starts, dtype=torch.int64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        idx = obs.reshape(obs.shape[0], -1).to(torch.int64)
        if len(self.sizes) == 1:
            return F.one_hot(idx[:, 0] + self.starts[0], self.out_dim).to(torch.get_default_dtype())
        # every entry's one-hot in one scatter: entry i's index offset by its start
        out = torch.zeros(obs.shape[0], self.out_dim, device=obs.device)
        return out.scatter_(1, idx + self.starts, 1.0)


def key_encoder(key: str, space: gym.Space) -> Encoder:
    if isinstance(space, gym.spaces.Discrete):
        return OneHot([int(space.n)], [int(space.start)])
    if isinstance(space, gym.spaces.MultiDiscrete):
        return OneHot([int(n) for n in np.ravel(space.nvec)],
                      [int(s) for s in np.ravel(space.start)])
    if isinstance(space, gym.spaces.MultiBinary):
        space = gym.spaces.Box(0, 1, tuple(np.atleast_1d(space.shape)), np.float32)
    for spec in sorted(ENCODERS.values(), key=lambda s: -s.priority):
        if spec.name != "dict" and spec.accepts(space):
            return spec.build(space)
    raise ObservationSpaceError(f"no encoder takes observation key {key!r} ({echo(space)})")


class DictEncoder(Encoder):
    def __init__(self, space: gym.Space) -> None:
        assert isinstance(space, gym.spaces.Dict)  # accepts() lets only Dicts through
        super().__init__()
        self.layout = DictLayout.of(space)
        self.keys = self.layout.keys
        self.encoders = nn.ModuleDict({k: key_encoder(k, space[k]) for k in self.keys})
        self.out_dim = sum(self.key_dims())

    def key_dims(self) -> list[int]:
        return [int(e.out_dim) for e in self.encoders.values()]  # type: ignore[arg-type]

    def forward(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """Packed rows ``(batch, row_bytes)`` (training: what buffers hold), or one tensor per
        key (the deployable policy, whose inputs are named after the keys)."""
        parts = obs if isinstance(obs, dict) else self.layout.unpack_torch(obs)
        return torch.cat([self.encoders[k](parts[k]) for k in self.keys], dim=1)


def refusal(space: gym.Space) -> str | None:
    """Why a Dict cannot be encoded (a key rltrain cannot store), or None."""
    if not isinstance(space, gym.spaces.Dict):
        return None
    try:
        DictLayout.of(space)
    except ObservationSpaceError as e:
        return str(e)
    return None


def accepts(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and refusal(space) is None


register(EncoderSpec(
    name="dict", accepts=accepts, build=DictEncoder, priority=30,
    description="a Dict observation: each key through its own encoder (CNN, flat, one-hot), "
                "concatenated",
    refusal=refusal,
))
