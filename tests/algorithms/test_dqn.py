"""DQN (rltrain.algorithms.dqn): the double-Q target, the Huber loss, the target network's
copies and the epsilon schedule, each against a hand computation; prioritised replay's weights
and priorities; the dueling and noisy options."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algo_helpers import CPU, DISC, SMALL, bandit_learns, progress, random_batch
from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.dqn import DQN, DQNConfig
from rltrain.common.types import Progress
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Batch


def tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    """(obs, act, rew, discount, next_obs) as tensors, as they are stored."""
    return (torch.from_numpy(batch.obs), torch.from_numpy(batch.act),
            torch.from_numpy(batch.rew), torch.from_numpy(batch.discount),
            torch.from_numpy(batch.next_obs))


def detuned(dqn: DQN) -> DQN:
    """The target network made different from the online one."""
    with torch.no_grad():
        for p in dqn.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return dqn


@pytest.mark.parametrize("double_q", [True, False])
def test_td_target_by_hand(double_q):
    """Double Q: the target network values the online network's best next action; plain:
    the target network's own best."""
    torch.manual_seed(0)
    dqn = detuned(DQN(DQNConfig(double_q=double_q, **SMALL), DISC, CPU, 0))
    _, _, rew, discount, next_obs = tensors(random_batch(DISC, seed=1))
    with torch.no_grad():
        online, target = dqn.q(next_obs), dqn.q_target(next_obs)
    rows = torch.arange(len(rew))
    pick = online.argmax(-1) if double_q else target.argmax(-1)
    expected = rew + discount * target[rows, pick]
    torch.testing.assert_close(dqn.td_target(rew, discount, next_obs), expected)
    # the two rules disagree here: the test tells them apart
    assert not torch.equal(online.argmax(-1), target.argmax(-1))


def test_update_loss_is_the_huber_loss_against_the_td_target():
    torch.manual_seed(1)
    dqn = detuned(DQN(DQNConfig(huber_delta=0.5, **SMALL), DISC, CPU, 0))
    batch = random_batch(DISC, seed=2)
    obs, act, rew, discount, next_obs = tensors(batch)
    with torch.no_grad():
        q_sa = dqn.q(obs)[torch.arange(len(act)), act]
        target = dqn.td_target(rew, discount, next_obs)
    report = dqn.update(batch, progress=progress(0))
    assert report.gradient_steps == 1
    assert report.stats.loss == pytest.approx(float(F.smooth_l1_loss(q_sa, target, beta=0.5)),
                                              rel=1e-6)
    assert report.stats.q_mean == pytest.approx(float(q_sa.mean()), rel=1e-6)


def test_target_network_is_copied_every_target_update_interval():
    torch.manual_seed(2)
    dqn = DQN(DQNConfig(target_update_interval=3, **SMALL), DISC, CPU, 0)
    for step in range(7):
        dqn.update(random_batch(DISC, seed=step), progress=progress(step))
        same = all(torch.equal(a, b) for a, b in zip(dqn.q.parameters(),
                                                      dqn.q_target.parameters(), strict=True))
        assert same == ((step + 1) % 3 == 0), step


