"""TD3+BC (rltrain.algorithms.td3bc): the actor's loss, the Q term normalised by lambda plus
behaviour cloning, against a hand computation; its terms reported on actor steps only; and a
preference for the better data action."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from algo_helpers import BOX, BOX1, CPU, SMALL, bandit_learns, progress, random_batch
from rltrain.algorithms.td3bc import TD3BC, TD3BCConfig


def test_actor_loss_is_q_normalised_plus_bc_by_hand():
    """On an actor step: actor_loss = -lambda mean Q1(s, pi(s)) + mean (pi(s) - a)^2 with
    lambda = alpha / mean |Q1(s, pi(s))|, pi the actor before its step, Q1 the critic after
    its own (which comes first)."""
    torch.manual_seed(3)
    td3bc = TD3BC(TD3BCConfig(alpha=2.5, **SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, n=64, seed=3)
    obs, act = torch.from_numpy(batch.obs), torch.from_numpy(batch.act)
    pi_before = copy.deepcopy(td3bc.pi)
    stats = td3bc.update(batch, progress=progress(0)).stats
    with torch.no_grad():
        pi = pi_before(obs)
        q = td3bc.critic(obs, pi)[0]
        lmbda = 2.5 / q.abs().mean()
        bc_mse = ((pi - act) ** 2).mean()
    assert stats.lmbda == pytest.approx(float(lmbda), rel=1e-5)
    assert stats.bc_mse == pytest.approx(float(bc_mse), rel=1e-5)
    assert stats.actor_loss == pytest.approx(float(-lmbda * q.mean() + bc_mse), rel=1e-5)


def test_lambda_makes_the_loss_indifferent_to_the_critics_scale():
    """A critic ten times larger gives a tenth of lambda and the same actor loss. (The
    critics learn at a negligible rate here, so their scale is what was set.)"""
    torch.manual_seed(4)
    plain = TD3BC(TD3BCConfig(critic_lr=1e-30, **SMALL), BOX, CPU, 0)
    scaled = copy.deepcopy(plain)
    with torch.no_grad():
        scaled.critic.weights[-1].mul_(10.0)
        scaled.critic.biases[-1].mul_(10.0)
    batch = random_batch(BOX, n=64, seed=4)
    torch.manual_seed(5)
    a = plain.update(batch, progress=progress(0)).stats
    torch.manual_seed(5)
    b = scaled.update(batch, progress=progress(0)).stats
    assert b.lmbda == pytest.approx(a.lmbda / 10, rel=1e-5)
    assert b.actor_loss == pytest.approx(a.actor_loss, rel=1e-5)
    assert b.bc_mse == pytest.approx(a.bc_mse, rel=1e-6)


def test_reports_its_terms_on_actor_steps_only():
    """The actor (policy_delay 2) moves on even steps, which report bc_mse, lambda and the
    actor's loss; odd steps report None for all three."""
    torch.manual_seed(4)
    td3bc = TD3BC(TD3BCConfig(**SMALL), BOX, CPU, 0)
    assert td3bc.cfg.policy_delay == 2
    for step in range(4):
        actor = td3bc.actor_optim.flat.clone()
        stats = td3bc.update(random_batch(BOX, seed=step), progress=progress(step)).stats
        moved = not torch.equal(actor, td3bc.actor_optim.flat)
        assert moved == (step % 2 == 0)
        if moved:
            assert stats.bc_mse > 0 and stats.lmbda > 0 and math.isfinite(stats.actor_loss)
        else:
            assert (stats.actor_loss, stats.bc_mse, stats.lmbda) == (None, None, None)
        assert math.isfinite(stats.critic_loss) and math.isfinite(stats.q_mean)


def test_prefers_the_better_data_action():
    """Behaviour cloning would act at the data's mean, 0; TD3+BC acts towards 0.5."""
    torch.manual_seed(12)
    act = bandit_learns(TD3BC(TD3BCConfig(**SMALL), BOX1, CPU, 0), BOX1, 300, seed=12)
    assert float(np.mean(act)) > 0.25, float(np.mean(act))
