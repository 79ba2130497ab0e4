"""The shared parts every algorithm builds on (rltrain.nets.actors_critics): actors and critics on
an observation encoder, each against a reference written the plain way; and, until they have
modules of their own, Polyak updates (rltrain.nets.optim) and action scaling
(rltrain.spaces.actions). The normalisers are tested in test_normalize.py, the encoders in
test_encoders.py."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal, TanhTransform, TransformedDistribution

from rltrain.nets.actors_critics import (
    CategoricalActor,
    DeterministicActor,
    EncodedMLP,
    GaussianActor,
    QCritics,
    SquashedGaussianActor,
    TanhMeanGaussianActor,
    mlp,
    sample_categorical,
)
from rltrain.nets.encoders.flat import FlatEncoder
from rltrain.nets.optim import Adam, flatten_parameters, soft_update
from rltrain.spaces.actions import ActionScale, ScaleActions, scaling, to_agent, to_env


def flat(dim: int) -> FlatEncoder:
    """The flat encoder of vectors of ``dim`` features (no parameters)."""
    return FlatEncoder((dim,))


# --------------------------------------------------------------------------- actors
def test_gaussian_log_prob_and_entropy():
    torch.manual_seed(0)
    actor = GaussianActor(flat(3), [8], 2, "tanh", init_log_std=-0.3)
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    logp, entropy = actor.log_prob_entropy(obs, act)
    ref = Normal(actor(obs), actor.log_std.exp())
    torch.testing.assert_close(logp, ref.log_prob(act).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))


@pytest.mark.parametrize("num_actions", [2, 5])
def test_categorical_log_prob_and_entropy(num_actions):
    torch.manual_seed(1)
    actor = CategoricalActor(flat(3), [8], num_actions, "tanh")
    obs, act = torch.randn(9, 3) * 50, torch.randint(0, num_actions, (9,))
    logp, entropy = actor.log_prob_entropy(obs, act)
    ref = Categorical(logits=actor(obs))
    torch.testing.assert_close(logp, ref.log_prob(act))
    torch.testing.assert_close(entropy, ref.entropy())


def test_sample_categorical_draws_softmax_probabilities():
    """Gumbel-max sampling: each action's frequency over 200,000 draws is within 5 standard
    errors of its softmax probability; rows are drawn independently."""
    torch.manual_seed(4)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.5], [3.0, 0.0, 0.0, -9.0]])
    n = 200_000
    draws = sample_categorical(logits.repeat(n // 2, 1)).reshape(n // 2, 2)
    for row in range(2):
        p = logits[row].softmax(-1)
        freq = torch.bincount(draws[:, row], minlength=4) / (n // 2)
        se = (p * (1 - p) / (n // 2)).sqrt()
        assert ((freq - p).abs() <= 5 * se + 1e-9).all(), (row, freq, p)


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    """The sample's log-probability (tanh change of variables, in its stable form) equals
    torch's TransformedDistribution(Normal, TanhTransform) at the same pre-squash point."""
    torch.manual_seed(2)
    actor = SquashedGaussianActor(flat(4), [16], 3, "relu")
    obs = torch.randn(11, 4) * 3
    torch.manual_seed(7)
    act, logp = actor.sample(obs)
    mean, log_std = actor.net(obs).split(3, -1)
    lo, hi = actor.LOG_STD_MIN, actor.LOG_STD_MAX
    log_std = lo + 0.5 * (hi - lo) * (torch.tanh(log_std) + 1)
    ref = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    torch.manual_seed(7)
    u = mean + torch.randn_like(mean) * log_std.exp()  # the same noise as the sample
    torch.testing.assert_close(act, torch.tanh(u))
    torch.testing.assert_close(logp, ref.log_prob(torch.tanh(u)).sum(-1), rtol=1e-4,
                               atol=1e-4)
    assert (act.abs() < 1).all()
    torch.testing.assert_close(actor(obs), torch.tanh(mean))  # deterministic: tanh(mean)


def test_deterministic_actor_stays_in_unit_box():
    actor = DeterministicActor(flat(3), [8], 2, "relu")
    out = actor(torch.randn(50, 3) * 1e3)
    assert out.shape == (50, 2) and (out.abs() <= 1).all()


