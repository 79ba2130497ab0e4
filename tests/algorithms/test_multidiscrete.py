"""MultiDiscrete and MultiBinary actions: what SpaceInfo learns of them, the per-entry
categorical policy (against independent torch Categorical distributions), the ``start`` of a
MultiDiscrete honoured on the way to the env (train and test envs, the deployable policy, the
datasets), the algorithms that refuse them by name, and a run end to end: training,
rltrain-eval, rltrain-export, rltrain-collect and behaviour cloning from what it collected."""

from __future__ import annotations

import json
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from action_envs import MULTIBINARY_ID, MULTIDISCRETE_ID, MultiDiscreteEnv
from algo_helpers import CPU, learnable, progress
from conftest import command, run_in_process
from rltrain.algorithms import ALGORITHMS, MULTIDISCRETE
from rltrain.algorithms.bc import BC, BCConfig, DiscreteBCStats
from rltrain.assembly.build import check_actions
from rltrain.commands import collect, evaluate, export
from rltrain.commands.collect.sources import noisy
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Batch, Rollout
from rltrain.data.datasets.dataset import make_dataset, new_meta
from rltrain.data.datasets.replay import to_buffer
from rltrain.data.datasets.spaces import describe_space
from rltrain.envs.vector import space_info
from rltrain.nets.actors_critics import MultiCategoricalActor
from rltrain.nets.encoders import make_encoder
from rltrain.spaces.actions import ShiftActions, integer_start

#: uneven entries (their logits are padded) with a start that is not 0
MULTI = SpaceInfo((3,), None, (3,), None, None, None, "test", nvec=(3, 2, 4),
                  action_start=np.array([1, -1, 0]))
#: MultiBinary((2, 3)): an action of two dimensions, six entries of 2 values
BINARY = SpaceInfo((3,), None, (2, 3), None, None, None, "test", nvec=(2,) * 6)
ONLINE_MULTI = sorted(name for name, spec in ALGORITHMS.items()
                      if MULTIDISCRETE in spec.actions and "onpolicy" in spec.trainers)


class SpaceEnv(gym.Env):
    """An env of the given action space (observations of 3 zeros), for space_info."""

    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: Any):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def info_of(space: gym.Space) -> SpaceInfo:
    envs = gym.vector.SyncVectorEnv([lambda: SpaceEnv(space)])
    try:
        return space_info(envs, "test", reward_threshold=0.0)
    finally:
        envs.close()


# --------------------------------------------------------------------------- SpaceInfo
def test_space_info_learns_a_multidiscrete_and_its_start():
    info = info_of(gym.spaces.MultiDiscrete([3, 2, 4], start=[1, -1, 0]))
    assert (info.nvec, info.action_shape, info.num_actions) == ((3, 2, 4), (3,), None)
    np.testing.assert_array_equal(info.action_start, [1, -1, 0])
    assert info.discrete and info.action_kind == MULTIDISCRETE and info.action_dim == 9
    assert info.actions_text == "MultiDiscrete([3 2 4], start=[ 1 -1 0])"
    assert info_of(gym.spaces.MultiDiscrete([3, 2])).action_start is None


@pytest.mark.parametrize(("n", "shape"), [(4, (4,)), ((2, 3), (2, 3))])
def test_space_info_reads_a_multibinary_as_entries_of_two(n, shape):
    info = info_of(gym.spaces.MultiBinary(n))
    assert info.nvec == (2,) * int(np.prod(shape)) and info.action_shape == shape
    assert info.action_start is None and info.action_kind == MULTIDISCRETE


def test_space_info_refuses_other_action_spaces_by_name():
    space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
    with pytest.raises(ConfigError, match="Discrete, MultiDiscrete, MultiBinary and Box"):
        info_of(space)


def test_a_discrete_start_is_learnt_too():
    info = info_of(gym.spaces.Discrete(3, start=-1))
    assert info.num_actions == 3 and info.action_start is not None
    assert int(info.action_start) == -1


