"""The offline algorithms (BC, TD3+BC, CQL, IQL), built directly: each loss against a hand
computation, the refactored hooks of DQN, SAC and DDPG, and each algorithm learning the better
data action of a one-step problem in a few hundred gradient steps."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from rltrain.algorithms import ALGORITHMS, CONTINUOUS, DISCRETE, Progress
from rltrain.algorithms.bc import BC, BCConfig
from rltrain.algorithms.cql import CQL, ContinuousCQL, CQLConfig, DiscreteCQL
from rltrain.algorithms.dqn import DQN
from rltrain.algorithms.iql import IQL, IQLConfig, awr_weights, cosine_lr, expectile_loss
from rltrain.algorithms.td3bc import TD3BC, TD3BCConfig
from rltrain.config import ConfigError
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo
from rltrain.nets import TanhMeanGaussianActor

CPU = torch.device("cpu")
OBS_DIM = 3
BOX = SpaceInfo((OBS_DIM,), None, (2,), np.array([-2, -1], np.float32),
                np.array([2, 3], np.float32), None, "test")
BOX1 = SpaceInfo((OBS_DIM,), None, (1,), np.array([-1], np.float32), np.array([1], np.float32),
                 None, "test")
DISC = SpaceInfo((OBS_DIM,), 3, (), None, None, None, "test")
SMALL = {"hidden_sizes": [32, 32]}


def make_batch(obs: np.ndarray, act: np.ndarray, rew: np.ndarray | None = None,
               discount: float = 0.99, seed: int = 0) -> Batch:
    n = len(obs)
    rng = np.random.default_rng(seed)
    return Batch(obs=obs.astype(np.float32), act=act,
                 rew=(rng.normal(size=n) if rew is None else rew).astype(np.float32),
                 next_obs=rng.normal(size=obs.shape).astype(np.float32),
                 discount=np.full(n, discount, np.float32), lanes=np.zeros(n, np.int64),
                 positions=np.arange(n))


def random_batch(info: SpaceInfo, n: int = 32, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, OBS_DIM))
    act = (rng.integers(info.action_dim, size=n) if info.discrete
           else rng.uniform(-1, 1, size=(n, info.action_dim)).astype(np.float32))
    return make_batch(obs, act, seed=seed + 1)


def progress(step: int, steps: int = 1) -> Progress:
    return Progress(0, step, step / steps)


# --------------------------------------------------------------------------- schemas
@pytest.mark.parametrize(("cfg", "field"), [
    (BCConfig(lr=0.0), "algo.lr"),
    (TD3BCConfig(alpha=-1.0), "algo.alpha"),
    (CQLConfig(cql_alpha=-1.0), "algo.cql_alpha"),
    (CQLConfig(num_sampled_actions=0), "algo.num_sampled_actions"),
    (CQLConfig(discrete_target_update_interval=0), "algo.discrete_target_update_interval"),
    (IQLConfig(expectile=1.0), "algo.expectile"),
    (IQLConfig(beta=-0.5), "algo.beta"),
    (IQLConfig(max_weight=0.0), "algo.max_weight"),
])
def test_offline_schemas_check_their_own_fields(cfg, field):
    with pytest.raises(ConfigError, match=field):
        cfg.check()


OFFLINE = [(name, info) for name in ("bc", "cql", "iql", "td3bc") for info in (BOX, DISC)
           if (DISCRETE if info.discrete else CONTINUOUS) in ALGORITHMS[name].actions]


@pytest.mark.parametrize(("name", "info"), OFFLINE,
                         ids=[f"{n}-{'discrete' if i.discrete else 'box'}" for n, i in OFFLINE])
def test_offline_algorithms_on_each_action_space(name, info):
    """Registered for the offline trainer only; the stats the console shows are in the
    update stats of every action space the algorithm accepts, all numbers; the deployable
    policy acts in the env's space; the training state restores exactly."""
    spec = ALGORITHMS[name]
    assert spec.trainers == ("offline",)
    algo = spec.cls(spec.config(**SMALL), info, CPU, 0)
    stats = dataclasses.asdict(algo.update(random_batch(info), progress=progress(0)))
    assert {key for key, _ in spec.console} <= stats.keys()
    assert all(math.isfinite(float(v)) for v in stats.values())
    obs = np.random.default_rng(0).normal(size=(5, OBS_DIM)).astype(np.float32)
    act = algo.act(obs, deterministic=True, progress=progress(0))
    assert act.shape == (5, *info.action_shape)
    with torch.no_grad():
        env_act = algo.deployable()(torch.from_numpy(obs)).numpy()
    if info.discrete:
        np.testing.assert_array_equal(env_act, act)
    else:
        assert (env_act >= info.action_low).all() and (env_act <= info.action_high).all()
    state = algo.training_state()
    other = spec.cls(spec.config(**SMALL), info, CPU, 1)
    other.load_training_state(state)
    np.testing.assert_array_equal(other.act(obs, deterministic=True, progress=progress(0)), act)


