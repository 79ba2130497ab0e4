"""The Q-network head (rltrain.nets.q_networks): a plain network named and initialised as DQN's
always was, the dueling identity, factorised noisy layers (fresh noise per training pass, none in
the greedy policy, reproducible from the generator), and expected values of the distributional
heads, each against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algo_helpers import DISC
from rltrain.nets.actors_critics import EncodedMLP
from rltrain.nets.encoders import make_encoder
from rltrain.nets.q_networks import CategoricalQ, Layers, NoisyLinear, QNetwork, QuantileQ

OBS = torch.from_numpy(np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32))


def network(**options) -> QNetwork:
    return QNetwork(make_encoder(DISC, "auto"), [16, 8], 3, "relu", **options)


def test_a_plain_network_has_the_names_and_values_dqn_always_had():
    """DQN's network was an EncodedMLP under ``net``: the same names (old checkpoints and
    saved policies load) and, from the same seed, the same initial values and outputs."""
    torch.manual_seed(0)
    old = EncodedMLP(make_encoder(DISC, "auto"), [16, 8], 3, "relu", 1.0)
    torch.manual_seed(0)
    new = network()
    old_state = {f"net.{k}": v for k, v in old.state_dict().items()}
    assert list(new.state_dict()) == list(old_state) == [
        "net.layers.0.weight", "net.layers.0.bias", "net.layers.1.weight", "net.layers.1.bias",
        "net.layers.2.weight", "net.layers.2.bias"]
    for key, value in new.state_dict().items():
        assert torch.equal(value, old_state[key]), key
    new.load_state_dict(old_state)
    torch.testing.assert_close(new(OBS), old(OBS), rtol=0, atol=0)
    assert new(OBS).shape == (6, 3)


@pytest.mark.parametrize("atoms", [None, 1, 5])
def test_dueling_is_value_plus_advantage_less_its_mean(atoms):
    torch.manual_seed(1)
    net = network(dueling=True, atoms=atoms)
    width = atoms or 1
    assert net.value is not None and net.advantage is not None
    with torch.no_grad():
        q = net(OBS)
        features = net.net(OBS)
        v = net.value(features)  # (batch, atoms)
        a = net.advantage(features).reshape(6, 3, width)
    expected = v[:, None, :] + a - a.mean(1, keepdim=True)
    torch.testing.assert_close(q, expected.squeeze(-1) if atoms is None else expected)
    # the identity the mean buys: averaged over actions, Q is V
    torch.testing.assert_close(q.mean(1), v.squeeze(-1) if atoms is None else v)
    assert not torch.allclose(a.mean(1), torch.zeros_like(v), atol=1e-3)  # it was subtracted
    # the torso holds the encoder and the first hidden layer; each stream its own last one
    assert [tuple(p.shape) for p in net.net.layers.parameters()] == [(16, 3), (16,)]
    assert [tuple(p.shape) for p in net.value.parameters()] == [(8, 16), (8,), (width, 8),
                                                                (width,)]
    assert [tuple(p.shape) for p in net.advantage.parameters()] == [(8, 16), (8,),
                                                                    (3 * width, 8), (3 * width,)]


def test_dueling_without_hidden_layers_streams_from_the_features():
    net = QNetwork(make_encoder(DISC, "auto"), [], 4, "relu", dueling=True)
    assert net.net.layers is not None and len(net.net.layers) == 0
    assert net(OBS).shape == (6, 4)


def test_noisy_layer_is_initialised_as_the_paper_says():
    layer = NoisyLinear(16, 4, sigma0=0.5)
    bound = 1 / math.sqrt(16)
    assert torch.all(layer.weight_mu.abs() <= bound) and torch.all(layer.bias_mu.abs() <= bound)
    assert torch.all(layer.weight_sigma == 0.5 * bound) and torch.all(layer.bias_sigma == 0.5
                                                                        * bound)


def test_noisy_layer_weights_are_mu_plus_sigma_times_factorised_noise():
    """w = mu + sigma * f(eps_out) f(eps_in)^T, b = mu_b + sigma_b * f(eps_out), f(x) =
    sign(x) sqrt|x|, eps drawn from the generator (inputs' factors first)."""
    torch.manual_seed(2)
    layer = NoisyLinear(5, 3, sigma0=0.5)
    with torch.no_grad():
        layer.weight_sigma.uniform_(0.1, 1.0)
        layer.bias_sigma.uniform_(0.1, 1.0)
    gen = torch.Generator().manual_seed(7)
    w, b = layer.weights(gen)
    eps = torch.randn(8, generator=torch.Generator().manual_seed(7))
    f = eps.sign() * eps.abs().sqrt()
    f_in, f_out = f[:5], f[5:]
    expected_w = layer.weight_mu + layer.weight_sigma * f_out[:, None] * f_in[None, :]
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(b, layer.bias_mu + layer.bias_sigma * f_out)
    # the noise is rank one: (w - mu) / sigma is an outer product
    assert torch.linalg.matrix_rank((w - layer.weight_mu) / layer.weight_sigma) == 1
    # no generator: the mean weights
    w0, b0 = layer.weights(None)
    assert w0 is layer.weight_mu and b0 is layer.bias_mu


@pytest.mark.parametrize("dueling", [False, True])
def test_noisy_network_differs_between_training_passes_not_between_greedy_ones(dueling):
    torch.manual_seed(3)
    net = network(noisy=True, dueling=dueling)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        a, b = net(OBS, gen), net(OBS, gen)
        greedy_1, greedy_2 = net(OBS), net(OBS)
        # again from the same generator state: the same two draws (reproducible noise)
        gen.manual_seed(0)
        again = net(OBS, gen), net(OBS, gen)
    assert not torch.allclose(a, b)
    assert torch.equal(greedy_1, greedy_2)
    assert not torch.allclose(a, greedy_1)
    assert torch.equal(again[0], a) and torch.equal(again[1], b)
    # the greedy output is the network of mean weights, written out
    if not dueling:
        x = OBS
        for i, layer in enumerate(net.net.layers):
            assert isinstance(layer, NoisyLinear)
            x = F.linear(x, layer.weight_mu, layer.bias_mu)
            x = torch.relu(x) if i < 2 else x
        torch.testing.assert_close(greedy_1, x)


def test_noisy_parameters_all_get_gradients():
    torch.manual_seed(4)
    net = network(noisy=True, dueling=True)
    q = net(OBS, torch.Generator().manual_seed(0))
    # not q.sum(): the advantages' mean is subtracted, so their sum has no gradient
    (q * torch.randn_like(q)).sum().backward()
    names = {n for n, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert {n for n, _ in net.named_parameters()} == names
    assert any(n.endswith("weight_sigma") for n in names)


def test_layers_of_one_size_are_the_identity():
    layers = Layers([7], "relu", noisy=False, sigma0=0.5, activate_last=True)
    x = torch.randn(2, 7)
    assert torch.equal(layers(x), x)


def test_expected_values_of_the_distributional_heads():
    torch.manual_seed(5)
    net = network(atoms=4)
    support = torch.tensor([-1.0, 0.0, 1.0, 3.0])
    with torch.no_grad():
        out = net(OBS)
        assert out.shape == (6, 3, 4)
        p = out.softmax(-1)
        by_hand = (p[..., 0] * -1 + p[..., 2] * 1 + p[..., 3] * 3)
        torch.testing.assert_close(CategoricalQ(net, support)(OBS), by_hand)
        torch.testing.assert_close(QuantileQ(net)(OBS), out.sum(-1) / 4)
    # the support follows from the config: it is no part of the saved weights
    assert "support" not in CategoricalQ(net, support).state_dict()
