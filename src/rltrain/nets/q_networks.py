"""Q-networks over discrete actions: one head for DQN, C51, QR-DQN and their combination in
Rainbow (Hessel et al. 2018, arXiv:1710.02298).

A :class:`QNetwork` is an encoder (:mod:`rltrain.nets.encoders`), MLP layers and a head with three
independent options:

- ``dueling`` (Wang et al. 2016, arXiv:1511.06581): a value stream V(s) and an advantage stream
  A(s, a) after a shared torso, combined as Q = V + A - mean_a A. Subtracting the mean makes the
  split identifiable (adding a constant to A and removing it from V would give the same Q).
- ``noisy`` (Fortunato et al. 2018, arXiv:1706.10295): every linear layer is a
  :class:`NoisyLinear`, whose weights are ``mu + sigma * eps`` with learnt ``mu`` and ``sigma``
  and factorised Gaussian noise ``eps``: exploration by perturbed weights instead of
  epsilon-greedy actions.
- ``atoms``: the number of outputs per action. None gives plain Q-values ``(batch, actions)``;
  a number gives ``(batch, actions, atoms)``, a return distribution per action (C51's logits
  over a fixed support, QR-DQN's quantiles), with its atoms axis even when there is one atom
  (QR-DQN with one quantile learns the median return: still a distribution's head, whose
  last axis the loss and the expected values reduce).

Noise is explicit: ``forward(obs, noise)`` draws fresh weight noise from the generator
``noise`` (a training forward pass or an exploring action), and uses the mean weights when
``noise`` is None (the greedy policy, the deployable and exported one). The generator belongs
to the algorithm, which keeps its state in its training state, so a resumed run draws the same
noise as an unbroken one. It lives on the CPU whatever the device: the draws are a few hundred
numbers per layer, and the same seed then gives the same noise on any device.

:class:`CategoricalQ` and :class:`QuantileQ` turn a distributional network into expected
Q-values, which is what the deployable policy's argmax needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.nets.actors_critics import ACTIVATIONS
from rltrain.nets.encoders import Encoder


class Linear(nn.Linear):
    """A plain linear layer that answers :meth:`weights` as :class:`NoisyLinear` does."""

    def weights(self, noise: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight, self.bias


def _scaled(x: torch.Tensor) -> torch.Tensor:
    """f(x) = sign(x) sqrt(|x|), the factorised noise's transform (Fortunato et al., eq. 11)."""
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian weight noise (Fortunato et al. 2018, section 3):
    ``w = weight_mu + weight_sigma * (f(eps_out) f(eps_in)^T)``, ``b = bias_mu + bias_sigma *
    f(eps_out)``, with ``p + q`` standard normal draws per pass rather than ``p q`` (the
    independent variant's cost, which the paper keeps for A3C only). Initialised as the paper
    says for factorised noise: ``mu ~ U[-1/sqrt(p), 1/sqrt(p)]``, ``sigma = sigma0 / sqrt(p)``,
    ``p`` the number of inputs."""

    def __init__(self, in_features: int, out_features: int, sigma0: float) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound,
                                                                                      bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))

    def weights(self, noise: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight and bias of this pass: the means when ``noise`` is None, else perturbed
        by noise drawn from it (in one call: inputs' factors first, then outputs')."""
        if noise is None:
            return self.weight_mu, self.bias_mu
        eps = _scaled(torch.randn(self.in_features + self.out_features, generator=noise))
        eps = eps.to(self.weight_mu.device)
        eps_in, eps_out = eps[:self.in_features], eps[self.in_features:]
        return (self.weight_mu + self.weight_sigma * torch.outer(eps_out, eps_in),
                self.bias_mu + self.bias_sigma * eps_out)

    def forward(self, x: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        return F.linear(x, *self.weights(noise))


#: how a Q network's plain linear layers may start (``algo.init``; see :class:`Layers`)
Q_INITS = ("orthogonal", "torch")


class Layers(nn.Module):
    """Linear layers of the given sizes (plain or noisy) with the activation between them, and
    after the last one too when ``activate_last`` (a torso whose output feeds other layers).
    Sizes of one entry: no layers, the identity. An ``encoder`` in front turns observations
    into the first layer's input. The layers are named ``layers.<i>`` as in
    :class:`rltrain.nets.actors_critics.MLP`, so a plain Q-network's parameters keep the names DQN's
    checkpoints and saved policies have always had; plain layers are initialised as there too
    (orthogonal, gain sqrt(2), ``out_gain`` for the last unless it is activated), or, with
    ``init="torch"``, left as PyTorch makes them."""

    def __init__(self, sizes: Sequence[int], activation: str, *, noisy: bool, sigma0: float,
                 out_gain: float = 1.0, activate_last: bool = False,
                 encoder: Encoder | None = None, init: str = "orthogonal") -> None:
        super().__init__()
        pairs = list(zip(sizes[:-1], sizes[1:], strict=True))
        linears: list[Linear | NoisyLinear]
        if noisy:
            linears = [NoisyLinear(a, b, sigma0) for a, b in pairs]
        else:
            plain = [Linear(a, b) for a, b in pairs]
            if init == "orthogonal":  # else as nn.Linear made them
                for i, layer in enumerate(plain):
                    last = i == len(plain) - 1 and not activate_last
                    nn.init.orthogonal_(layer.weight, out_gain if last else np.sqrt(2))
                    nn.init.zeros_(layer.bias)
            linears = list(plain)
        self.layers = nn.ModuleList(linears)
        self._linears = linears  # typed: a ModuleList hands its items back as plain Modules
        self._act = ACTIVATIONS[activation]
        self.activation = activation
        self.activate_last = activate_last
        self.out_dim = sizes[-1]
        #: observations to the first layer's input (``sizes[0]`` is its out_dim); None: the
        #: input is features already
        self.encoder = encoder

    def forward(self, x: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        if self.encoder is not None:
            x = self.encoder.forward(x)
        last = len(self._linears) - 1
        for i, layer in enumerate(self._linears):
            x = F.linear(x, *layer.weights(noise))
            if i < last or self.activate_last:
                x = self._act(x)
        return x


class QNetwork(nn.Module):
    """An encoder, MLP layers and a Q head over ``num_actions`` discrete actions (see the
    module's docstring for ``dueling``, ``noisy`` and ``atoms``).

    Without dueling, ``net`` is the encoder and every layer, the last giving ``num_actions *
    atoms`` outputs. With dueling, ``net`` is the torso (the encoder and all hidden layers but
    the last), and ``value`` and ``advantage`` are the two streams, each with its own last
    hidden layer (as in Wang et al.'s network: one fully connected layer per stream after the
    shared convolutions)."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], num_actions: int,
                 activation: str, *, dueling: bool = False, noisy: bool = False,
                 sigma0: float = 0.5, atoms: int | None = None, init: str = "orthogonal"
                 ) -> None:
        super().__init__()
        self.num_actions, self.atoms, self.dueling = num_actions, atoms, dueling
        #: outputs per action (one plain Q-value, or the atoms)
        self.width = 1 if atoms is None else atoms
        width = self.width
        sizes = [encoder.out_dim, *hidden_sizes]
        kw: dict[str, Any] = {"noisy": noisy, "sigma0": sigma0, "init": init}
        self.value: Layers | None = None
        self.advantage: Layers | None = None
        if dueling:
            # the torso: the encoder and every hidden layer but the last (none: the features)
            torso, stream = (sizes[:-1], sizes[-1:]) if hidden_sizes else (sizes, [])
            self.net = Layers(torso, activation, activate_last=True, encoder=encoder, **kw)
            self.value = Layers([self.net.out_dim, *stream, width], activation, **kw)
            self.advantage = Layers([self.net.out_dim, *stream, num_actions * width],
                                    activation, **kw)
        else:
            self.net = Layers([*sizes, num_actions * width], activation, encoder=encoder, **kw)

    def forward(self, obs: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        """Q-values ``(batch, actions)`` (atoms None) or ``(batch, actions, atoms)``; fresh
        weight noise from ``noise`` for a noisy network, its mean weights when None."""
        x = self.net(obs, noise)
        if self.value is None or self.advantage is None:
            out = x.unflatten(-1, (self.num_actions, self.width))
        else:
            v = self.value(x, noise).unsqueeze(1)  # (batch, 1, atoms)
            a = self.advantage(x, noise).unflatten(-1, (self.num_actions, self.width))
            out = v + a - a.mean(1, keepdim=True)
        return out.squeeze(-1) if self.atoms is None else out

    def plain_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Every layer's ``(weight, bias)`` when the network is its encoder and plain linear
        layers in a row (not dueling, not noisy), the form
        :func:`rltrain.nets.actors_critics.forward_kept` runs without autograd; None otherwise."""
        plain = [x for x in self.net._linears if isinstance(x, Linear)]
        if self.value is not None or len(plain) != len(self.net._linears):
            return None
        return [(x.weight, x.bias) for x in plain]


class CategoricalQ(nn.Module):
    """Expected Q-values ``(batch, actions)`` of a categorical return distribution (C51):
    ``sum_i softmax(logits)_i z_i`` over the fixed support ``z``."""

    support: torch.Tensor

    def __init__(self, net: QNetwork, support: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        # follows from the config: not saved with the weights
        self.register_buffer("support", support, persistent=False)

    def forward(self, obs: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        return categorical_mean(self.net(obs, noise), self.support)


class QuantileQ(nn.Module):
    """Expected Q-values ``(batch, actions)`` of a quantile return distribution (QR-DQN): the
    mean of the quantiles, each of which carries probability 1/N."""

    def __init__(self, net: QNetwork) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        return self.net(obs, noise).mean(-1)


def categorical_mean(logits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """The mean of the categorical distributions ``softmax(logits)`` (last axis) on
    ``support``."""
    return (logits.softmax(-1) * support).sum(-1)
