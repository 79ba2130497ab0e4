"""CQL (rltrain.algorithms.cql): one name built as the action space needs, the conservative
penalty against hand computations (exact over discrete actions, importance-sampled over
continuous ones), its gradient, and what it changes in learning."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from algo_helpers import (
    BOX,
    BOX1,
    CPU,
    DISC,
    OBS_DIM,
    SMALL,
    bandit_learns,
    make_batch,
    progress,
    random_batch,
)
from rltrain.algorithms.cql import ContinuousCQL, CQLConfig, DiscreteCQL, build_cql
from rltrain.algorithms.dqn import DQN


def test_builds_the_kind_of_the_action_space_with_its_default_alpha():
    cont = build_cql(CQLConfig(**SMALL), BOX, CPU, 0)
    disc = build_cql(CQLConfig(**SMALL), DISC, CPU, 0)
    assert type(cont) is ContinuousCQL and type(disc) is DiscreteCQL
    assert (cont.cql_alpha, disc.cql_alpha) == (5.0, 1.0)
    assert disc.cfg.name == "cql" and disc.cfg.hidden_sizes == [32, 32]
    assert build_cql(CQLConfig(cql_alpha=2.0, **SMALL), DISC, CPU, 0).cql_alpha == 2.0


def test_discrete_penalty_by_hand_and_its_gradient():
    """Zeroed weights and a set last bias make Q(s, .) = bias for every state: the penalty is
    cql_alpha * (logsumexp(bias) - mean bias[a_data]), >= 0, and one step raises the data
    action's value against the action the data never took."""
    cql = build_cql(CQLConfig(cql_alpha=2.0, critic_lr=1e-2, **SMALL), DISC, CPU, 0)
    bias = torch.tensor([0.5, -1.0, 2.0])
    with torch.no_grad():
        cql.optim.flat.zero_()
        cql.q.net.layers[-1].bias.copy_(bias)
        cql.q_target.load_state_dict(cql.q.state_dict())
    rng = np.random.default_rng(5)
    act = rng.integers(2, size=64)  # actions 0 and 1 only: action 2 is out of the data
    # rewards equal to Q(s, a) and no bootstrap: a zero TD error, only the penalty moves Q
    rew = bias.numpy()[act]
    batch = make_batch(rng.normal(size=(64, OBS_DIM)), act, rew=rew, discount=0.0)
    stats = cql.update(batch, progress=progress(0)).stats
    by_hand = 2.0 * (math.log(sum(math.exp(b) for b in bias.tolist()))
                     - float(bias[torch.from_numpy(act)].mean()))
    assert stats.cql_penalty == pytest.approx(by_hand, rel=1e-5)
    assert stats.cql_penalty > 0
    assert stats.critic_loss == pytest.approx(by_hand, rel=1e-5)  # TD part 0
    with torch.no_grad():
        after = cql.q(torch.zeros(1, OBS_DIM))[0]
    assert float(after[2] - after[0]) < float(bias[2] - bias[0])
    assert float(after[2] - after[1]) < float(bias[2] - bias[1])
    # on any network and batch the penalty is >= 0 (logsumexp >= each value)
    torch.manual_seed(6)
    fresh = build_cql(CQLConfig(**SMALL), DISC, CPU, 0)
    for seed in range(5):
        assert fresh.update(random_batch(DISC, seed=seed), progress=progress(seed)
                            ).stats.cql_penalty >= 0


def test_discrete_without_penalty_is_dqn_exactly():
    """The penalty is the only addition: cql_alpha=0 trains the same network as DQN."""
    cfg = CQLConfig(cql_alpha=0.0, discrete_target_update_interval=3, **SMALL)
    torch.manual_seed(7)
    cql = build_cql(cfg, DISC, CPU, 0)
    torch.manual_seed(7)
    dqn = DQN(cfg.dqn_config(), DISC, CPU, 0)
    for step in range(6):
        a = cql.update(random_batch(DISC, seed=step), progress=progress(step)).stats
        b = dqn.update(random_batch(DISC, seed=step), progress=progress(step)).stats
        assert a.critic_loss == b.loss and a.cql_penalty == 0.0
    assert torch.equal(cql.optim.flat, dqn.optim.flat)