# --------------------------------------------------------------------------- BC
def test_bc_continuous_loss_is_zero_at_the_actors_own_actions():
    torch.manual_seed(0)
    bc = BC(BCConfig(**SMALL), BOX, CPU, 0)
    obs = np.random.default_rng(0).normal(size=(64, OBS_DIM)).astype(np.float32)
    own = bc.act(obs, deterministic=True, progress=progress(0))
    assert bc.update(make_batch(obs, own), progress=progress(0)).loss < 1e-12
    other = np.clip(own + 0.1, -1, 1)
    with torch.no_grad():
        now = bc.pi(torch.from_numpy(obs)).numpy()  # the actor after that (zero-gradient) step
    loss = bc.update(make_batch(obs, other), progress=progress(1)).loss
    assert loss == pytest.approx(float(np.mean((now - other) ** 2)), rel=1e-5)
    assert loss > 1e-3


def test_bc_continuous_mimics_a_linear_expert():
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    w = rng.normal(size=(OBS_DIM, 2)) * 0.5
    obs = rng.normal(size=(512, OBS_DIM)).astype(np.float32)
    expert = np.clip(obs @ w, -1, 1).astype(np.float32)
    bc = BC(BCConfig(hidden_sizes=[64, 64], lr=1e-3), BOX, CPU, 0)
    first = None
    for step in range(300):
        idx = rng.integers(len(obs), size=64)
        stats = bc.update(make_batch(obs[idx], expert[idx]), progress=progress(step, 300))
        first = stats.loss if first is None else first
    test_obs = rng.normal(size=(256, OBS_DIM)).astype(np.float32)
    err = bc.act(test_obs, deterministic=True, progress=progress(0)) - np.clip(test_obs @ w, -1, 1)
    assert float(np.mean(err ** 2)) < 0.02 < first


def test_bc_discrete_cross_entropy_falls_and_accuracy_reaches_one():
    """A fixed expert mapping (the action is the index of the largest of the three features):
    cross-entropy falls and the batch accuracy reaches 1."""
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(256, OBS_DIM)).astype(np.float32)
    expert = obs.argmax(1)
    bc = BC(BCConfig(hidden_sizes=[64, 64], lr=3e-3), DISC, CPU, 0)
    batch = make_batch(obs, expert)
    stats = [bc.update(batch, progress=progress(step)) for step in range(300)]
    assert stats[-1].loss < 0.2 * stats[0].loss
    assert stats[0].accuracy < 0.7 and stats[-1].accuracy == 1.0
    greedy = bc.act(obs, deterministic=True, progress=progress(0))
    assert (greedy == expert).all()