# --------------------------------------------------------------------------- the actor
def actor(info: SpaceInfo) -> MultiCategoricalActor:
    torch.manual_seed(0)
    pi = MultiCategoricalActor(make_encoder(info, "auto"), [16], info.nvec or (),
                               "tanh", info.action_shape)
    with torch.no_grad():  # logits far from uniform (the output layer starts small)
        pi.net._last[0].normal_(0.0, 1.0)
    return pi


@pytest.mark.parametrize("info", [MULTI, BINARY], ids=["multidiscrete", "multibinary-2d"])
def test_log_probabilities_and_entropy_are_sums_over_independent_categoricals(info):
    pi = actor(info)
    obs = torch.randn(64, 3)
    rng = np.random.default_rng(0)
    entries = np.stack([rng.integers(n, size=64) for n in info.nvec], -1)
    act = torch.from_numpy(entries.reshape(64, *info.action_shape))
    logp, entropy = pi.log_prob_entropy(obs, act)
    parts = torch.split(pi.outputs(obs), list(info.nvec), -1)
    dists = [torch.distributions.Categorical(logits=p) for p in parts]
    flat = act.reshape(64, -1)
    want_logp = sum(d.log_prob(flat[:, i]) for i, d in enumerate(dists))
    want_entropy = sum(d.entropy() for d in dists)
    torch.testing.assert_close(logp, want_logp)
    torch.testing.assert_close(entropy, want_entropy)
    # the same gradient too: the sum is the loss PPO, A2C and REINFORCE differentiate
    (g_ours,) = torch.autograd.grad(logp.sum() + entropy.sum(), pi.net._last[0])
    (g_want,) = torch.autograd.grad(want_logp.sum() + want_entropy.sum(), pi.net._last[0])
    torch.testing.assert_close(g_ours, g_want)


def test_samples_follow_each_entrys_probabilities_and_argmax_skips_the_padding():
    pi = actor(MULTI)
    obs = torch.randn(1, 3).expand(20_000, 3)
    with torch.no_grad():
        samples = pi.sample(obs)
        logits = pi(obs[:1])
    assert samples.shape == (20_000, 3) and samples.dtype == torch.int64
    parts = torch.split(pi.outputs(obs[:1]).detach(), list(MULTI.nvec), -1)
    for i, (n, p) in enumerate(zip(MULTI.nvec, parts, strict=True)):
        freq = np.bincount(samples[:, i].numpy(), minlength=n) / 20_000
        assert len(freq) == n  # never a padded value
        np.testing.assert_allclose(freq, p.softmax(-1)[0].numpy(), atol=0.015)
        assert int(logits[0, i].argmax()) == int(p.argmax())
    assert logits.shape == (1, 3, 4)


# --------------------------------------------------------------------------- start
def test_shift_actions_gives_the_env_start_plus_index():
    envs = ShiftActions(gym.vector.SyncVectorEnv([MultiDiscreteEnv, MultiDiscreteEnv]))
    envs.reset(seed=0)
    assert envs.single_action_space == gym.spaces.MultiDiscrete([3, 2])
    sent = envs.actions(np.array([[0, 0], [2, 1]]))
    np.testing.assert_array_equal(sent, [[1, -1], [3, 0]])
    envs.step(np.array([[0, 0], [2, 1]]))  # the env checks its space: shifted, it accepts
    with pytest.raises(ValueError, match="not in"):
        gym.vector.SyncVectorEnv([MultiDiscreteEnv]).step(np.array([[0, 0]]))
    envs.close()
    assert integer_start(gym.spaces.MultiBinary(3)) is None


@pytest.mark.parametrize("name", ONLINE_MULTI)
def test_the_deployable_policy_argmaxes_each_entry_and_adds_the_start(name):
    spec = ALGORITHMS[name]
    algorithm = spec.build(spec.config(hidden_sizes=[8]), MULTI, CPU, 0)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    index = algorithm.act(obs, deterministic=True, progress=progress(0))
    assert index.shape == (5, 3) and index.dtype == np.int64
    assert ((index >= 0) & (index < np.array(MULTI.nvec))).all()
    with torch.no_grad():
        env_action = algorithm.deployable()(torch.from_numpy(obs)).numpy()
    np.testing.assert_array_equal(env_action, index + MULTI.action_start)
    sampled = algorithm.act(obs, deterministic=False, progress=progress(0))
    assert sampled.shape == (5, 3) and ((sampled >= 0) & (sampled < np.array(MULTI.nvec))).all()


