"""A2C (rltrain.algorithms.a2c) and the flat RMSprop it learns with: the advantages against
hand-computed n-step returns, an update against an independent torch implementation of the
loss (torch.distributions, torch.optim.RMSprop, clip_grad_norm_), the one gradient step per
rollout its default trainer settings give, which the on-policy trainer counts, and the
schema's refusals."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import BOX, CPU, DISC, learnable, progress, random_rollout
from conftest import TESTS
from rltrain.algorithms import UpdateReport
from rltrain.algorithms.a2c import A2C, A2CConfig
from rltrain.assembly.build import build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Rollout
from rltrain.nets.actors_critics import mlp
from rltrain.nets.optim import RMSprop

#: MultiDiscrete([3, 2, 4]) actions: uneven entries, so the logits are padded
MULTI = SpaceInfo((3,), None, (3,), None, None, None, "test", nvec=(3, 2, 4))


def compose_run(*overrides: str) -> Any:
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


# --------------------------------------------------------------------------- RMSprop
def test_rmsprop_matches_torch_rmsprop_with_changing_lr():
    torch.manual_seed(0)
    ours_net = mlp(4, [32, 32], 3)
    ref_net = copy.deepcopy(ours_net)
    ours = RMSprop(ours_net.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    ref = torch.optim.RMSprop(ref_net.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    x = torch.randn(64, 4)
    for i in range(50):
        lr = 7e-4 * (1 - i / 50)
        ours.lr = lr
        for group in ref.param_groups:
            group["lr"] = lr
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.zero_grad()
            (net(x) ** 2).mean().backward()
            opt.step()
    for a, b in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert ours.steps == 50


def test_rmsprop_state_round_trip_continues_identically():
    torch.manual_seed(1)
    net = mlp(3, [8], 1)
    opt = RMSprop(net.parameters(), lr=1e-2, alpha=0.9)
    x = torch.randn(16, 3)

    def step(n: torch.nn.Module, o: RMSprop) -> None:
        o.zero_grad()
        n(x).pow(2).mean().backward()
        o.step()

    for _ in range(5):
        step(net, opt)
    twin = copy.deepcopy(net)
    twin_opt = RMSprop(twin.parameters(), lr=0.5, alpha=0.9)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert twin_opt.lr == 1e-2 and twin_opt.steps == 5
    for _ in range(5):
        step(net, opt)
        step(twin, twin_opt)
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)
    small = RMSprop(mlp(3, [4], 1).parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="square_avg has shape"):
        small.load_state_dict(opt.state_dict())


# --------------------------------------------------------------------------- advantages
def one_lane(terminated: list[bool], truncated: list[bool]) -> Rollout:
    """A lane of 3 transitions, rewards 1, 2, 3 (the critic's values are given)."""
    z = np.zeros((1, 3, 3), np.float32)
    return Rollout(obs=z, act=np.zeros((1, 3), np.int64),
                   rew=np.array([[1.0, 2.0, 3.0]], np.float32),
                   next_obs=z, terminated=np.array([terminated]),
                   truncated=np.array([truncated]), valid=np.ones((1, 3), bool))


@pytest.mark.parametrize(("terminated", "truncated", "returns"), [
    # no episode ends: G2 = 3 + 0.5 * 40, G1 = 2 + 0.5 * G2, G0 = 1 + 0.5 * G1
    ([False] * 3, [False] * 3, [7.75, 13.5, 23.0]),
    # the episode ends at t = 1: G1 = 2 (no bootstrap), a new one starts at t = 2
    ([False, True, False], [False] * 3, [2.0, 2.0, 23.0]),
    # cut by its time limit at t = 1: G1 bootstraps from V(s'_1) = 30
    ([False] * 3, [False, True, False], [9.5, 17.0, 23.0]),
])
def test_advantages_are_n_step_returns_minus_values(monkeypatch, terminated, truncated,
                                                     returns):
    """lambda = 1: each advantage is the discounted rewards to the rollout's end (or the
    episode's), bootstrapped from the critic there, minus V(s); hand-computed, gamma 0.5,
    through the transforms A2C declares, its critic's values given."""
    a2c = A2C(A2CConfig(gamma=0.5, gae_lambda=1.0, hidden_sizes=[8]), DISC, CPU, seed=0)
    rollout = one_lane(terminated, truncated)
    values = np.array([[10.0, 20.0, 30.0]], np.float32)
    next_values = np.array([[20.0, 30.0, 40.0]], np.float32)
    monkeypatch.setattr(a2c, "rollout_values",
                        lambda record: {"values": values, "next_values": next_values})
    got = learnable(a2c, rollout)
    assert got.advantages is not None and got.learn is not None
    np.testing.assert_allclose(got.advantages[0], np.array(returns) - values[0])
    np.testing.assert_allclose(got.returns[0], np.array(returns))
    assert got.learn.all()


# --------------------------------------------------------------------------- the update
def reference_returns(rollout: Rollout, next_values: np.ndarray, gamma: float) -> np.ndarray:
    """n-step returns by a plain loop per lane: rewards summed back from the lane's last
    transition or an episode's end, bootstrapped from V(s') unless it terminated."""
    out = np.zeros(rollout.rew.shape, np.float64)
    for lane in range(rollout.rew.shape[0]):
        g: float | None = None
        for t in reversed(range(rollout.rew.shape[1])):
            if not rollout.valid[lane, t]:
                g = None
                continue
            if g is None or rollout.terminated[lane, t] or rollout.truncated[lane, t]:
                boot = 0.0 if rollout.terminated[lane, t] else float(next_values[lane, t])
                g = float(rollout.rew[lane, t]) + gamma * boot
            else:
                g = float(rollout.rew[lane, t]) + gamma * g
            out[lane, t] = g
    return out


def consistent(rollout: Rollout) -> Rollout:
    """``rollout`` with each transition's next observation the next slot's observation, as in
    a collected rollout, except after an episode's end (the next slot starts a new one) and
    at a lane's last transition."""
    next_obs = rollout.next_obs.copy()
    follows = ~rollout.dones[:, :-1] & rollout.valid[:, 1:]
    next_obs[:, :-1][follows] = rollout.obs[:, 1:][follows]
    return Rollout(**{**vars(rollout), "next_obs": next_obs})


def distribution(info: SpaceInfo, actor: torch.nn.Module, obs: torch.Tensor) -> Any:
    """The policy at ``obs`` as torch.distributions: independent of rltrain's maths."""
    out = actor.outputs(obs)
    if info.nvec is not None:
        parts = torch.split(out, list(info.nvec), -1)
        return [torch.distributions.Categorical(logits=p) for p in parts]
    if info.discrete:
        return [torch.distributions.Categorical(logits=out)]
    return [torch.distributions.Normal(out, actor.log_std.exp())]


@pytest.mark.parametrize("info", [DISC, BOX, MULTI], ids=["discrete", "box", "multidiscrete"])
def test_an_update_is_one_rmsprop_step_on_the_a2c_loss(info):
    """The update equals one step of torch.optim.RMSprop, after clip_grad_norm_, on
    pg_loss - ent_coef * entropy + vf_coef * v_loss written with torch.distributions and
    returns from a plain loop; the clipping is active (a small max_grad_norm)."""
    torch.manual_seed(0)
    cfg = A2CConfig(hidden_sizes=[16], gamma=0.9, ent_coef=0.01, vf_coef=0.5,
                    max_grad_norm=0.1, lr=1e-3)
    a2c = A2C(cfg, info, CPU, seed=0)
    pi, critic = copy.deepcopy(a2c.pi), copy.deepcopy(a2c.critic)
    rollout = random_rollout(MULTI if info is MULTI else info, lanes=2, steps=8, invalid=3)
    if info is MULTI:  # random_rollout draws one index per slot: one per entry instead
        rng = np.random.default_rng(1)
        rollout = Rollout(**{**vars(rollout), "act": np.stack(
            [rng.integers(n, size=(2, 8)) for n in info.nvec], -1)})
    rollout = consistent(rollout)

    report = a2c.update(learnable(a2c, rollout), batch_size=None, repetitions=1,
                        progress=progress(0))
    assert report.gradient_steps == 1 and a2c.optim.steps == 1

    params = [*pi.parameters(), *critic.parameters()]
    ref = torch.optim.RMSprop(params, lr=1e-3, alpha=0.99, eps=1e-5)
    with torch.no_grad():
        next_v = critic(torch.from_numpy(rollout.next_obs.reshape(16, 3))).reshape(2, 8).numpy()
    ret_all = reference_returns(rollout, next_v, 0.9)
    valid = rollout.valid
    obs = torch.from_numpy(rollout.obs[valid])
    ret = torch.as_tensor(ret_all[valid], dtype=torch.float32)
    act = torch.from_numpy(rollout.act[valid])
    v = critic(obs).squeeze(-1)
    adv = ret - v.detach()
    dists = distribution(info, pi, obs)
    if info.nvec is not None:
        logp = sum(d.log_prob(act[:, i]) for i, d in enumerate(dists))
        entropy = sum(d.entropy() for d in dists)
    elif info.discrete:
        logp, entropy = dists[0].log_prob(act), dists[0].entropy()
    else:
        logp, entropy = dists[0].log_prob(act).sum(-1), dists[0].entropy().sum(-1)
    loss = (-(adv * logp).mean() - 0.01 * entropy.mean() + 0.5 * (v - ret).pow(2).mean())
    ref.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, 0.1)
    assert norm > 0.1  # the clipping changed the step
    ref.step()
    ours = [*a2c.pi.parameters(), *a2c.critic.parameters()]
    for a, b in zip(ours, params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert report.stats.v_loss == pytest.approx(float((v - ret).pow(2).mean().detach()),
                                                rel=1e-5)


def test_the_trainer_settings_and_minibatches_are_honoured():
    """One step per rollout with batch_size None and one repetition; minibatches and
    repetitions otherwise, each a step, as the report says."""
    a2c = A2C(A2CConfig(hidden_sizes=[8]), DISC, CPU, seed=0)
    rollout = random_rollout(DISC, lanes=2, steps=16, invalid=3)  # 29 transitions
    report = a2c.update(learnable(a2c, rollout), batch_size=10, repetitions=2,
                        progress=progress(0))
    assert isinstance(report, UpdateReport)
    assert report.gradient_steps == 2 * 3 == a2c.optim.steps


def test_the_learning_rate_anneals_when_asked():
    a2c = A2C(A2CConfig(hidden_sizes=[8], lr=1e-3, lr_annealing=True), DISC, CPU, seed=0)
    stats = a2c.update(learnable(a2c, random_rollout(DISC)), batch_size=None, repetitions=1,
                       progress=progress(1, 4)).stats
    assert stats.lr == pytest.approx(7.5e-4) and a2c.optim.lr == pytest.approx(7.5e-4)


def test_adam_when_asked():
    a2c = A2C(A2CConfig(hidden_sizes=[8], optimizer="adam"), DISC, CPU, seed=0)
    assert type(a2c.optim).__name__ == "Adam"


# --------------------------------------------------------------------------- config, trainer
@pytest.mark.parametrize(("fields", "key"), [
    ({"optimizer": "sgd"}, "algo.optimizer must be rmsprop or adam, got 'sgd'"),
    ({"gae_lambda": 1.5}, "algo.gae_lambda must be in [0, 1]"),
    ({"rmsprop_alpha": -0.1}, "algo.rmsprop_alpha must be in [0, 1]"),
    ({"ent_coef": -0.01}, "algo.ent_coef must be >= 0"),
    ({"lr": 0.0}, "algo.lr must be > 0"),
    ({"max_grad_norm": -1.0}, "algo.max_grad_norm must be > 0"),
])
def test_the_schema_refuses_bad_values_by_name(fields, key):
    with pytest.raises(ConfigError) as e:
        A2CConfig(**fields).check()
    assert key in str(e.value)


def test_algo_a2c_starts_from_one_step_per_short_rollout():
    """conf/trainer/defaults/a2c.yaml: 40 env steps per update, all in one gradient step;
    the command line still overrides it."""
    s = settings(compose_run("algo=a2c", "env=gym", "env.id=Acrobot-v1"))
    assert (s.trainer.collection_step_num_env_steps, s.trainer.collection_step_num_episodes,
            s.trainer.batch_size, s.trainer.update_step_num_repetitions) == (40, None, None, 1)
    s = settings(compose_run("algo=a2c", "env=gym", "env.id=Acrobot-v1",
                             "trainer.collection_step_num_env_steps=80"))
    assert s.trainer.collection_step_num_env_steps == 80


def test_the_on_policy_trainer_counts_one_gradient_step_per_rollout():
    """Built and trained as a run is: 400 env steps on 8 envs in rollouts of 40 are 10
    updates, each one gradient step, which the trainer's count and the optimiser agree on."""
    cfg = compose_run("algo=a2c", "env=cartpole", "experiment=smoke", "algo.hidden_sizes=[16]",
                      "trainer.max_epochs=1", "trainer.epoch_num_steps=400",
                      "trainer.test_step_num_episodes=1", "env.num_test_envs=1")
    s = settings(cfg)
    parts = build_parts(s)
    try:
        trainer = build_trainer(s, parts)
        info = trainer.run()
    finally:
        parts.close()
    assert info.env_step == 400
    assert info.gradient_step == trainer.gradient_step == 10 == parts.algorithm.optim.steps
