# Peer runner: Tianshou 2.0.1 PPO / DQN on CartPole-v1 with Tianshou's own test hyperparameters.
#
# Usage: python scripts/peers/tianshou_run.py --algo {ppo,dqn} --seed S
#
# Hyperparameters are those of Tianshou's repository tests test/discrete/test_ppo.py and
# test/discrete/test_dqn.py (2.0 era), except what the benchmark fixes for every tool:
# a test every `epoch_num_steps` (2048) env steps, each test = 10 deterministic episodes on
# 10 test envs, solved = mean test return >= 475 (CartPole-v1's reward threshold), stop as
# soon as solved. No logger, no checkpoints. The last stdout line is one JSON object.
#
# The clock starts before the heavy imports, hence imports below the first statement:
# ruff: noqa: E402
import time

T_START = time.perf_counter()

import argparse
import contextlib
import json
import math
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import torch

torch.set_num_threads(1)

from tianshou.algorithm import DQN, PPO
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams
from tianshou.utils.net.common import ActorCritic, Net
from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic
from tianshou.utils.torch_utils import policy_within_training_step

TASK = "CartPole-v1"
SOLVE_THRESHOLD = 475.0  # CartPole-v1 spec reward_threshold
NUM_TEST_ENVS = 10
TEST_EPISODES = 10

# Tianshou's test/discrete/test_ppo.py defaults (2.0 era).
PPO_HP: dict[str, Any] = {
    "buffer_size": 20000,
    "lr": 3e-4,
    "gamma": 0.99,
    "their_epochs": 10,
    "their_epoch_num_steps": 50000,
    "collection_step_num_env_steps": 2000,
    "update_step_num_repetitions": 10,
    "batch_size": 64,
    "hidden_sizes": [64, 64],
    "num_train_envs": 20,
    "vf_coef": 0.5,
    "ent_coef": 0.0,
    "eps_clip": 0.2,
    "max_grad_norm": 0.5,
    "gae_lambda": 0.95,
    "return_scaling": False,
    "advantage_normalization": False,
    "recompute_advantage": False,
    "dual_clip": None,
    "value_clip": False,
    "deterministic_eval": True,
    "orthogonal_init": True,
}

# Tianshou's test/discrete/test_dqn.py defaults (2.0 era).
DQN_HP: dict[str, Any] = {
    "eps_train": 0.1,
    "buffer_size": 20000,
    "lr": 1e-3,
    "gamma": 0.9,
    "n_step": 3,
    "target_update_freq": 320,
    "their_epochs": 20,
    "their_epoch_num_steps": 10000,
    "collection_step_num_env_steps": 10,
    "update_per_step": 0.1,
    "batch_size": 64,
    "hidden_sizes": [128, 128, 128, 128],
    "num_train_envs": 10,
}


class TimedCollector(Collector[CollectStats]):
    """Test collector that accumulates the wall time of every reset/collect call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.timed_seconds = 0.0
        self.num_collect_calls = 0
        self.test_means: list[float] = []
        self._depth = 0
        super().__init__(*args, **kwargs)

    def _timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._depth += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.timed_seconds += time.perf_counter() - t0

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(super().reset, *args, **kwargs)

    def collect(self, *args: Any, **kwargs: Any) -> CollectStats:
        self.num_collect_calls += 1
        stats = self._timed(super().collect, *args, **kwargs)
        if stats.returns_stat is not None:
            self.test_means.append(round(float(stats.returns_stat.mean), 1))
        return stats


def make_envs(n: int, seed: int) -> DummyVectorEnv:
    envs = DummyVectorEnv([lambda: gym.make(TASK) for _ in range(n)])
    envs.seed(seed)
    return envs


def steps_per_epoch(epoch_num_steps: int, collect_steps: int, num_envs: int) -> int:
    """Env steps the trainer actually takes per epoch (whole collection steps only)."""
    per_collect = math.ceil(collect_steps / num_envs) * num_envs
    return math.ceil(epoch_num_steps / per_collect) * per_collect


def epoch_plan(hp: dict[str, Any], epoch_num_steps: int) -> tuple[int, int]:
    """(env steps per epoch, epochs of our cadence that cover their env-step budget)."""
    per_epoch = steps_per_epoch(
        epoch_num_steps, hp["collection_step_num_env_steps"], hp["num_train_envs"]
    )
    return per_epoch, math.ceil(hp["their_epochs"] * hp["their_epoch_num_steps"] / per_epoch)


def stop_fn(mean_return: float) -> bool:
    return mean_return >= SOLVE_THRESHOLD


def shared_params(hp: dict[str, Any], train_collector: Any, test_collector: Any,
                  epoch_num_steps: int, max_epochs: int) -> dict[str, Any]:
    """Trainer keywords both runs share: the benchmark's test cadence and quiet output."""
    return dict(training_collector=train_collector, test_collector=test_collector,
                max_epochs=max_epochs, epoch_num_steps=epoch_num_steps,
                collection_step_num_env_steps=hp["collection_step_num_env_steps"],
                test_step_num_episodes=TEST_EPISODES, batch_size=hp["batch_size"],
                stop_fn=stop_fn, test_in_training=False, logger=None, verbose=False,
                show_progress=False)