def multi_rollout(info: SpaceInfo, lanes: int = 2, steps: int = 12) -> Rollout:
    rng = np.random.default_rng(0)
    shape = (lanes, steps)
    entries = np.stack([rng.integers(n, size=shape) for n in info.nvec], -1)
    terminated = np.zeros(shape, bool)
    terminated[:, steps // 2] = True
    return Rollout(obs=rng.normal(size=(*shape, 3)).astype(np.float32),
                   act=entries.reshape(*shape, *info.action_shape),
                   rew=rng.normal(size=shape).astype(np.float32),
                   next_obs=rng.normal(size=(*shape, 3)).astype(np.float32),
                   terminated=terminated, truncated=np.zeros(shape, bool),
                   valid=np.ones(shape, bool))


@pytest.mark.parametrize("info", [MULTI, BINARY], ids=["multidiscrete", "multibinary-2d"])
@pytest.mark.parametrize("name", ONLINE_MULTI)
def test_the_on_policy_algorithms_learn_from_multidiscrete_rollouts(name, info):
    spec = ALGORITHMS[name]
    algorithm = spec.build(spec.config(hidden_sizes=[8]), info, CPU, 0)
    before = [p.detach().clone() for p in algorithm.parameters()]
    report = algorithm.update(learnable(algorithm, multi_rollout(info)), batch_size=None,
                              repetitions=1, progress=progress(0))
    assert report.gradient_steps == 1
    assert all(np.isfinite(v) for k, v in vars(report.stats).items()
               if k.endswith("loss") and v is not None)
    assert any(not torch.equal(a, b) for a, b in zip(before, algorithm.parameters(),
                                                      strict=True))


@pytest.mark.parametrize("name", sorted(n for n, s in ALGORITHMS.items()
                                        if MULTIDISCRETE not in s.actions))
def test_the_other_algorithms_refuse_multidiscrete_actions_by_name(name):
    with pytest.raises(ConfigError) as e:
        check_actions(ALGORITHMS[name], MULTI)
    text = str(e.value)
    assert f"algo={name} needs" in text and "multidiscrete actions (MultiDiscrete(" in text
    online = "offline" not in ALGORITHMS[name].trainers
    fits = ONLINE_MULTI if online else ["bc"]
    assert all(f"algo={f}" in text for f in fits), text


# --------------------------------------------------------------------------- behaviour cloning
def test_bc_clones_a_multidiscrete_policy():
    """A dataset whose action is a fixed function of the state: the cross-entropy summed over
    the entries falls and the whole action is matched on nearly every state."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(256, 3)).astype(np.float32)
    act = np.stack([(obs[:, 0] > 0) * 2, (obs[:, 1] > 0).astype(int),
                    (obs[:, 2] > 0) * 3], -1).astype(np.int64)
    batch = Batch(obs=obs, act=act, rew=np.zeros(256, np.float32), next_obs=obs,
                  discount=np.ones(256, np.float32), lanes=np.zeros(256, np.int64),
                  positions=np.arange(256))
    torch.manual_seed(0)
    bc = BC(BCConfig(hidden_sizes=[32, 32], lr=3e-3), MULTI, CPU, seed=0)
    first = bc.update(batch, progress=progress(0)).stats
    for i in range(300):
        last = bc.update(batch, progress=progress(i)).stats
    assert isinstance(last, DiscreteBCStats)
    assert last.loss < 0.1 * first.loss and last.accuracy > 0.95


def test_a_dataset_of_multidiscrete_actions_is_stored_as_indices():
    space = gym.spaces.MultiDiscrete([3, 2], start=[1, -1])
    obs_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
    meta = new_meta(env_id=MULTIDISCRETE_ID, observation_space=describe_space(obs_space),
                    action_space=describe_space(space))
    env_actions = np.array([[1, -1], [3, 0], [2, -1]])
    ds = make_dataset(np.zeros((3, 5)), env_actions, np.ones(3), np.zeros((3, 5)),
                      np.array([False, False, True]), np.zeros(3, bool), meta=meta)
    assert ds.act.dtype == np.int64
    buffer = to_buffer(ds, discrete=True, action_low=None, action_high=None)
    _, act, *_ = buffer.transitions(np.zeros(3, np.int64), np.arange(3))
    np.testing.assert_array_equal(act, [[0, 0], [2, 1], [1, 0]])


def test_collect_noise_keeps_multidiscrete_actions_in_their_space():
    space = gym.spaces.MultiDiscrete([3, 2], start=[1, -1])
    policy = noisy(lambda obs: np.tile([1, -1], (len(obs), 1)), space, 0.5, seed=0)
    actions = policy(np.zeros((500, 5)))
    assert actions.shape == (500, 2)
    assert all(space.contains(a) for a in actions)
    changed = (actions != [1, -1]).any(-1).mean()
    assert 0.3 < changed < 0.5  # epsilon 0.5, and a redrawn action may be the same one


# --------------------------------------------------------------------------- end to end
def test_train_eval_export_collect_and_clone(tmp_path, caplog):
    """A2C trained on the MultiDiscrete env (its start: the env raises on an unshifted
    action), its policy evaluated and exported (the ONNX graph gives the env's actions), a
    dataset collected from it with noise, and BC trained on that dataset."""
    env = ["env=gym", f"env.id=action_envs:{MULTIDISCRETE_ID}"]
    run = tmp_path / "a2c"
    caplog.set_level(logging.INFO)
    run_in_process(run, "algo=a2c", *env, "trainer.max_epochs=2", "trainer.epoch_num_steps=4000",
                   "trainer.stop_score=null", "logger.tensorboard=false")
    assert "actions MultiDiscrete([3 2], start=[ 1 -1])" in caplog.text
    best = json.loads((run / "summary.json").read_text())["best_score"]
    assert best >= 15  # of 20: the policy reads its observation

    res = command(evaluate.main, run, "--episodes", "4")
    assert res.returncode == 0, res.stderr
    assert np.mean(json.loads((run / "eval.json").read_text())["returns"]) >= 15

    res = command(export.main, run)
    assert res.returncode == 0, res.stderr
    assert "action int64[batch, 2]" in res.stdout and "identical on 256/256" in res.stdout
    import onnxruntime as ort

    session = ort.InferenceSession(str(run / "best" / "policy.onnx"),
                                   providers=["CPUExecutionProvider"])
    obs = np.eye(5, dtype=np.float32)[[0, 1, 2]] + np.eye(5, dtype=np.float32)[[3, 4, 3]]
    (act,) = session.run(None, {"obs": obs})
    assert act.dtype == np.int64 and act.shape == (3, 2)
    assert all(gym.spaces.MultiDiscrete([3, 2], start=[1, -1]).contains(a) for a in act)

    data = tmp_path / "data.npz"
    res = command(collect.main, run, "--episodes", "20", "--noise", "0.2", "--out", data)
    assert res.returncode == 0, res.stderr
    clone = tmp_path / "bc"
    run_in_process(clone, "algo=bc", *env, f"dataset={data}", "experiment=smoke",
                   "trainer.batch_size=64", "trainer.epoch_num_steps=300")
    assert json.loads((clone / "summary.json").read_text())["best_score"] >= 15


@pytest.mark.parametrize("env_id", [MULTIDISCRETE_ID, MULTIBINARY_ID])
def test_the_test_envs_are_solved_by_reading_the_observation(env_id):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    total = 0.0
    for _ in range(20):
        if env_id == MULTIBINARY_ID:
            action = obs.astype(np.int64)
        else:
            action = np.array([obs[:3].argmax() + 1, obs[3:].argmax() - 1])
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
    assert total == 20.0 and truncated and not terminated