def test_tanh_mean_gaussian_is_a_gaussian_around_a_tanh_mean():
    """IQL's policy: log pi(a|s) is torch's Normal(tanh(f(s)), exp(log_std)) density, finite at
    the bounds; its log std is clamped; its deterministic action is the mean."""
    torch.manual_seed(14)
    actor = TanhMeanGaussianActor(flat(3), [16], 2, "relu")
    obs = torch.randn(32, 3)
    act = torch.cat((torch.ones(4, 2), -torch.ones(4, 2), torch.rand(24, 2) * 2 - 1))
    with torch.no_grad():
        actor.log_std.copy_(torch.tensor([-0.5, -9.0]))  # the second is clamped to -5
        mean = torch.tanh(actor.net(obs))
        normal = Normal(mean, torch.tensor([-0.5, -5.0]).exp())
        torch.testing.assert_close(actor.log_prob(obs, act), normal.log_prob(act).sum(-1))
        torch.testing.assert_close(actor(obs), mean)
        assert torch.isfinite(actor.log_prob(obs, act)).all()
    assert float(mean.abs().max()) <= 1.0


@pytest.mark.parametrize("make", [
    lambda enc: CategoricalActor(enc, [8], 3, "tanh"),
    lambda enc: GaussianActor(enc, [8], 2, "tanh", 0.0),
    lambda enc: TanhMeanGaussianActor(enc, [8], 2, "tanh"),
    lambda enc: SquashedGaussianActor(enc, [8], 2, "tanh"),
    lambda enc: DeterministicActor(enc, [8], 2, "tanh"),
    lambda enc: EncodedMLP(enc, [8], 3, "tanh"),
])
def test_networks_take_observations_of_any_rank_through_their_encoder(make):
    """A network on the flat encoder of (2, 3) observations computes on the flattened ones:
    the layers never see the observation's shape."""
    torch.manual_seed(15)
    net = make(FlatEncoder((2, 3)))
    obs = torch.randn(5, 2, 3)
    torch.testing.assert_close(net(obs), net(obs.reshape(5, 6)))
    assert net(obs).shape[0] == 5


# --------------------------------------------------------------------------- critics
@pytest.mark.parametrize("n", [1, 2, 3])
def test_q_critics_members_are_independent_mlps(n):
    """Member k of the batched ensemble computes exactly an MLP with its own weights, on
    cat(obs, act); changing one member's weights leaves the others unchanged."""
    torch.manual_seed(3)
    critics = QCritics(flat(5), 2, [16, 8], "relu", n=n)
    obs, act = torch.randn(9, 5), torch.randn(9, 2)
    q = critics(obs, act)
    assert q.shape == (n, 9)
    x = torch.cat((obs, act), -1)
    for k in range(n):
        h = x
        for i, (w, b) in enumerate(zip(critics.weights, critics.biases, strict=True)):
            h = h @ w[k] + b[k]
            if i < len(critics.weights) - 1:
                h = torch.relu(h)
        torch.testing.assert_close(q[k], h.squeeze(-1))
    with torch.no_grad():
        critics.weights[0][0].add_(1.0)
    q2 = critics(obs, act)
    assert not torch.equal(q2[0], q[0])
    torch.testing.assert_close(q2[1:], q[1:])


def test_q_critics_take_the_encoders_features_with_the_action():
    """The members share one encoder: (2, 3) observations are flattened before the action is
    appended."""
    torch.manual_seed(6)
    critics = QCritics(FlatEncoder((2, 3)), 2, [8], "relu", n=2)
    obs, act = torch.randn(4, 2, 3), torch.randn(4, 2)
    torch.testing.assert_close(critics(obs, act), critics(obs.reshape(4, 6), act))
    assert critics.weights[0].shape == (2, 6 + 2, 8)


def test_encoded_mlp_keeps_the_plain_mlps_parameter_names():
    """A state-value or Q-network's parameters are named as a plain MLP's (checkpoints of
    flat-observation runs stay loadable); the parameter-free flat encoder adds none."""
    net = EncodedMLP(flat(3), [8, 8], 1, "tanh")
    assert list(net.state_dict()) == list(mlp(3, [8, 8], 1).state_dict())