def test_epsilon_anneals_linearly_then_stays():
    dqn = DQN(DQNConfig(eps_start=1.0, eps_end=0.1, exploration_fraction=0.5, **SMALL), DISC,
              CPU, 0)
    assert [dqn.epsilon(f) for f in (0.0, 0.25, 0.5, 1.0)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert dqn.update(random_batch(DISC), progress=Progress(0, 0, 0.25)).stats.epsilon == \
        pytest.approx(0.55)
    obs = np.random.default_rng(3).normal(size=(2000, 3)).astype(np.float32)
    greedy = dqn.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    explored = dqn.act(obs, deterministic=False, progress=Progress(0, 0, 0.25))
    # 55% of the actions are uniform, a third of which happen to be the greedy one
    assert (explored != greedy).mean() == pytest.approx(0.55 * 2 / 3, abs=0.04)


def test_importance_weights_weight_the_huber_loss_and_priorities_are_td_errors():
    """With a hand-made weights vector the loss is mean_b w_b Huber(Q - target); priorities are
    |Q - target|; weights all 1 are the unweighted update, bit for bit."""
    batch = random_batch(DISC, seed=4)
    n = len(batch.rew)
    weights = np.linspace(0.1, 2.0, n).astype(np.float32)
    obs, act, rew, discount, next_obs = tensors(batch)
    runs = []
    for w in (weights, None, np.ones(n, np.float32)):
        torch.manual_seed(5)
        dqn = detuned(DQN(DQNConfig(**SMALL), DISC, CPU, 0))
        with torch.no_grad():
            q_sa = dqn.q(obs)[torch.arange(n), act]
            target = dqn.td_target(rew, discount, next_obs)
        report = dqn.update(dataclasses.replace(batch, weights=w), progress=progress(0))
        assert report.priorities is not None and not report.priorities.requires_grad
        torch.testing.assert_close(report.priorities, (q_sa - target).abs())
        runs.append((report, dqn.state_dict()))
    (weighted, _), (plain, state), (ones, state_ones) = runs
    huber = F.smooth_l1_loss(q_sa, target, reduction="none")
    assert weighted.stats.loss == pytest.approx(float((torch.from_numpy(weights) * huber).mean()),
                                                rel=1e-6)
    assert plain.stats.loss == pytest.approx(float(huber.mean()), rel=1e-6)
    assert plain.stats == ones.stats and torch.equal(plain.priorities, ones.priorities)
    assert all(torch.equal(state[k], state_ones[k]) for k in state)
    assert ALGORITHMS["dqn"].prioritized


@pytest.mark.parametrize(("dueling", "noisy"), [(True, False), (False, True), (True, True)])
def test_dueling_and_noisy_dqn_learn_a_bandit(dueling, noisy):
    """Both options train: on a one-step problem (action 1 pays 1, action 0 pays 0, action 2
    never taken) the greedy policy picks action 1."""
    torch.manual_seed(6)
    dqn = DQN(DQNConfig(dueling=dueling, noisy=noisy, lr=3e-3, **SMALL), DISC, CPU, 0)
    acts = bandit_learns(dqn, DISC, steps=300, seed=0)
    assert (acts == 1).mean() > 0.9


def test_noisy_dqn_draws_weight_noise_when_exploring_only():
    torch.manual_seed(7)
    dqn = DQN(DQNConfig(noisy=True, eps_start=0.0, eps_end=0.0, **SMALL), DISC, CPU, 0)
    assert dqn.weight_noise is not None
    state = dqn.weight_noise.get_state()
    obs = np.random.default_rng(8).normal(size=(512, 3)).astype(np.float32)
    greedy = dqn.act(obs, deterministic=True, progress=Progress(0, 0, 0.5))
    assert torch.equal(dqn.weight_noise.get_state(), state)  # testing leaves the stream alone
    explored = dqn.act(obs, deterministic=False, progress=Progress(0, 0, 0.5))
    assert not torch.equal(dqn.weight_noise.get_state(), state)
    assert (explored != greedy).any()  # epsilon 0: only the weight noise can differ


def test_options_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"algo.noisy_sigma0 must be > 0, got -0.5"):
        DQNConfig(noisy_sigma0=-0.5).check()
    with pytest.raises(ConfigError, match=r"algo.adam_eps must be > 0"):
        DQNConfig(adam_eps=0.0).check()


def test_init_orthogonal_or_as_pytorch_makes_the_layers():
    """``algo.init``: orthogonal layers (rows orthonormal times the gain, zero biases) or
    nn.Linear's own (uniform within 1/sqrt(inputs), biases too); anything else refused."""
    torch.manual_seed(0)
    ortho = DQN(DQNConfig(**SMALL), DISC, CPU, 0).q.net._linears
    torch.manual_seed(0)
    plain = DQN(DQNConfig(init="torch", **SMALL), DISC, CPU, 0).q.net._linears
    hidden = ortho[1].weight  # 32 x 32, gain sqrt(2)
    assert torch.allclose(hidden @ hidden.T, 2.0 * torch.eye(32), atol=1e-5)
    assert all(torch.count_nonzero(x.bias) == 0 for x in ortho)
    for layer in plain:
        bound = 1.0 / layer.in_features ** 0.5
        assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
        assert torch.count_nonzero(layer.bias) > 0
    with pytest.raises(ConfigError, match=r"algo.init must be orthogonal or torch, got 'xavier'"):
        DQNConfig(init="xavier").check()
