"""Networks: MLPs with orthogonal initialisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}


class MLP(nn.Module):
    """A feed-forward network. The forward pass calls the layers' maths directly on a list of
    their (weight, bias) parameters rather than through one module call per layer: for the
    small batches an env step acts on, module dispatch costs as much as the matrix products."""

    def __init__(self, sizes: Sequence[int], activation: str, out_gain: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:],
                                                                        strict=True))
        self._act = ACTIVATIONS[activation]
        for layer in self.layers[:-1]:
            _init(layer, np.sqrt(2))
        _init(self.layers[-1], out_gain)
        # the Parameter objects themselves: .to(), load_state_dict() and deepcopy keep them
        # (the first two change their data in place, the last copies this list along)
        *self._hidden, self._last = [(layer.weight, layer.bias) for layer in self.layers]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = self._act
        for weight, bias in self._hidden:
            x = act(F.linear(x, weight, bias))
        return F.linear(x, *self._last)


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    activation: str = "tanh",
    out_gain: float = 1.0,
) -> MLP:
    """Hidden layers get gain sqrt(2), the output layer ``out_gain`` (small for policy
    heads, as in Andrychowicz et al. 2021, "What matters in on-policy RL")."""
    return MLP([in_dim, *hidden_sizes, out_dim], activation, out_gain)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