def test_q_critics_members_start_different():
    critics = QCritics(flat(4), 1, [32], "relu", n=2)
    assert not torch.equal(critics.weights[0][0], critics.weights[0][1])


# --------------------------------------------------------------------------- Polyak
def test_soft_update_matches_reference_per_parameter():
    """Over the flat buffers of a network (its Adam's) and its target copy, one lerp equals
    target <- (1 - tau) target + tau source for every parameter tensor."""
    torch.manual_seed(5)
    net = QCritics(flat(3), 2, [8, 8], "relu", n=2)
    target = copy.deepcopy(net).requires_grad_(False)
    optim = Adam(net.parameters(), lr=1e-2)
    target_flat = flatten_parameters(target.parameters())
    with torch.no_grad():  # make source and target differ
        for p in net.parameters():
            p.add_(torch.randn_like(p))
    before = [p.clone() for p in target.parameters()]
    tau = 0.05
    soft_update(target_flat, optim.flat, tau)
    for b, t, s in zip(before, target.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(t, (1 - tau) * b + tau * s, rtol=0, atol=1e-6)
    soft_update(target_flat, optim.flat, 1.0)  # tau = 1: a hard copy
    for t, s in zip(target.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(t, s, rtol=0, atol=0)


def test_flatten_parameters_keeps_values_and_aliases():
    net = mlp(3, [4], 2)
    values = [p.detach().clone() for p in net.parameters()]
    flat = flatten_parameters(net.parameters())
    for v, p in zip(values, net.parameters(), strict=True):
        assert torch.equal(v, p)
    flat.zero_()
    assert all(bool((p == 0).all()) for p in net.parameters())


# --------------------------------------------------------------------------- action scaling
def test_action_scaling_round_trip_at_the_bounds():
    low = np.array([-2.0, 0.0, -0.4, -np.inf], np.float32)
    high = np.array([2.0, 1.0, 0.4, np.inf], np.float32)
    np.testing.assert_array_equal(to_env(np.array([-1, -1, -1, -7.0]), low, high),
                                  np.array([-2, 0, -0.4, -7], np.float32))
    np.testing.assert_array_equal(to_env(np.array([1, 1, 1, 3.0]), low, high),
                                  np.array([2, 1, 0.4, 3], np.float32))
    # beyond [-1, 1]: clipped to the bounds; the unbounded dimension passes through
    np.testing.assert_array_equal(to_env(np.array([5, -5, 9, 1e6]), low, high),
                                  np.array([2, 0, 0.4, 1e6], np.float32))
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, size=(100, 4)).astype(np.float32)
    np.testing.assert_allclose(to_agent(to_env(a, low, high), low, high), a, atol=1e-6)
    for bound in (low, high):
        finite = np.isfinite(bound)
        np.testing.assert_array_equal(to_env(to_agent(bound, low, high), low, high)[finite],
                                      bound[finite])


def test_scale_actions_wrapper_and_torch_head_agree_bitwise():
    """The train/test envs' wrapper (numpy) and the deployable policy's head (torch) give the
    same float32 actions, so eval reproduces the test step."""
    low = np.array([-2.0, -0.4, 0.0], np.float32)
    high = np.array([2.0, 0.4, 3.0], np.float32)
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1.5, size=(500, 3)).astype(np.float32)
    head = ActionScale(low, high)
    got = head(torch.from_numpy(a)).numpy()
    np.testing.assert_array_equal(got, to_env(a, low, high))
    assert (got >= low).all() and (got <= high).all()
    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    wrapped = ScaleActions(envs)
    assert wrapped.single_action_space.low.tolist() == [-1.0]
    np.testing.assert_array_equal(wrapped.actions(np.array([[1.0], [-0.25]])),
                                  np.array([[2.0], [-0.5]], np.float32))
    envs.close()


def test_scaling_of_unbounded_dimensions_is_identity():
    offset, scale, lo, hi = scaling(np.array([-np.inf, -1.0]), np.array([np.inf, 3.0]))
    assert offset.tolist() == [0.0, 1.0] and scale.tolist() == [1.0, 2.0]
    assert lo.tolist() == [-np.inf, -1.0] and hi.tolist() == [np.inf, 1.0]