# --------------------------------------------------------------------------- TD3+BC
def test_td3bc_actor_loss_is_q_normalised_plus_bc_by_hand():
    torch.manual_seed(3)
    td3bc = TD3BC(TD3BCConfig(alpha=2.5, **SMALL), BOX, CPU, 0)
    obs, act = torch.randn(64, OBS_DIM), torch.rand(64, 2) * 2 - 1
    with torch.no_grad():
        pi = td3bc.pi(obs)
        q = td3bc.critic(obs, pi)[0]
        expected = -2.5 * q.mean() / q.abs().mean() + ((pi - act) ** 2).mean()
        assert float(td3bc.actor_loss(obs, act)) == pytest.approx(float(expected), rel=1e-5)
        bc_mse, lmbda = td3bc._bc_stats
        assert lmbda == pytest.approx(2.5 / float(q.abs().mean()), rel=1e-5)
        assert bc_mse == pytest.approx(float(((pi - act) ** 2).mean()), rel=1e-5)
        # lambda normalises the Q term: scaling the critic by 10 leaves the loss as it is
        td3bc.critic.weights[-1].mul_(10.0)
        td3bc.critic.biases[-1].mul_(10.0)
        assert float(td3bc.actor_loss(obs, act)) == pytest.approx(float(expected), rel=1e-5)


def test_td3bc_reports_its_terms_and_delays_the_actor():
    torch.manual_seed(4)
    td3bc = TD3BC(TD3BCConfig(**SMALL), BOX, CPU, 0)
    for step in range(4):
        actor = td3bc.actor_optim.flat.clone()
        stats = td3bc.update(random_batch(BOX, seed=step), progress=progress(step))
        assert (not torch.equal(actor, td3bc.actor_optim.flat)) == (step % 2 == 0)
        assert stats.bc_mse > 0 and stats.lmbda > 0 and math.isfinite(stats.actor_loss)


# --------------------------------------------------------------------------- CQL
def test_cql_builds_the_kind_of_the_action_space_with_its_default_alpha():
    cont, disc = CQL(CQLConfig(**SMALL), BOX, CPU, 0), CQL(CQLConfig(**SMALL), DISC, CPU, 0)
    assert isinstance(cont, ContinuousCQL) and isinstance(disc, DiscreteCQL)
    assert (cont.cql_alpha, disc.cql_alpha) == (5.0, 1.0)
    assert disc.cfg.name == "cql" and disc.cfg.hidden_sizes == [32, 32]
    assert CQL(CQLConfig(cql_alpha=2.0, **SMALL), DISC, CPU, 0).cql_alpha == 2.0


def test_discrete_cql_penalty_by_hand_and_its_gradient():
    """Zeroed weights and a set last bias make Q(s, .) = bias for every state: the penalty is
    cql_alpha * (logsumexp(bias) - mean bias[a_data]), >= 0, and one step raises the data
    action's value against the action the data never took."""
    cql = CQL(CQLConfig(cql_alpha=2.0, critic_lr=1e-2, **SMALL), DISC, CPU, 0)
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
    stats = cql.update(batch, progress=progress(0))
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
    fresh = CQL(CQLConfig(**SMALL), DISC, CPU, 0)
    for seed in range(5):
        assert fresh.update(random_batch(DISC, seed=seed), progress=progress(seed)
                            ).cql_penalty >= 0


def test_discrete_cql_without_penalty_is_dqn_exactly():
    """The td_loss hook adds nothing else: cql_alpha=0 trains the same network as DQN."""
    cfg = CQLConfig(cql_alpha=0.0, discrete_target_update_interval=3, **SMALL)
    torch.manual_seed(7)
    cql = CQL(cfg, DISC, CPU, 0)
    torch.manual_seed(7)
    dqn = DQN(cfg.dqn_config(), DISC, CPU, 0)
    for step in range(6):
        a = cql.update(random_batch(DISC, seed=step), progress=progress(step))
        b = dqn.update(random_batch(DISC, seed=step), progress=progress(step))
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


def test_continuous_cql_penalty_by_hand_with_the_same_sampled_actions():
    """The penalty against a loop over states, critics and sampled actions: the uniform actions
    weigh -log(1/2^d), the pi(.|s) and pi(.|s') ones their own log densities (recomputed from
    the action here), all valued at s."""
    torch.manual_seed(8)
    n = 4
    cql = CQL(CQLConfig(cql_alpha=3.0, num_sampled_actions=n, **SMALL), BOX, CPU, 0)
    obs, next_obs = torch.randn(6, OBS_DIM), torch.randn(6, OBS_DIM)
    act = torch.rand(6, 2) * 2 - 1
    with torch.no_grad():
        q = cql.critic(obs, act)
        torch.manual_seed(9)
        cql.critic_loss(q, torch.zeros(6), obs, next_obs)
        penalty = float(cql._cql_penalty)
        torch.manual_seed(9)  # the same draws as inside critic_loss
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
    assert penalty == pytest.approx(3.0 * total, rel=1e-3)
    assert torch.equal(log_density[:, :n], torch.full((6, n), -2 * math.log(2.0)))
    assert not torch.equal(from_s, from_next)