def run_summary(source: str, hp: dict[str, Any], epoch_num_steps: int, per_epoch: int,
                max_epochs: int, **extra: Any) -> dict[str, Any]:
    """What the run used, printed with its result."""
    return {"source": source, **{k: v for k, v in hp.items() if not k.startswith("their_")},
            **extra, "epoch_num_steps": epoch_num_steps, "env_steps_per_test": per_epoch,
            "max_epochs": max_epochs, "max_env_steps": max_epochs * per_epoch}


def build_ppo(seed: int, epoch_num_steps: int) -> tuple[Any, Any, TimedCollector, Any, dict]:
    hp = PPO_HP
    env = gym.make(TASK)
    train_envs = make_envs(hp["num_train_envs"], seed)
    test_envs = make_envs(NUM_TEST_ENVS, seed)

    state_shape = env.observation_space.shape
    action_shape = int(env.action_space.n)
    net = Net(state_shape=state_shape, hidden_sizes=hp["hidden_sizes"])
    actor = DiscreteActor(preprocess_net=net, action_shape=action_shape)
    critic = DiscreteCritic(preprocess_net=net)
    for m in ActorCritic(actor, critic).modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.orthogonal_(m.weight)
            torch.nn.init.zeros_(m.bias)
    policy = DiscreteActorPolicy(
        actor=actor,
        dist_fn=torch.distributions.Categorical,  # actor outputs softmax probabilities
        action_space=env.action_space,
        deterministic_eval=hp["deterministic_eval"],
    )
    algorithm = PPO(
        policy=policy,
        critic=critic,
        optim=AdamOptimizerFactory(lr=hp["lr"]),
        gamma=hp["gamma"],
        max_grad_norm=hp["max_grad_norm"],
        eps_clip=hp["eps_clip"],
        vf_coef=hp["vf_coef"],
        ent_coef=hp["ent_coef"],
        gae_lambda=hp["gae_lambda"],
        return_scaling=hp["return_scaling"],
        dual_clip=hp["dual_clip"],
        value_clip=hp["value_clip"],
        advantage_normalization=hp["advantage_normalization"],
        recompute_advantage=hp["recompute_advantage"],
    )
    train_collector = Collector[CollectStats](
        algorithm,
        train_envs,
        VectorReplayBuffer(hp["buffer_size"], len(train_envs)),
    )
    test_collector = TimedCollector(algorithm, test_envs)

    per_epoch, max_epochs = epoch_plan(hp, epoch_num_steps)

    def make_params() -> OnPolicyTrainerParams:
        return OnPolicyTrainerParams(
            **shared_params(hp, train_collector, test_collector, epoch_num_steps, max_epochs),
            update_step_num_repetitions=hp["update_step_num_repetitions"],
        )

    summary = run_summary("tianshou test/discrete/test_ppo.py (2.0)", hp, epoch_num_steps,
                          per_epoch, max_epochs)
    return algorithm, make_params, test_collector, None, summary


