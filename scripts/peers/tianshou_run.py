# Peer runner: Tianshou 2.0.1 with Tianshou's own test hyperparameters, held to bench_peers.py's
# criterion (scripts/peers/criterion.py): PPO and DQN on CartPole-v1, SAC and TD3 on Pendulum-v1.
#
# Usage: python scripts/peers/tianshou_run.py --algo {ppo,dqn,sac,td3} --seed S
#        [--test-every N] [--max-env-steps N]
#
# Hyperparameters are those of Tianshou's repository tests (2.0 era): test/discrete/test_ppo.py,
# test/discrete/test_dqn.py, test/continuous/test_sac_with_il.py (its SAC part) and
# test/continuous/test_td3.py, except what the benchmark fixes for every tool:
# - a test step every `test_every` env steps (Tianshou's epoch_num_steps; an epoch ends only on
#   whole collection steps, see steps_per_epoch), each of `test_episodes` deterministic episodes
#   on `num_test_envs` test envs (their tests use 100), and no test_in_train;
# - solved = mean test return >= the criterion's threshold (CartPole 475; Pendulum -200, where
#   their tests stop at -250); stop as soon as solved;
# - the budget: the criterion's cap where it has one (Pendulum: 50,000 env steps, below their
#   tests' 240k for SAC and 100k for TD3), else their epochs * epoch_num_steps.
# Tianshou's trainer also tests once before training (its "initial test step", at env step 0);
# that test is counted in test_seconds. No logger, no checkpoints. The last stdout line is one
# JSON object.
#
# The clock starts before the heavy imports, hence imports below the first statement:
# ruff: noqa: E402
import time

T_START = time.perf_counter()

import contextlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

torch.set_num_threads(1)

from criterion import Criterion, peer_args, print_result
from tianshou.algorithm import DQN, PPO, SAC, TD3
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.exploration import GaussianNoise
from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams
from tianshou.utils.net.common import ActorCritic, Net
from tianshou.utils.net.continuous import (
    ContinuousActorDeterministic,
    ContinuousActorProbabilistic,
    ContinuousCritic,
)
from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic
from tianshou.utils.torch_utils import policy_within_training_step

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

# Tianshou's test/continuous/test_sac_with_il.py defaults, 2.0 era (the imitation part that
# follows SAC there is not run): auto alpha from log alpha 0 (alpha 1) to the entropy target
# -|A|; an unbounded Gaussian actor (tanh-squashed by SAC); test envs seeded seed + 10.
SAC_HP: dict[str, Any] = {
    "buffer_size": 20000,
    "actor_lr": 1e-3,
    "critic_lr": 1e-3,
    "gamma": 0.99,
    "tau": 0.005,
    "alpha_lr": 3e-4,
    "their_epochs": 10,
    "their_epoch_num_steps": 24000,
    "collection_step_num_env_steps": 10,
    "update_per_step": 0.1,
    "batch_size": 128,
    "hidden_sizes": [128, 128],
    "num_train_envs": 10,
    "n_step": 3,
}

# Tianshou's test/continuous/test_td3.py defaults. The stored 2.0-era copy was not at hand:
# these are its gymnasium-era 1.x values, which 2.0's port of the sibling test_ddpg.py kept
# unchanged (same buffer, rates, noise, collection, batch, nets). Deterministic actor scaled by
# max_action, Gaussian exploration noise, test envs seeded like the train envs.
TD3_HP: dict[str, Any] = {
    "buffer_size": 20000,
    "actor_lr": 1e-4,
    "critic_lr": 1e-3,
    "gamma": 0.99,
    "tau": 0.005,
    "exploration_noise": 0.1,
    "policy_noise": 0.2,
    "noise_clip": 0.5,
    "update_actor_freq": 2,
    "their_epochs": 5,
    "their_epoch_num_steps": 20000,
    "collection_step_num_env_steps": 8,
    "update_per_step": 0.125,
    "batch_size": 128,
    "hidden_sizes": [128, 128],
    "num_train_envs": 8,
    "n_step": 3,
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

    def clear_timing(self) -> None:
        self.timed_seconds, self.num_collect_calls = 0.0, 0
        self.test_means.clear()


@dataclass
class Build:
    """What main() needs from one algorithm's set-up."""

    algorithm: Algorithm
    #: the trainer params; built after the clock's set-up mark, as the trainer's own set-up
    make_params: Callable[[], OnPolicyTrainerParams | OffPolicyTrainerParams]
    test_collector: TimedCollector
    #: printed with the result: the hyperparameters and the cadence actually used
    summary: dict[str, Any]
    train_collector: Collector[CollectStats]
    #: an initial collection before training (their DQN test's), outside the trainer
    warmup: Callable[[], None] | None = None
    #: env steps the warm-up takes; the trainer's reset zeroes the collector's step count, so
    #: these are added to its train_step
    warmup_env_steps: int = 0


def make_envs(env_id: str, n: int, seed: int) -> DummyVectorEnv:
    envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(n)])
    envs.seed(seed)
    return envs