def _squashed_log_density(cql: ContinuousCQL, obs: torch.Tensor, act: torch.Tensor
                          ) -> torch.Tensor:
    """log pi(a|s) of a given action of SAC's tanh-Gaussian, computed independently of the
    actor's sample(): u = atanh(a), log N(u) - sum log(1 - a^2)."""
    actor = cql.pi
    mean, log_std = actor.net(obs).split(actor.action_dim, -1)
    lo, hi = actor.LOG_STD_MIN, actor.LOG_STD_MAX
    log_std = lo + 0.5 * (hi - lo) * (torch.tanh(log_std) + 1)
    u = torch.atanh(act.double()).float()
    normal = torch.distributions.Normal(mean, log_std.exp())
    return (normal.log_prob(u) - torch.log1p(-act.double().pow(2)).float()).sum(-1)


def test_continuous_penalty_by_hand_with_the_same_sampled_actions():
    """The penalty an update reports against a loop over states, critics and sampled actions:
    the uniform actions weigh -log(1/2^d), the pi(.|s) and pi(.|s') ones their own log
    densities (recomputed from the action here), all valued at s by the critics before the
    update. The actions are drawn as the update draws them (same seed: first the next
    action of the TD target, then the proposals)."""
    torch.manual_seed(8)
    n = 4
    cql = build_cql(CQLConfig(cql_alpha=3.0, num_sampled_actions=n, **SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, n=6, seed=8)
    obs, next_obs, act = (torch.from_numpy(x) for x in (batch.obs, batch.next_obs, batch.act))
    with torch.no_grad():
        q = cql.critic(obs, act)
        torch.manual_seed(9)
        cql.pi.sample(next_obs)  # the TD target's draw
        acts, log_density = cql.proposal_actions(obs, next_obs)
    assert acts.shape == (6, 3 * n, 2) and log_density.shape == (6, 3 * n)
    uniform, from_s, from_next = acts[:, :n], acts[:, n:2 * n], acts[:, 2 * n:]
    assert float(uniform.abs().max()) <= 1.0
    total = 0.0
    with torch.no_grad():
        for k, b in itertools.product(range(2), range(6)):  # the twin critics, the states
            terms = []
            for i in range(3 * n):
                a = acts[b, i]
                if i < n:
                    log_mu = -2 * math.log(2.0)
                else:
                    state = obs[b] if i < 2 * n else next_obs[b]
                    log_mu = float(_squashed_log_density(cql, state[None], a[None])[0])
                    assert log_mu == pytest.approx(float(log_density[b, i]), abs=2e-3)
                terms.append(float(cql.critic(obs[b][None], a[None])[k, 0]) - log_mu)
            lse = math.log(sum(math.exp(t) for t in terms))
            total += (lse - float(q[k, b])) / 6
    assert torch.equal(log_density[:, :n], torch.full((6, n), -2 * math.log(2.0)))
    assert not torch.equal(from_s, from_next)
    torch.manual_seed(9)
    stats = cql.update(batch, progress=progress(0)).stats
    assert stats.cql_penalty == pytest.approx(3.0 * total, rel=1e-3)


@pytest.mark.parametrize("backup_entropy", [False, True])
def test_continuous_td_target_with_and_without_the_entropy_bonus(backup_entropy):
    """CQL's TD target leaves out SAC's entropy bonus by default (the official code's
    backup_entropy=False): critic_loss less the penalty is the TD loss of
    r + discount * min Q_target(s', a'), with a' drawn as the update draws it."""
    assert CQLConfig().backup_entropy is False
    cql = build_cql(CQLConfig(**SMALL, init_alpha=0.5, backup_entropy=backup_entropy), BOX,
                    CPU, 0)
    batch = random_batch(BOX, seed=4)
    obs, next_obs = (torch.from_numpy(x) for x in (batch.obs, batch.next_obs))
    torch.manual_seed(7)
    with torch.no_grad():
        next_act, next_logp = cql.pi.sample(next_obs)
        soft = cql.critic_target(next_obs, next_act).min(0).values
        if backup_entropy:
            soft = soft - 0.5 * next_logp
        target = torch.from_numpy(batch.rew) + torch.from_numpy(batch.discount) * soft
        q = cql.critic(obs, torch.from_numpy(batch.act))
        td = float((q - target).pow(2).mean(1).sum())
    torch.manual_seed(7)
    stats = cql.update(batch, progress=progress(0)).stats
    assert stats.critic_loss - stats.cql_penalty == pytest.approx(td, rel=1e-5)


def test_continuous_penalty_pushes_down_sampled_and_up_data_actions():
    """Its gradient with respect to Q at the data actions is -cql_alpha / batch (descent
    raises them), and it reaches the critics through the sampled actions too. Trained on a
    dataset whose actions are all 0.5 and rewards 0, Q ends far higher there than at random
    actions; without the penalty (cql_alpha=0, SAC) it does not."""
    torch.manual_seed(10)
    cql = build_cql(CQLConfig(cql_alpha=5.0, num_sampled_actions=5, **SMALL), BOX, CPU, 0)
    obs, next_obs = torch.randn(8, OBS_DIM), torch.randn(8, OBS_DIM)
    q = torch.zeros(2, 8, requires_grad=True)
    acts, log_density = cql.proposal_actions(obs, next_obs)
    cql.penalty(q, obs, acts, log_density).backward()
    torch.testing.assert_close(q.grad, torch.full((2, 8), -5.0 / 8))
    assert all(float(p.grad.abs().sum()) > 0 for p in cql.critic.parameters())

    gaps = {}
    for cql_alpha in (5.0, 0.0):
        torch.manual_seed(10)
        cql = build_cql(CQLConfig(cql_alpha=cql_alpha, num_sampled_actions=5, critic_lr=3e-3,
                                  **SMALL), BOX, CPU, 0)
        rng = np.random.default_rng(10)
        obs = rng.normal(size=(256, OBS_DIM)).astype(np.float32)
        data = np.full((256, 2), 0.5, np.float32)
        for step in range(100):
            idx = rng.integers(256, size=64)
            cql.update(make_batch(obs[idx], data[idx], rew=np.zeros(64), discount=0.0,
                                  seed=step), progress=progress(step, 100))
        with torch.no_grad():
            x = torch.from_numpy(obs[:64])
            at_data = cql.critic(x, torch.full((64, 2), 0.5)).mean()
            elsewhere = cql.critic(x.repeat(8, 1), torch.rand(512, 2) * 2 - 1).mean()
        gaps[cql_alpha] = float(at_data - elsewhere)
    assert gaps[5.0] > 2.0 and abs(gaps[0.0]) < 0.2, gaps


def test_continuous_acts_at_the_better_data_action_where_sac_extrapolates():
    """On a one-step dataset (actions -0.5 paying 0, 0.5 paying 1), CQL settles at the better
    data action, 0.5; without the penalty (cql_alpha=0, plain SAC) the critic's extrapolation
    pulls the actor out to ~1."""
    means = {}
    for cql_alpha in (5.0, 0.0):
        torch.manual_seed(12)
        cql = build_cql(CQLConfig(cql_alpha=cql_alpha, num_sampled_actions=4, actor_lr=3e-3,
                                  critic_lr=3e-3, init_alpha=0.1, **SMALL), BOX1, CPU, 0)
        means[cql_alpha] = float(np.mean(bandit_learns(cql, BOX1, 300, seed=12)))
    assert abs(means[5.0] - 0.5) < 0.15 and means[0.0] > 0.8, means


def test_discrete_picks_the_better_data_action():
    """Action 1 pays, action 0 does not, action 2 is never in the data: a conservative learner
    picks 1 everywhere."""
    torch.manual_seed(13)
    cql = build_cql(CQLConfig(critic_lr=1e-3, **SMALL), DISC, CPU, 0)
    act = bandit_learns(cql, DISC, 300, seed=13)
    assert (act == 1).mean() > 0.95, np.bincount(act, minlength=3)