def build_dqn(seed: int, epoch_num_steps: int) -> tuple[Any, Any, TimedCollector, Any, dict]:
    hp = DQN_HP
    env = gym.make(TASK)
    train_envs = make_envs(hp["num_train_envs"], seed)
    test_envs = make_envs(NUM_TEST_ENVS, seed)

    net = Net(
        state_shape=env.observation_space.shape,
        action_shape=int(env.action_space.n),
        hidden_sizes=hp["hidden_sizes"],
    )
    policy = DiscreteQLearningPolicy(
        model=net,
        action_space=env.action_space,
        observation_space=env.observation_space,
        eps_training=hp["eps_train"],
        eps_inference=0.0,  # benchmark: deterministic (greedy) test episodes
    )
    algorithm = DQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=hp["lr"]),
        gamma=hp["gamma"],
        n_step_return_horizon=hp["n_step"],
        target_update_freq=hp["target_update_freq"],
    )
    train_collector = Collector[CollectStats](
        algorithm,
        train_envs,
        VectorReplayBuffer(hp["buffer_size"], len(train_envs)),
        exploration_noise=True,
    )
    test_collector = TimedCollector(algorithm, test_envs, exploration_noise=False)

    eps_train = hp["eps_train"]

    def training_fn(epoch: int, env_step: int) -> None:
        # their eps annealing: 0.1 until 10k steps, linear to 0.01 at 50k, then 0.01
        if env_step <= 10000:
            policy.set_eps_training(eps_train)
        elif env_step <= 50000:
            policy.set_eps_training(eps_train - (env_step - 10000) / 40000 * (0.9 * eps_train))
        else:
            policy.set_eps_training(0.1 * eps_train)

    warmup_steps = hp["batch_size"] * hp["num_train_envs"]

    def warmup() -> None:
        # their initial collection of batch_size * num_train_envs steps before training
        with policy_within_training_step(policy):
            train_collector.reset()
            train_collector.collect(n_step=warmup_steps)

    per_epoch, max_epochs = epoch_plan(hp, epoch_num_steps)

    def make_params() -> OffPolicyTrainerParams:
        return OffPolicyTrainerParams(
            **shared_params(hp, train_collector, test_collector, epoch_num_steps, max_epochs),
            update_step_num_gradient_steps_per_sample=hp["update_per_step"],
            training_fn=training_fn,
        )

    summary = run_summary("tianshou test/discrete/test_dqn.py (2.0)", hp, epoch_num_steps,
                          per_epoch, max_epochs,
                          eps_schedule="0.1 to 10k steps, linear to 0.01 at 50k", eps_test=0.0,
                          warmup_env_steps=warmup_steps)
    return algorithm, make_params, test_collector, warmup, summary


def main() -> None:
    parser = argparse.ArgumentParser(description="Tianshou peer run on CartPole-v1")
    parser.add_argument("--algo", choices=["ppo", "dqn"], required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--epoch-num-steps",
        type=int,
        default=2048,
        help="env steps between tests (trainer epoch_num_steps); benchmark default 2048",
    )
    args = parser.parse_args()

    spec = gym.spec(TASK)
    assert spec.reward_threshold == SOLVE_THRESHOLD, spec.reward_threshold

    with contextlib.redirect_stdout(sys.stderr):
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        build = build_ppo if args.algo == "ppo" else build_dqn
        algorithm, make_params, test_collector, warmup, summary = build(
            args.seed, args.epoch_num_steps
        )
        params = make_params()
        test_collector.timed_seconds = 0.0
        test_collector.num_collect_calls = 0
        test_collector.test_means.clear()

        t_train_start = time.perf_counter()
        if warmup is not None:
            warmup()
        info = algorithm.run_training(params)
        t_end = time.perf_counter()

    print(
        f"[tianshou_run] best_score={info.best_score:.2f} train_step={info.train_step} "
        f"update_step={info.update_step} tests={test_collector.num_collect_calls} "
        f"test_episodes={info.test_episode} timed_test_s={test_collector.timed_seconds:.3f} "
        f"tianshou_test_time_s={info.timing.test_time:.3f} "
        f"tianshou_total_s={info.timing.total_time:.3f}",
        file=sys.stderr,
    )
    print(f"[tianshou_run] test means: {test_collector.test_means}", file=sys.stderr)
    result = {
        "tool": "tianshou",
        "algo": args.algo,
        "seed": args.seed,
        "solved": bool(info.best_score >= SOLVE_THRESHOLD),
        "env_steps": int(info.train_step),
        "setup_seconds": t_train_start - T_START,
        "train_seconds": t_end - t_train_start,
        "test_seconds": test_collector.timed_seconds,
        "hyperparameters": summary,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