def steps_per_epoch(epoch_num_steps: int, collect_steps: int, num_envs: int) -> int:
    """Env steps the trainer actually takes per epoch (whole collection steps only)."""
    per_collect = math.ceil(collect_steps / num_envs) * num_envs
    return math.ceil(epoch_num_steps / per_collect) * per_collect


def epoch_plan(hp: dict[str, Any], crit: Criterion) -> tuple[int, int]:
    """(env steps per epoch, epochs): within the criterion's cap if it has one, else enough
    epochs of our cadence to cover their tests' env-step budget."""
    per_epoch = steps_per_epoch(
        crit.test_every, hp["collection_step_num_env_steps"], hp["num_train_envs"]
    )
    if crit.max_env_steps is not None:
        return per_epoch, max(1, crit.max_env_steps // per_epoch)
    return per_epoch, math.ceil(hp["their_epochs"] * hp["their_epoch_num_steps"] / per_epoch)


def shared_params(hp: dict[str, Any], train_collector: Any, test_collector: Any,
                  crit: Criterion, max_epochs: int) -> dict[str, Any]:
    """Trainer keywords every run shares: the benchmark's test cadence and quiet output."""
    return dict(training_collector=train_collector, test_collector=test_collector,
                max_epochs=max_epochs, epoch_num_steps=crit.test_every,
                collection_step_num_env_steps=hp["collection_step_num_env_steps"],
                test_step_num_episodes=crit.test_episodes, batch_size=hp["batch_size"],
                stop_fn=crit.solved, test_in_training=False, logger=None, verbose=False,
                show_progress=False)


def run_summary(source: str, hp: dict[str, Any], crit: Criterion, per_epoch: int,
                max_epochs: int, **extra: Any) -> dict[str, Any]:
    """What the run used, printed with its result."""
    return {"source": source, **{k: v for k, v in hp.items() if not k.startswith("their_")},
            **extra, "epoch_num_steps": crit.test_every, "env_steps_per_test": per_epoch,
            "max_epochs": max_epochs, "max_env_steps": max_epochs * per_epoch}


def off_policy_build(algorithm: Algorithm, hp: dict[str, Any], crit: Criterion,
                     train_envs: DummyVectorEnv, test_envs: DummyVectorEnv, source: str,
                     training_fn: Callable[[int, int], None] | None = None,
                     **extra: Any) -> Build:
    """Collectors and trainer params of the off-policy tests (DQN, SAC, TD3): exploration on
    in training, off in the test collector; their update ratio; the benchmark's cadence."""
    train_collector = Collector[CollectStats](
        algorithm,
        train_envs,
        VectorReplayBuffer(hp["buffer_size"], len(train_envs)),
        exploration_noise=True,
    )
    test_collector = TimedCollector(algorithm, test_envs, exploration_noise=False)
    per_epoch, max_epochs = epoch_plan(hp, crit)

    def make_params() -> OffPolicyTrainerParams:
        return OffPolicyTrainerParams(
            **shared_params(hp, train_collector, test_collector, crit, max_epochs),
            update_step_num_gradient_steps_per_sample=hp["update_per_step"],
            training_fn=training_fn,
        )

    summary = run_summary(source, hp, crit, per_epoch, max_epochs, **extra)
    return Build(algorithm, make_params, test_collector, summary, train_collector)


def build_ppo(seed: int, crit: Criterion) -> Build:
    hp = PPO_HP
    env = gym.make(crit.env_id)
    train_envs = make_envs(crit.env_id, hp["num_train_envs"], seed)
    test_envs = make_envs(crit.env_id, crit.num_test_envs, seed)

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

    per_epoch, max_epochs = epoch_plan(hp, crit)

    def make_params() -> OnPolicyTrainerParams:
        return OnPolicyTrainerParams(
            **shared_params(hp, train_collector, test_collector, crit, max_epochs),
            update_step_num_repetitions=hp["update_step_num_repetitions"],
        )

    summary = run_summary("tianshou test/discrete/test_ppo.py (2.0)", hp, crit, per_epoch,
                          max_epochs)
    return Build(algorithm, make_params, test_collector, summary, train_collector)


def build_dqn(seed: int, crit: Criterion) -> Build:
    hp = DQN_HP
    env = gym.make(crit.env_id)
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
    build = off_policy_build(
        algorithm, hp, crit, make_envs(crit.env_id, hp["num_train_envs"], seed),
        make_envs(crit.env_id, crit.num_test_envs, seed),
        "tianshou test/discrete/test_dqn.py (2.0)", training_fn=training_fn,
        eps_schedule="0.1 to 10k steps, linear to 0.01 at 50k", eps_test=0.0,
        warmup_env_steps=warmup_steps)
    train_collector = build.train_collector

    def warmup() -> None:
        # their initial collection of batch_size * num_train_envs steps before training
        with policy_within_training_step(policy):
            train_collector.reset()
            train_collector.collect(n_step=warmup_steps)

    build.warmup, build.warmup_env_steps = warmup, warmup_steps
    return build


def twin_critics(state_shape: Any, action_shape: Any, hidden_sizes: list[int]
                 ) -> tuple[ContinuousCritic, ContinuousCritic]:
    """Two Q(s, a) critics over the concatenated observation and action, as their tests."""
    return tuple(  # type: ignore[return-value]
        ContinuousCritic(preprocess_net=Net(state_shape=state_shape, action_shape=action_shape,
                                            hidden_sizes=hidden_sizes, concat=True))
        for _ in range(2)
    )


def build_sac(seed: int, crit: Criterion) -> Build:
    hp = SAC_HP
    env = gym.make(crit.env_id)
    state_shape, action_shape = env.observation_space.shape, env.action_space.shape
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=state_shape, hidden_sizes=hp["hidden_sizes"]),
        action_shape=action_shape,
        unbounded=True,
    )
    critic1, critic2 = twin_critics(state_shape, action_shape, hp["hidden_sizes"])
    target_entropy = -float(np.prod(action_shape))
    algorithm = SAC(
        policy=SACPolicy(actor=actor, action_space=env.action_space),
        policy_optim=AdamOptimizerFactory(lr=hp["actor_lr"]),
        critic=critic1,
        critic_optim=AdamOptimizerFactory(lr=hp["critic_lr"]),
        critic2=critic2,
        critic2_optim=AdamOptimizerFactory(lr=hp["critic_lr"]),
        tau=hp["tau"],
        gamma=hp["gamma"],
        alpha=AutoAlpha(target_entropy, 0.0, AdamOptimizerFactory(lr=hp["alpha_lr"])),
        n_step_return_horizon=hp["n_step"],
    )
    return off_policy_build(
        algorithm, hp, crit, make_envs(crit.env_id, hp["num_train_envs"], seed),
        make_envs(crit.env_id, crit.num_test_envs, seed + hp["num_train_envs"]),
        "tianshou test/continuous/test_sac_with_il.py (2.0), SAC part",
        auto_alpha=f"log alpha 0, target entropy {target_entropy:g}")


