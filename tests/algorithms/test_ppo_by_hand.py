"""PPO's minibatch step with its gradient written out (``rltrain.algorithms.ppo_by_hand``)
against the same step through autograd (``PPO.clipped_losses``): the networks' backward
(``MLP.backward_into``), each actor's distribution backward, and whole steps over the PPO
options, in float64."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.envs.vector import space_info
from rltrain.nets.actors_critics import (
    MLP,
    categorical_log_prob_entropy,
    categorical_log_prob_entropy_kept,
    gaussian_log_prob_entropy,
    gaussian_log_prob_entropy_kept,
)


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_an_mlps_backward_by_hand_equals_autograds(float64, activation):
    torch.manual_seed(0)
    net = MLP([5, 16, 16, 3], activation, 1.0)
    x, grad_out = torch.randn(32, 5), torch.randn(32, 3)
    net.forward(x).backward(grad_out)
    expected = [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = torch.full_like(p, float("nan"))  # every entry must be written over
    inputs, out = net.forward_kept(x)
    # tanh written as 2 sigmoid(2x) - 1 (rltrain.nets.actors_critics._tanh_of_doubled_): equal up to
    # rounding
    assert torch.allclose(out, net.forward(x).detach(), rtol=1e-13, atol=1e-15)
    assert not out.requires_grad
    net.backward_into(inputs, grad_out)
    for p, e in zip(net.parameters(), expected, strict=True):
        assert torch.allclose(p.grad, e, rtol=1e-13, atol=1e-15)


def test_the_written_out_tanh_is_tanh_to_float_precision():
    from rltrain.nets.actors_critics import _tanh_of_doubled_

    def _tanh_(x: torch.Tensor) -> torch.Tensor:  # as a layer gives it: 2x, then in place
        return _tanh_of_doubled_(x.mul_(2.0))

    x = torch.linspace(-30.0, 30.0, 200_001, dtype=torch.float64)
    exact = torch.tanh(x)
    assert (_tanh_(x.clone()) - exact).abs().max() < 1e-15
    assert (_tanh_(x.float()).double() - exact).abs().max() < 3e-7
    edges = _tanh_(torch.tensor([float("nan"), float("inf"), -float("inf")]))
    assert edges[0].isnan() and edges[1:].tolist() == [1.0, -1.0]


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="needs a CUDA device"))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_doubled_layers_tanh_is_the_four_pass_tanh_bit_for_bit(dtype, device):
    """A tanh layer's forward written out doubles its pre-activation inside the matrix
    product (``addmm``/``baddbmm`` with alpha = beta = 2) and takes two passes after it: the
    same bits as ``2 sigmoid(2z) - 1`` in four passes on the plain product. (On CUDA the -1
    is a CPU number tensor, which a CUDA op takes as a number.)"""
    from rltrain.nets.actors_critics import _tanh_of_doubled_

    g = torch.Generator().manual_seed(4)
    for batch, width, copies in ((256, 64, 1), (7, 33, 3), (1, 5, 2)):
        x, w, b = (t.to(device) for t in (
            torch.randn(copies, batch, width, generator=g, dtype=dtype) * 3,
            torch.randn(copies, 64, width, generator=g, dtype=dtype) * 2,
            torch.randn(copies, 64, generator=g, dtype=dtype)))
        four = torch.addmm(b[0], x[0], w[0].t()).mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)
        two = _tanh_of_doubled_(torch.addmm(b[0], x[0], w[0].t(), beta=2.0, alpha=2.0))
        assert torch.equal(two, four)
        stacked = torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        four = stacked.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)
        two = _tanh_of_doubled_(torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2), beta=2.0,
                                              alpha=2.0))
        assert torch.equal(two, four)


def test_backward_into_needs_the_gradients_to_exist():
    net = MLP([2, 4, 1], "tanh", 1.0)
    inputs, _ = net.forward_kept(torch.randn(3, 2))
    with pytest.raises(RuntimeError, match="zero the optimiser's gradients first"):
        net.backward_into(inputs, torch.randn(3, 1))


def _ppo(env_id: str, **cfg) -> PPO:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)])
    info = space_info(envs, env_id)
    envs.close()
    torch.manual_seed(0)
    return PPO(PPOConfig(**cfg), info, torch.device("cpu"), 0)


def test_the_distributions_backward_equals_autograds(float64):
    """d loss / d (network output) and d loss / d log_std from d loss / d (logp, entropy), for
    one minibatch and for copies stacked in front of it."""
    g = torch.Generator().manual_seed(1)
    for discrete, shape in ((True, (20,)), (False, (20,)), (True, (3, 20)), (False, (3, 20))):
        out = torch.randn(*shape, 2, generator=g)
        act = torch.randint(0, 2, shape, generator=g) if discrete else torch.randn(
            *shape, 2, generator=g)
        log_std = torch.randn(*shape[:-1], 1, 2, generator=g).expand_as(out)
        grad_logp, grad_entropy = torch.randn(*shape, generator=g), torch.randn(*shape,
                                                                                generator=g)
        leaf, std_leaf = out.clone().requires_grad_(), log_std.clone().requires_grad_()
        if discrete:
            logp, entropy = categorical_log_prob_entropy(leaf, act)
            kept = categorical_log_prob_entropy_kept(out, act)
        else:
            logp, entropy = gaussian_log_prob_entropy(leaf, std_leaf, act)
            kept = gaussian_log_prob_entropy_kept(out, log_std, act)
        ((logp * grad_logp).sum() + (entropy * grad_entropy).sum()).backward()
        logp_k, entropy_k, backward = kept
        assert torch.allclose(logp_k, logp.detach(), rtol=0, atol=1e-14)
        assert torch.allclose(entropy_k, entropy.detach(), rtol=0, atol=1e-14)
        grad_out, grad_log_std = backward(grad_logp, grad_entropy)
        assert torch.allclose(grad_out, leaf.grad, rtol=1e-13, atol=1e-15)
        if discrete:
            assert grad_log_std is None
        else:
            assert torch.allclose(grad_log_std, std_leaf.grad, rtol=1e-13, atol=1e-15)


OPTIONS = [
    {},
    {"ent_coef": 0.01, "value_clip": 0.2},
    {"normalize_advantage": False, "max_grad_norm": None, "activation": "relu"},
    {"ent_coef": 0.05, "value_clip": 0.05, "clip_ratio": 0.05},
]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("options", OPTIONS)
def test_ppos_minibatch_steps_by_hand_equal_autograds(float64, env_id, options):
    """Eight minibatch steps from the same state, by hand and through autograd: the
    parameters, Adam's moments and the stats agree to 1e-12 (rounding only). The old
    log-probabilities are moved so that many ratios fall outside the clip range, and the old
    values so that value clipping cuts."""
    algo = _ppo(env_id, **options)
    assert algo.by_hand
    g = torch.Generator().manual_seed(2)
    n = 96
    obs = torch.randn(n, algo.info.obs_shape[0], generator=g)
    act = (torch.randint(0, algo.info.num_actions, (n,), generator=g) if algo.discrete
           else torch.randn(n, *algo.info.action_shape, generator=g))
    adv, ret = torch.randn(n, generator=g), torch.randn(n, generator=g)
    old_v = ret + torch.randn(n, generator=g)
    with torch.no_grad():
        old_logp, _ = algo.pi.log_prob_entropy(obs, act)
    old_logp = old_logp + 0.3 * torch.randn(n, generator=g)
    start = {name: getattr(algo.optim, name).clone() for name in ("flat", "exp_avg", "exp_avg_sq")}
    results = {}
    for by_hand in (False, True):
        for name, value in start.items():
            getattr(algo.optim, name).copy_(value)
        algo.optim.steps = 0
        algo.by_hand = by_hand
        stats = torch.stack([algo._minibatch(obs, act, adv, ret, old_v, old_logp)
                             for _ in range(8)])
        results[by_hand] = (stats, *(getattr(algo.optim, name).clone() for name in start))
    clipfrac = results[False][0][:, 4]
    assert clipfrac.max() > 0.1  # the clipped branch was taken
    assert not torch.equal(results[True][1], start["flat"])  # it learned
    for autograd, hand in zip(results[False], results[True], strict=True):
        assert torch.allclose(hand, autograd, rtol=1e-12, atol=1e-12)


def test_only_plain_ppo_on_vector_observations_steps_by_hand():
    assert _ppo("CartPole-v1").by_hand
    assert not _ppo("CartPole-v1", share_encoder=True).by_hand  # a shared encoder: autograd


@pytest.mark.parametrize(("n", "size", "options"), [
    (246, 256, {}),  # one minibatch a pass, shorter than the batch size (CartPole's rollouts)
    (100, 32, {}),  # a shorter last minibatch in each pass
    (97, 32, {"value_clip": 0.2, "ent_coef": 0.01}),  # ... of one sample
    (64, 16, {"normalize_advantage": False}),
])
def test_an_updates_steps_by_hand_are_its_minibatch_steps_one_by_one(n, size, options):
    """The update's steps by hand (gathered once, advantages normalised for all minibatches
    at once, stats reduced at the end: ``ppo_by_hand.update_steps``, which
    ``PPO.minibatch_steps`` runs) against ``PPO._minibatch`` on each minibatch in turn: the
    same parameters and Adam moments bit for bit, the same stats up to rounding. float32, as
    runs train."""
    algo = _ppo("CartPole-v1", **options)
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(n, 4, generator=g)
    act = torch.randint(0, 2, (n,), generator=g)
    adv, ret = torch.randn(n, generator=g), torch.randn(n, generator=g)
    old_v = ret + torch.randn(n, generator=g)
    with torch.no_grad():
        old_logp, _ = algo.pi.log_prob_entropy(obs, act)
    old_logp = old_logp + 0.3 * torch.randn(n, generator=g)
    tensors = (obs, act, adv, ret, old_v, old_logp)
    perms = [torch.randperm(n, generator=g) for _ in range(4)]
    names = ("flat", "exp_avg", "exp_avg_sq")
    start = {name: getattr(algo.optim, name).clone() for name in names}

    assert algo.by_hand
    sums, steps = algo.minibatch_steps(tensors, perms, size)
    together = [getattr(algo.optim, name).clone() for name in names]
    for name, value in start.items():
        getattr(algo.optim, name).copy_(value)
    algo.optim.steps = 0
    one_by_one = [algo._minibatch(*(t[perm[a:a + size]] for t in tensors))
                  for perm in perms for a in range(0, n, size)]

    assert steps == len(one_by_one) == 4 * -(-n // size)
    assert not torch.equal(together[0], start["flat"])  # it learned
    for name, value in zip(names, together, strict=True):
        assert torch.equal(value, getattr(algo.optim, name)), name
    assert torch.allclose(sums, torch.stack(one_by_one).sum(0), rtol=1e-5, atol=1e-6)
