"""The shared parts every algorithm builds on: actors, critics, Polyak updates, action scaling
and the normalisers, each against a reference written the plain way."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal, TanhTransform, TransformedDistribution

from rltrain.actions import ActionScale, ScaleActions, scaling, to_agent, to_env
from rltrain.nets import (
    CategoricalActor,
    DeterministicActor,
    GaussianActor,
    QCritics,
    SquashedGaussianActor,
    mlp,
    sample_categorical,
)
from rltrain.normalize import ObsNormalizer, RewardScaler, RunningMoments
from rltrain.optim import Adam, flatten_parameters, soft_update


# --------------------------------------------------------------------------- actors
def test_gaussian_log_prob_and_entropy():
    torch.manual_seed(0)
    actor = GaussianActor(3, [8], 2, "tanh", init_log_std=-0.3)
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    logp, entropy = actor.log_prob_entropy(obs, act)
    ref = Normal(actor(obs), actor.log_std.exp())
    torch.testing.assert_close(logp, ref.log_prob(act).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))


@pytest.mark.parametrize("num_actions", [2, 5])
def test_categorical_log_prob_and_entropy(num_actions):
    torch.manual_seed(1)
    actor = CategoricalActor(3, [8], num_actions, "tanh")
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
    actor = SquashedGaussianActor(4, [16], 3, "relu")
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
    actor = DeterministicActor(3, [8], 2, "relu")
    out = actor(torch.randn(50, 3) * 1e3)
    assert out.shape == (50, 2) and (out.abs() <= 1).all()


# --------------------------------------------------------------------------- critics
@pytest.mark.parametrize("n", [1, 2, 3])
def test_q_critics_members_are_independent_mlps(n):
    """Member k of the batched ensemble computes exactly an MLP with its own weights, on
    cat(obs, act); changing one member's weights leaves the others unchanged."""
    torch.manual_seed(3)
    critics = QCritics(5, 2, [16, 8], "relu", n=n)
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


def test_q_critics_members_start_different():
    critics = QCritics(4, 1, [32], "relu", n=2)
    assert not torch.equal(critics.weights[0][0], critics.weights[0][1])


# --------------------------------------------------------------------------- Polyak
def test_soft_update_matches_reference_per_parameter():
    """Over the flat buffers of a network (its Adam's) and its target copy, one lerp equals
    target <- (1 - tau) target + tau source for every parameter tensor."""
    torch.manual_seed(5)
    net = QCritics(3, 2, [8, 8], "relu", n=2)
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


# --------------------------------------------------------------------------- normalisers
def test_running_moments_match_numpy_over_all_batches():
    rng = np.random.default_rng(2)
    moments = RunningMoments((3,))
    seen = []
    for n in (1, 5, 17, 2, 40):
        x = rng.normal(3.0, 2.0, size=(n, 3))
        seen.append(x)
        moments.update(torch.from_numpy(x))
    every = np.concatenate(seen)
    np.testing.assert_allclose(moments.mean.numpy(), every.mean(0), rtol=1e-12)
    np.testing.assert_allclose(moments.var.numpy(), every.var(0), rtol=1e-10)
    assert int(moments.count) == len(every)


def test_obs_normalizer_normalises_and_clips():
    norm = ObsNormalizer(2, clip=5.0, epsilon=1e-8)
    x = torch.tensor([[10.0, -1.0], [12.0, 1.0], [14.0, 0.0]])
    norm.update(x)
    out = norm(x)
    torch.testing.assert_close(out.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
    assert norm(torch.tensor([[1e6, -1e6]])).tolist() == [[5.0, -5.0]]


def test_reward_scaler_tracks_the_discounted_return():
    """The statistic is over R_t = gamma R_{t-1} + r_t per env, reset at episode ends; lanes
    marked invalid (next-step reset steps) are left out."""
    scaler = RewardScaler(2, gamma=0.5, clip=10.0, epsilon=0.0)
    ones, no = np.ones(2), np.zeros(2, bool)
    scaler.observe(ones, no, None)  # R = [1, 1]
    scaler.observe(ones, np.array([True, False]), None)  # R = [1.5, 1.5], env 0 ends
    scaler.observe(np.array([4.0, 1.0]), no, np.array([False, True]))  # env 1: R = 1.75
    seen = np.array([1, 1, 1.5, 1.5, 1.75])
    np.testing.assert_allclose(scaler.moments.mean.numpy(), seen.mean())
    np.testing.assert_allclose(scaler.factor(), 1 / seen.std(), rtol=1e-9)
    assert scaler.returns.tolist() == [0.0, 1.75]
    assert scaler.scale(np.array([1e9]))[0] == 10.0