def build_td3(seed: int, crit: Criterion) -> Build:
    hp = TD3_HP
    env = gym.make(crit.env_id)
    state_shape, action_shape = env.observation_space.shape, env.action_space.shape
    actor = ContinuousActorDeterministic(
        preprocess_net=Net(state_shape=state_shape, hidden_sizes=hp["hidden_sizes"]),
        action_shape=action_shape,
        max_action=float(env.action_space.high[0]),
    )
    critic1, critic2 = twin_critics(state_shape, action_shape, hp["hidden_sizes"])
    policy = ContinuousDeterministicPolicy(
        actor=actor,
        exploration_noise=GaussianNoise(sigma=hp["exploration_noise"]),
        action_space=env.action_space,
    )
    algorithm = TD3(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=hp["actor_lr"]),
        critic=critic1,
        critic_optim=AdamOptimizerFactory(lr=hp["critic_lr"]),
        critic2=critic2,
        critic2_optim=AdamOptimizerFactory(lr=hp["critic_lr"]),
        tau=hp["tau"],
        gamma=hp["gamma"],
        policy_noise=hp["policy_noise"],
        update_actor_freq=hp["update_actor_freq"],
        noise_clip=hp["noise_clip"],
        n_step_return_horizon=hp["n_step"],
    )
    return off_policy_build(
        algorithm, hp, crit, make_envs(crit.env_id, hp["num_train_envs"], seed),
        make_envs(crit.env_id, crit.num_test_envs, seed),
        "tianshou test/continuous/test_td3.py (gymnasium-era values, kept in 2.0)")


BUILDS: dict[str, Callable[[int, Criterion], Build]] = {
    "ppo": build_ppo, "dqn": build_dqn, "sac": build_sac, "td3": build_td3,
}


def main() -> None:
    args, crit = peer_args("tianshou")
    with contextlib.redirect_stdout(sys.stderr):
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        build = BUILDS[args.algo](args.seed, crit)
        params = build.make_params()
        build.test_collector.clear_timing()  # the collector's own reset at construction

        t_train = time.perf_counter()
        if build.warmup is not None:
            build.warmup()
        info = build.algorithm.run_training(params)

    tc = build.test_collector
    print(
        f"[tianshou_run] best_score={info.best_score:.2f} train_step={info.train_step} "
        f"warmup_env_steps={build.warmup_env_steps} update_step={info.update_step} "
        f"tests={tc.num_collect_calls} test_episodes={info.test_episode} "
        f"timed_test_s={tc.timed_seconds:.3f} tianshou_test_time_s={info.timing.test_time:.3f} "
        f"tianshou_total_s={info.timing.total_time:.3f}",
        file=sys.stderr,
    )
    print(f"[tianshou_run] test means: {tc.test_means}", file=sys.stderr)
    print_result("tianshou", args, solved=crit.solved(info.best_score),
                 env_steps=info.train_step + build.warmup_env_steps, t_start=T_START,
                 t_train=t_train, test_seconds=tc.timed_seconds,
                 hyperparameters=build.summary)


if __name__ == "__main__":
    main()
