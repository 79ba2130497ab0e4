"""Networks: MLPs with orthogonal initialisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    activation: str = "tanh",
    out_gain: float = 1.0,
) -> nn.Sequential:
    """A feed-forward network; hidden layers get gain sqrt(2), the output layer ``out_gain``
    (small for policy heads, as in Andrychowicz et al. 2021, "What matters in on-policy RL")."""
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden_sizes]
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_init(nn.Linear(a, b), np.sqrt(2)), ACTIVATIONS[activation]()]
    layers.append(_init(nn.Linear(sizes[-1], out_dim), out_gain))
    return nn.Sequential(*layers)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
