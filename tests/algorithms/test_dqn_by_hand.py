"""DQN's gradient step with its gradient written out (``rltrain.algorithms.dqn_by_hand``)
against the same step through autograd (``DQN.td_step``), in float64: the parameters after a
few steps, the stats and the priorities it reports, over the options that keep the network
plain (double Q or not, the Huber threshold, prioritised replay's importance weights,
gradient clipping), and which networks take the autograd path instead."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.algorithms.dqn import DQN, DQNConfig
from rltrain.common.types import Progress, SpaceInfo
from rltrain.data.batch import Batch
from rltrain.envs.vector import space_info
from rltrain.spaces.observations import layout, stored_shape


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _dqn(**cfg) -> DQN:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    info = space_info(envs, "CartPole-v1")
    envs.close()
    torch.manual_seed(0)
    return DQN(DQNConfig(**{"hidden_sizes": [16, 16], **cfg}), info, torch.device("cpu"), 0)


def _batch(n: int, seed: int, weighted: bool) -> Batch:
    rng = np.random.default_rng(seed)
    # large rewards put some TD errors past the Huber threshold, small ones inside it
    return Batch(obs=rng.normal(size=(n, 4)), act=rng.integers(0, 2, size=n),
                 rew=rng.normal(scale=3.0, size=n), discount=rng.choice([0.0, 0.99], size=n),
                 next_obs=rng.normal(size=(n, 4)), lanes=np.zeros(n, dtype=np.int64),
                 positions=np.arange(n),
                 weights=rng.uniform(0.1, 1.0, size=n) if weighted else None)


@pytest.mark.parametrize("cfg", [
    {},
    {"double_q": False},
    {"huber_delta": 0.5, "max_grad_norm": None},
    {"max_grad_norm": 0.05},  # clipped on every step
    {"activation": "tanh", "target_update_interval": 2},
])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_written_out_step_equals_autograds(float64, cfg, weighted):
    by_hand, autograd = _dqn(**cfg), _dqn(**cfg)  # seeded alike: equal networks
    assert by_hand.by_hand
    autograd.by_hand = False
    for i in range(4):
        batch = _batch(32, i, weighted)
        progress = Progress(i * 8, i, 0.5)
        a = by_hand.update(batch, progress=progress)
        b = autograd.update(batch, progress=progress)
        assert dataclasses.astuple(a.stats) == pytest.approx(dataclasses.astuple(b.stats),
                                                             rel=1e-12, abs=1e-14)
        torch.testing.assert_close(a.priorities, b.priorities, rtol=1e-12, atol=1e-14)
        for (name, p), q in zip(by_hand.named_parameters(), autograd.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14, msg=name)
    # the steps moved the weights (a step that did nothing would pass the equality above)
    assert not torch.equal(by_hand.q.net._linears[0].weight, _dqn(**cfg).q.net._linears[0].weight)


MINATAR = gym.spaces.Box(0, 1, (10, 10, 4), np.uint8)
PIXELS = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8),
                          "pos": gym.spaces.Box(0.0, 5.0, (2,), np.float32)})


def _image_dqn(space: gym.Space, **cfg) -> DQN:
    info = SpaceInfo(stored_shape(space), 3, (), None, None, None, "test", obs_space=space)
    torch.manual_seed(0)
    return DQN(DQNConfig(**{"hidden_sizes": [16], **cfg}), info, torch.device("cpu"), 0)


def _image_batch(space: gym.Space, n: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    space.seed(seed)
    dict_layout = layout(space)

    def obs() -> np.ndarray:
        rows = [space.sample() for _ in range(n)]
        if dict_layout is None:
            return np.stack(rows)
        return np.stack([dict_layout.pack_one(row) for row in rows])

    return Batch(obs=obs(), act=rng.integers(0, 3, size=n), rew=rng.normal(scale=3.0, size=n),
                 discount=rng.choice([0.0, 0.99], size=n), next_obs=obs(),
                 lanes=np.zeros(n, dtype=np.int64), positions=np.arange(n), weights=None)


@pytest.mark.parametrize("space", [MINATAR, PIXELS], ids=["cnn", "dict"])
@pytest.mark.parametrize("cfg", [{}, {"double_q": False}])
def test_with_an_encoder_that_learns_the_step_still_equals_autograds(float64, space, cfg):
    """A CNN (or a dict encoder with one) takes autograd's part of the step: the layers'
    gradient by hand down to its features, then its own backward from there."""
    by_hand, autograd = _image_dqn(space, **cfg), _image_dqn(space, **cfg)
    assert by_hand.by_hand and by_hand.encoder_learns
    autograd.by_hand = False
    for i in range(4):
        batch = _image_batch(space, 32, i)
        progress = Progress(i * 8, i, 0.5)
        a = by_hand.update(batch, progress=progress)
        b = autograd.update(batch, progress=progress)
        assert dataclasses.astuple(a.stats) == pytest.approx(dataclasses.astuple(b.stats),
                                                             rel=1e-12, abs=1e-14)
        for (name, p), q in zip(by_hand.named_parameters(), autograd.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14, msg=name)
    before = _image_dqn(space, **cfg)
    moved = [name for (name, p), q in zip(by_hand.named_parameters(), before.parameters(),
                                          strict=True) if not torch.equal(p, q)]
    assert any("encoder" in name for name in moved), moved  # the encoder learnt too


def test_the_step_moves_the_chosen_q_value_towards_its_target(float64):
    """A plain gradient-descent check that needs no autograd: after one small step on one
    sample, that sample's Q(s, a) is nearer its TD target."""
    dqn = _dqn(lr=1e-3, max_grad_norm=None)
    batch = _batch(1, 7, False)
    obs, act, rew, discount, next_obs = dqn.tensors(batch)
    target = dqn.td_target(rew, discount, next_obs)
    before = dqn.q(obs)[0, int(act[0])].item()
    dqn.update(batch, progress=Progress(0, 0, 0.5))
    after = dqn.q(obs)[0, int(act[0])].item()
    assert abs(after - target.item()) < abs(before - target.item())


@pytest.mark.parametrize("cfg", [{"dueling": True}, {"noisy": True}])
def test_dueling_and_noisy_networks_take_autograd(cfg):
    assert not _dqn(**cfg).by_hand


def test_discrete_cql_keeps_its_own_update():
    from rltrain.algorithms.cql import CQLConfig, DiscreteCQL

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    info = space_info(envs, "CartPole-v1")
    envs.close()
    assert not DiscreteCQL(CQLConfig(), info, torch.device("cpu"), 0).by_hand