@pytest.mark.parametrize("backup_entropy", [False, True])
def test_continuous_cql_td_target_with_and_without_the_entropy_bonus(backup_entropy):
    """CQL's TD target leaves out SAC's entropy bonus by default (the official code's
    backup_entropy=False): critic_loss less the penalty is the TD loss of
    r + discount * min Q_target(s', a'), with a' drawn as the update draws it."""
    assert CQLConfig().backup_entropy is False
    cql = CQL(CQLConfig(**SMALL, init_alpha=0.5, backup_entropy=backup_entropy), BOX, CPU, 0)
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
    stats = cql.update(batch, progress=progress(0))
    assert stats.critic_loss - stats.cql_penalty == pytest.approx(td, rel=1e-5)


def test_continuous_cql_penalty_pushes_down_sampled_and_up_data_actions():
    """Its gradient with respect to Q at the data actions is -cql_alpha / batch (descent
    raises them), and it reaches the critics through the sampled actions too. Trained on a
    dataset whose actions are all 0.5 and rewards 0, Q ends far higher there than at random
    actions; without the penalty (cql_alpha=0, SAC) it does not."""
    torch.manual_seed(10)
    cql = CQL(CQLConfig(cql_alpha=5.0, num_sampled_actions=5, **SMALL), BOX, CPU, 0)
    obs, next_obs = torch.randn(8, OBS_DIM), torch.randn(8, OBS_DIM)
    q = torch.zeros(2, 8, requires_grad=True)
    acts, log_density = cql.proposal_actions(obs, next_obs)
    cql.penalty(q, obs, acts, log_density).backward()
    torch.testing.assert_close(q.grad, torch.full((2, 8), -5.0 / 8))
    assert all(float(p.grad.abs().sum()) > 0 for p in cql.critic.parameters())

    gaps = {}
    for cql_alpha in (5.0, 0.0):
        torch.manual_seed(10)
        cql = CQL(CQLConfig(cql_alpha=cql_alpha, num_sampled_actions=5, critic_lr=3e-3,
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


# --------------------------------------------------------------------------- IQL
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


def test_iql_policy_is_a_gaussian_around_a_tanh_mean():
    """log pi(a|s) is torch's Normal(tanh(f(s)), exp(log_std)) density, finite at the bounds;
    its log std is clamped; its deterministic action is the mean."""
    torch.manual_seed(14)
    actor = TanhMeanGaussianActor(OBS_DIM, [16], 2, "relu")
    obs = torch.randn(32, OBS_DIM)
    act = torch.cat((torch.ones(4, 2), -torch.ones(4, 2), torch.rand(24, 2) * 2 - 1))
    with torch.no_grad():
        actor.log_std.copy_(torch.tensor([-0.5, -9.0]))  # the second is clamped to -5
        mean = torch.tanh(actor.net(obs))
        normal = torch.distributions.Normal(mean, torch.tensor([-0.5, -5.0]).exp())
        torch.testing.assert_close(actor.log_prob(obs, act), normal.log_prob(act).sum(-1))
        torch.testing.assert_close(actor(obs), mean)
    assert float(mean.abs().max()) <= 1.0


def test_iql_actor_lr_follows_a_cosine_of_progress():
    assert cosine_lr(1e-3, 0.0) == 1e-3
    assert cosine_lr(1e-3, 0.5) == pytest.approx(5e-4)
    assert cosine_lr(1e-3, 1.0) == pytest.approx(0.0, abs=1e-12)
    iql = IQL(IQLConfig(**SMALL), BOX, CPU, 0)
    assert iql.update(random_batch(BOX), progress=Progress(0, 5, 0.5)).actor_lr == \
        pytest.approx(1.5e-4)
    flat = IQL(IQLConfig(actor_lr_cosine=False, **SMALL), BOX, CPU, 0)
    assert flat.update(random_batch(BOX), progress=Progress(0, 5, 0.5)).actor_lr == 3e-4


def test_iql_value_targets_and_polyak():
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
    stats = iql.update(batch, progress=progress(0))
    assert stats.value_loss == pytest.approx(expected, rel=1e-5)
    assert all(math.isfinite(v) for v in (stats.actor_loss, stats.critic_loss))
    torch.testing.assert_close(iql.critic_target_flat, 0.9 * before + 0.1 * iql.critic_optim.flat,
                               rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- learning
def bandit_learns(algo, info: SpaceInfo, steps: int, seed: int) -> np.ndarray:
    """Train on a one-step dataset (every transition terminal): continuous, actions -0.5 (reward
    0) and 0.5 (reward 1); discrete, actions 0 (reward 0) and 1 (reward 1) and never 2. Returns
    the deterministic actions at fresh states."""
    rng = np.random.default_rng(seed)
    n = 512
    obs = rng.normal(size=(n, OBS_DIM)).astype(np.float32)
    good = rng.random(n) < 0.5
    if info.discrete:
        act = good.astype(np.int64)
    else:
        act = np.where(good, 0.5, -0.5).astype(np.float32)[:, None]
    rew = good.astype(np.float32)
    for step in range(steps):
        idx = rng.integers(n, size=64)
        algo.update(make_batch(obs[idx], act[idx], rew=rew[idx], discount=0.0, seed=step),
                    progress=progress(step, steps))
    test_obs = rng.normal(size=(128, OBS_DIM)).astype(np.float32)
    return algo.act(test_obs, deterministic=True, progress=progress(steps, steps))


@pytest.mark.parametrize(("name", "build"), [
    ("td3bc", lambda: TD3BC(TD3BCConfig(**SMALL), BOX1, CPU, 0)),
    ("iql", lambda: IQL(IQLConfig(actor_lr=3e-3, critic_lr=3e-3, value_lr=3e-3, **SMALL),
                        BOX1, CPU, 0)),
])
def test_continuous_offline_algorithms_prefer_the_better_data_action(name, build):
    """Behaviour cloning would act at the data's mean, 0; these act towards 0.5."""
    torch.manual_seed(12)
    act = bandit_learns(build(), BOX1, 300, seed=12)
    assert float(np.mean(act)) > 0.25, (name, float(np.mean(act)))


def test_continuous_cql_acts_at_the_better_data_action_where_sac_extrapolates():
    """On the same data, CQL settles at the better data action, 0.5; without the penalty
    (cql_alpha=0, plain SAC) the critic's extrapolation pulls the actor out to ~1."""
    means = {}
    for cql_alpha in (5.0, 0.0):
        torch.manual_seed(12)
        cql = CQL(CQLConfig(cql_alpha=cql_alpha, num_sampled_actions=4, actor_lr=3e-3,
                            critic_lr=3e-3, init_alpha=0.1, **SMALL), BOX1, CPU, 0)
        means[cql_alpha] = float(np.mean(bandit_learns(cql, BOX1, 300, seed=12)))
    assert abs(means[5.0] - 0.5) < 0.15 and means[0.0] > 0.8, means


@pytest.mark.parametrize(("name", "build"), [
    ("cql", lambda: CQL(CQLConfig(critic_lr=1e-3, **SMALL), DISC, CPU, 0)),
    ("iql", lambda: IQL(IQLConfig(actor_lr=1e-3, **SMALL), DISC, CPU, 0)),
])
def test_discrete_offline_algorithms_pick_the_better_data_action(name, build):
    """Action 1 pays, action 0 does not, action 2 is never in the data: a conservative or
    in-sample learner picks 1 everywhere."""
    torch.manual_seed(13)
    act = bandit_learns(build(), DISC, 300, seed=13)
    assert (act == 1).mean() > 0.95, (name, np.bincount(act, minlength=3))
