"""The build (rltrain.assembly.build) and the trainer kinds' part in it (rltrain.trainers): the
envs, storage and collectors each kind gets, the observers the normalisers are given, and every
refusal that needs a built object (the action space, memory, the dataset) or that the trainer
kind makes of settings that are each valid but cannot learn together."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from algo_helpers import BOX, DISC
from conftest import compose_run, random_dataset, refusal
from rltrain.algorithms import ALGORITHMS, get
from rltrain.algorithms.dqn import DQNConfig
from rltrain.algorithms.ppo import PPOConfig
from rltrain.assembly.build import (
    SMALL_FOR_A_GPU,
    Parts,
    build_parts,
    build_trainer,
    check_actions,
    gpu_advice,
)
from rltrain.assembly.checked_config import Settings, settings
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import (
    ConfigError,
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnPolicyTrainerParams,
)
from rltrain.data.datasets.sources import load_dataset
from rltrain.data.storage import ReplayBuffer
from rltrain.process.system import available_memory
from rltrain.trainers import (
    TRAINERS,
    OfflineTrainer,
    OffPolicyTrainer,
    OnPolicyTrainer,
    StorageRequest,
)

#: a short run: small networks, few envs
SMALL = ["experiment=smoke", "algo.hidden_sizes=[16]", "env.num_train_envs=2",
         "env.num_test_envs=2", "logger.tensorboard=false"]


@contextlib.contextmanager
def built(*overrides: str) -> Iterator[tuple[Settings, Parts]]:
    """The settings and parts of ``rltrain OVERRIDES``, closed afterwards."""
    s = settings(compose_run(*SMALL, *overrides))
    parts = build_parts(s)
    try:
        yield s, parts
    finally:
        parts.close()


def refused(*overrides: str) -> str:
    """The message the build refuses ``rltrain OVERRIDES`` with (the settings pass)."""
    s = settings(compose_run(*SMALL, *overrides))
    with pytest.raises(ConfigError) as e:
        build_parts(s).close()
    return str(e.value)


@pytest.fixture(scope="module")
def cartpole_data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(random_dataset(tmp_path_factory.mktemp("data") / "cartpole.h5", episodes=6))


# --------------------------------------------------------------------------- what is built
def test_an_offline_run_makes_no_train_envs(cartpole_data):
    data = load_dataset(cartpole_data)
    with built("algo=bc", f"dataset={cartpole_data}", "env.normalize.obs=true") as (s, parts):
        assert parts.train_collector is None
        assert parts.test_collector.num_envs == 2
        assert len(parts.storage.buffer) == len(data)
        facts = parts.storage.dataset
        assert facts is not None and facts["transitions"] == len(data)
        assert facts["episodes"] == data.num_episodes and len(facts["sha256"]) == 64
        # nothing is collected offline: the observation statistics are the dataset's
        norm = parts.algorithm.obs_norm
        assert norm is not None and int(norm.moments.count) == len(data)
        np.testing.assert_allclose(norm.moments.mean.numpy(), data.obs.mean(0), rtol=1e-5,
                                   atol=1e-6)
        trainer = build_trainer(s, parts)
        assert isinstance(trainer, OfflineTrainer) and trainer.step_key == "gradient_step"


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_an_online_run_makes_train_envs_that_write_to_its_storage(algo):
    with built(f"algo={algo}") as (s, parts):
        assert parts.train_collector is not None and parts.train_collector.num_envs == 2
        assert parts.train_collector.buffer is parts.storage.buffer
        assert parts.test_collector.buffer is None and parts.storage.dataset is None
        assert parts.train_seed != parts.test_seed
        trainer = build_trainer(s, parts)
        assert type(trainer) is TRAINERS[s.trainer.name] and trainer.step_key == "env_step"


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
@pytest.mark.parametrize("obs", [True, False])
def test_the_observation_statistics_observe_training_collection_only_when_asked(algo, obs):
    with built(f"algo={algo}", f"env.normalize.obs={str(obs).lower()}") as (_, parts):
        norm = parts.algorithm.obs_norm
        assert (norm is not None) == obs and parts.algorithm.reward_scaler is None
        assert parts.train_collector is not None
        assert parts.train_collector.on_obs == (norm.observe if norm is not None else None)
        assert parts.test_collector.on_obs is None
        for collector in (parts.train_collector, parts.test_collector):
            assert collector.on_step is None


def test_the_reward_scaler_observes_training_collection_only():
    with built("algo=ppo", "env.normalize.reward=true") as (_, parts):
        scaler = parts.algorithm.reward_scaler
        assert scaler is not None and parts.algorithm.obs_norm is None
        assert parts.train_collector is not None
        assert parts.train_collector.on_step == scaler.observe
        assert parts.train_collector.on_obs is None
        assert parts.test_collector.on_step is None
        policy = parts.algorithm.policy(Progress(0, 0, 0.0))
        parts.test_collector.collect(policy, n_episodes=2)
        assert int(scaler.moments.count) == 0
        parts.train_collector.collect(policy, n_steps=10)
        assert int(scaler.moments.count) == 10


# --------------------------------------------------------------------------- action spaces
UNBOUNDED = SpaceInfo((3,), None, (2,), np.array([-1, -np.inf], np.float32),
                      np.array([1, np.inf], np.float32), None, "test/Unbounded")


def test_check_actions_accepts_what_each_algorithm_acts_in():
    for spec in ALGORITHMS.values():
        for info, kind in ((DISC, "discrete"), (BOX, "continuous")):
            if kind in spec.actions:
                check_actions(spec, info)
    check_actions(get("ppo"), UNBOUNDED)  # passes unbounded dimensions through unscaled


def test_check_actions_names_the_algorithms_that_fit():
    with pytest.raises(ConfigError) as e:
        check_actions(get("dqn"), BOX)
    assert str(e.value) == ("algo=dqn needs discrete actions, but test has continuous actions "
                            "(Box, shape (2,)); use algo=a2c or algo=ddpg or algo=ppo or "
                            "algo=ppo_lstm or algo=reinforce or algo=sac or algo=td3")
    with pytest.raises(ConfigError) as e:
        check_actions(get("td3bc"), DISC)
    # the same kind of training: an offline algorithm is pointed to offline ones
    assert str(e.value).endswith("has discrete actions (Discrete(3)); use algo=bc or algo=cql "
                                 "or algo=iql")


@pytest.mark.parametrize("name", sorted(n for n, s in ALGORITHMS.items() if s.bounded_actions))
def test_check_actions_refuses_unbounded_actions_for_squashing_algorithms(name):
    with pytest.raises(ConfigError, match=rf"^algo={name} squashes its actions into the env's "
                                          r"bounds, but test/Unbounded's action space is "
                                          r"unbounded in dimensions \[1\];"):
        check_actions(get(name), UNBOUNDED)


# --------------------------------------------------------------------------- memory
@pytest.mark.skipif(available_memory() is None, reason="the memory available is not known here")
def test_a_replay_buffer_larger_than_memory_is_refused_naming_bytes_per_transition():
    per = ReplayBuffer.bytes_per_transition((4,), np.float32, (), np.int64)
    message = refused("algo=dqn", f"buffer.size={10**13}")
    assert message.startswith("buffer.size needs ")
    assert (f"of memory for {10**13:,} transitions of CartPole-v1 ({per:,} bytes each), but "
            in message)
    assert message.endswith("is available; lower buffer.size")


@pytest.mark.skipif(available_memory() is None, reason="the memory available is not known here")
def test_a_rollout_larger_than_memory_is_refused():
    per = ReplayBuffer.bytes_per_transition((4,), np.float32, (), np.int64)
    message = refused("algo=ppo", f"trainer.collection_step_num_env_steps={10**13}")
    assert message.startswith("the rollout needs ")
    assert f"({per:,} bytes each)" in message
    assert message.endswith("; collect fewer transitions per collection step")


# --------------------------------------------------------------------------- trainer kinds
def offpolicy(**kwargs) -> OffPolicyTrainerParams:
    base = dict(max_epochs=2, epoch_num_steps=512, batch_size=64,
                collection_step_num_env_steps=16, random_warmup_env_steps=100)
    return OffPolicyTrainerParams(**{**base, **kwargs})


def test_trainer_kinds_say_what_differs_between_them():
    assert {name: (kind.collects, kind.keeps_replay_buffer, kind.step_key)
            for name, kind in TRAINERS.items()} == {
        "onpolicy": (True, False, "env_step"),
        "offpolicy": (True, True, "env_step"),
        "offline": (False, False, "gradient_step"),
    }
    for name, kind in TRAINERS.items():
        assert kind.name == name and kind.params_type().name == name


def test_feasible_settings_pass_each_kinds_check():
    OnPolicyTrainer.check(OnPolicyTrainerParams(), PPOConfig(), 8, 100)
    OffPolicyTrainer.check(offpolicy(), DQNConfig(target_update_interval=10), 8, 1000)
    OfflineTrainer.check(OfflineTrainerParams(), DQNConfig(target_update_interval=10), 8, 1)


@pytest.mark.parametrize(("params", "buffer_size", "algo", "message"), [
    (offpolicy(batch_size=500), 100, DQNConfig(target_update_interval=1),
     "trainer.batch_size=500 is larger than the replay buffer (buffer.size=100, 96 slots over "
     "8 envs): no batch could ever be sampled, so nothing would be learnt; lower "
     "trainer.batch_size or raise buffer.size"),
    (offpolicy(random_warmup_env_steps=100_000), 10_000, DQNConfig(target_update_interval=1),
     "trainer.random_warmup_env_steps=100,000 is longer than the whole training run (2 epochs "
     "x 512 env steps = 1,024); lower it or train longer"),
    (offpolicy(update_step_num_gradient_steps_per_sample=0.001), 10_000,
     DQNConfig(target_update_interval=1),
     "trainer.update_step_num_gradient_steps_per_sample=0.001 gives round(0.001 x 16) = 0 "
     "gradient steps per collection step: nothing would be learnt; raise it or "
     "trainer.collection_step_num_env_steps"),
    (offpolicy(), 10_000, DQNConfig(target_update_interval=1_000_000),
     "algo.target_update_interval=1,000,000 is more than the run's ~1,024 gradient steps"),
])
def test_the_off_policy_kind_refuses_settings_that_cannot_learn(params, buffer_size, algo,
                                                                message):
    with pytest.raises(ConfigError) as e:
        OffPolicyTrainer.check(params, algo, 8, buffer_size)
    assert str(e.value).startswith(message)


def test_the_off_policy_warm_up_counts_whole_collection_steps():
    """The run's length is epochs of whole collection steps (ceil(s / c) * c env steps): a
    warm-up of exactly that many passes, one more is refused."""
    params = offpolicy(epoch_num_steps=500, random_warmup_env_steps=2 * 512)
    OffPolicyTrainer.check(params, DQNConfig(target_update_interval=1), 8, 10_000)
    params = offpolicy(epoch_num_steps=500, random_warmup_env_steps=2 * 512 + 1)
    with pytest.raises(ConfigError, match=r"\(2 epochs x 512 env steps = 1,024\)"):
        OffPolicyTrainer.check(params, DQNConfig(target_update_interval=1), 8, 10_000)


def test_the_offline_kind_refuses_no_batch_size_and_plans_gradient_steps():
    with pytest.raises(ConfigError, match=r"^trainer\.batch_size=null: an offline gradient step "
                                          "samples a batch from the dataset; give it a size, "
                                          r"e\.g\. trainer\.batch_size=256$"):
        OfflineTrainer.check(OfflineTrainerParams(batch_size=None), DQNConfig(), 1, 1)
    with pytest.raises(ConfigError, match="more than the run's ~2,000 gradient steps"):
        OfflineTrainer.check(OfflineTrainerParams(max_epochs=2),
                             DQNConfig(target_update_interval=2001), 1, 1)


def test_the_off_policy_storage_refuses_fewer_slots_than_envs():
    request = StorageRequest(DISC, num_train_envs=8, buffer_size=4)
    with pytest.raises(ConfigError, match="^buffer.size=4 is smaller than env.num_train_envs=8$"):
        OffPolicyTrainer.storage(offpolicy(), request)
    storage = OffPolicyTrainer.storage(offpolicy(), StorageRequest(DISC, 8, 100))
    assert storage.buffer.num_lanes == 8 and storage.buffer.lane_capacity == 12


def test_the_offline_storage_refuses_a_batch_larger_than_the_dataset(cartpole_data):
    n = len(load_dataset(cartpole_data))
    message = refused("algo=bc", f"dataset={cartpole_data}", f"trainer.batch_size={n + 1}")
    assert message == (f"trainer.batch_size={n + 1} is larger than the dataset ({n:,} "
                       f"transitions in {cartpole_data}): lower trainer.batch_size or collect "
                       "more data")


def test_the_offline_storage_refuses_a_dataset_of_other_spaces(cartpole_data):
    message = refused("algo=bc", "env=pendulum", f"dataset={cartpole_data}")
    assert message.startswith(f"dataset {cartpole_data} (collected on CartPole-v1) has "
                              "observation space Box(")
    assert "but Pendulum-v1 has Box(" in message


def test_an_offline_refusal_is_reached_through_the_build(cartpole_data):
    assert refused("algo=bc", f"dataset={cartpole_data}", "trainer.batch_size=null") \
        .startswith("trainer.batch_size=null: an offline gradient step")


@pytest.mark.parametrize(("args", "named"), [
    (["algo=dqn", "trainer.batch_size=500", "buffer.size=100"], "trainer.batch_size=500"),
    (["algo=dqn", "trainer.random_warmup_env_steps=100000"], "random_warmup_env_steps"),
    (["algo=dqn", "trainer.update_step_num_gradient_steps_per_sample=0.001"],
     "0 gradient steps per collection step"),
    (["algo=dqn", "algo.target_update_interval=1000000"], "algo.target_update_interval"),
])
def test_settings_that_cannot_learn_are_refused(tmp_path, args, named):
    message = refusal(tmp_path / "run", "experiment=smoke", *args)
    assert named in message, message


def test_a_small_on_policy_mlp_on_a_gpu_is_advised_to_run_on_the_cpu():
    """The warning's rule (a CPU machine cannot build a cuda run, so the rule is tested by
    itself): on-policy, vector observations, small networks, cuda."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    advice = gpu_advice(cuda, "onpolicy", False, 9_000)
    assert advice is not None and "9,000 parameters" in advice and "device=cpu" in advice
    assert gpu_advice(cpu, "onpolicy", False, 9_000) is None
    assert gpu_advice(cuda, "offpolicy", False, 9_000) is None  # SAC's update pays (measured)
    assert gpu_advice(cuda, "onpolicy", True, 9_000) is None  # images: the CNN pays
    assert gpu_advice(cuda, "onpolicy", False, SMALL_FOR_A_GPU) is None
