"""IQL (rltrain.algorithms.iql): the expectile loss, the advantage weights and the actor's
cosine schedule as functions, one update against a hand computation, and in-sample learning
of the better data action (its Gaussian policy is tested in test_nets.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algo_helpers import BOX, BOX1, CPU, DISC, SMALL, bandit_learns, progress, random_batch
from rltrain.algorithms.iql import IQL, IQLConfig, awr_weights, cosine_lr, expectile_loss
from rltrain.common.types import Progress


def test_expectile_loss_weighs_positive_residuals_tau_and_negative_one_minus_tau():
    diff = torch.tensor([2.0, -2.0, 0.5, 0.0])
    torch.testing.assert_close(expectile_loss(diff, 0.7),
                               torch.tensor([0.7 * 4, 0.3 * 4, 0.7 * 0.25, 0.0]))
    torch.testing.assert_close(expectile_loss(diff, 0.5), 0.5 * diff.pow(2))
    # its minimiser over a constant is the expectile: above the mean for tau > 1/2
    samples = torch.tensor([0.0, 0.0, 0.0, 1.0])
    v = torch.zeros((), requires_grad=True)
    for _ in range(200):  # gradient descent
        (grad,) = torch.autograd.grad(expectile_loss(samples - v, 0.9).mean(), v)
        v = (v - 0.5 * grad).detach().requires_grad_()
    assert float(v.detach()) == pytest.approx(0.75, abs=1e-4)  # 0.9 (1 - v) = 0.1 * 3 v


def test_awr_weights_are_exponential_advantages_clipped_at_max_weight():
    adv = torch.tensor([0.0, 1.0, -1.0, 2.0, 1e4])
    w = awr_weights(adv, beta=3.0, max_weight=100.0)
    torch.testing.assert_close(w, torch.tensor([1.0, math.exp(3), math.exp(-3), 100.0, 100.0]))
    assert torch.isfinite(w).all()


def test_actor_lr_follows_a_cosine_of_progress():
    assert cosine_lr(1e-3, 0.0) == 1e-3
    assert cosine_lr(1e-3, 0.5) == pytest.approx(5e-4)
    assert cosine_lr(1e-3, 1.0) == pytest.approx(0.0, abs=1e-12)
    iql = IQL(IQLConfig(**SMALL), BOX, CPU, 0)
    assert iql.update(random_batch(BOX), progress=Progress(0, 5, 0.5)).stats.actor_lr == \
        pytest.approx(1.5e-4)
    flat = IQL(IQLConfig(actor_lr_cosine=False, **SMALL), BOX, CPU, 0)
    assert flat.update(random_batch(BOX), progress=Progress(0, 5, 0.5)).stats.actor_lr == 3e-4


def test_value_targets_and_polyak():
    """One update: the value loss is the expectile loss against the smaller target critic at
    the data action; the targets move by Polyak only; data actions at exactly +-1 are fine."""
    torch.manual_seed(11)
    iql = IQL(IQLConfig(tau=0.1, expectile=0.8, **SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, n=16)
    batch.act[:4] = 1.0
    batch.act[4:8] = -1.0
    obs, act = torch.from_numpy(batch.obs), torch.from_numpy(batch.act)
    with torch.no_grad():
        u = iql.critic_target(obs, act).min(0).values - iql.value(obs).squeeze(-1)
        expected = float(torch.where(u > 0, 0.8, 0.2).mul(u.pow(2)).mean())
    before = iql.critic_target_flat.clone()
    report = iql.update(batch, progress=progress(0))
    stats = report.stats
    assert report.gradient_steps == 1
    assert stats.value_loss == pytest.approx(expected, rel=1e-5)
    assert all(math.isfinite(v) for v in (stats.actor_loss, stats.critic_loss))
    torch.testing.assert_close(iql.critic_target_flat, 0.9 * before + 0.1 * iql.critic_optim.flat,
                               rtol=0, atol=1e-6)


def test_continuous_prefers_the_better_data_action():
    """Behaviour cloning would act at the data's mean, 0; IQL acts towards 0.5."""
    torch.manual_seed(12)
    iql = IQL(IQLConfig(actor_lr=3e-3, critic_lr=3e-3, value_lr=3e-3, **SMALL), BOX1, CPU, 0)
    act = bandit_learns(iql, BOX1, 300, seed=12)
    assert float(np.mean(act)) > 0.25, float(np.mean(act))


def test_discrete_picks_the_better_data_action():
    """Action 1 pays, action 0 does not, action 2 is never in the data: an in-sample learner
    picks 1 everywhere."""
    torch.manual_seed(13)
    act = bandit_learns(IQL(IQLConfig(actor_lr=1e-3, **SMALL), DISC, CPU, 0), DISC, 300,
                        seed=13)
    assert (act == 1).mean() > 0.95, np.bincount(act, minlength=3)
