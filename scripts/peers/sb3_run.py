"""Stable-Baselines3 2.9.2 with the RL-Zoo3 hyperparameters, held to bench_peers.py's criterion
(scripts/peers/criterion.py): PPO and DQN on CartPole-v1, SAC and TD3 on Pendulum-v1. Prints
one JSON line (the last line of stdout).

Tests: at every multiple of the criterion's ``test_every`` env steps, SB3's evaluate_policy runs
``test_episodes`` deterministic episodes on ``num_test_envs`` test envs (one episode each);
the run stops as soon as their mean reaches the threshold. A test point is skipped while the
model has made no gradient step yet (its policy is still the initial one), as rltrain's trainer
tests nothing during its random warm-up: with TD3's learning_starts=10000 the first test is
at 11,000 env steps.

Budget: the criterion's cap when it has one (Pendulum: 50,000 env steps, more than the zoo's
n_timesteps of 20,000: an unsolved run is reported as such), else the zoo's n_timesteps.

    python scripts/peers/sb3_run.py --algo ppo|dqn|sac|td3 --seed S [--max-env-steps N]
"""

import time

T_START = time.perf_counter()

# ruff: noqa: E402 (the clock starts before the heavy imports)
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from criterion import Criterion, peer_args, print_result
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import VecEnv


def linear(start: float) -> Callable[[float], float]:
    """RL-Zoo3's ``lin_<x>`` schedule: from x down to 0 over the run."""
    return lambda progress_remaining: progress_remaining * start


#: RL-Zoo3 (rl-baselines3-zoo) hyperparams/<algo>.yml: ppo.yml and dqn.yml CartPole-v1 as in
#: rl-zoo3 2.9.2; sac.yml Pendulum-v1 (n_timesteps 20000, learning_rate 1e-3, all else SB3's
#: defaults: buffer 1e6, learning_starts 100, batch 256, tau 0.005, gamma 0.99, train_freq 1,
#: gradient_steps 1, ent_coef auto, net_arch [256, 256]); td3.yml Pendulum-v1 (TD3's other
#: settings are SB3's defaults: batch 256, tau 0.005, policy_delay 2, target noise 0.2 clipped
#: at 0.5). Older zoo versions give TD3 train_freq [1, "episode"] with gradient_steps -1: the
#: same number of gradient steps (one per env step), taken at each episode's end.
ZOO: dict[str, dict[str, Any]] = {
    "ppo": dict(cls=PPO, n_envs=8, n_timesteps=100_000, kwargs=dict(
        n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=linear(0.001), clip_range=linear(0.2))),
    "dqn": dict(cls=DQN, n_envs=1, n_timesteps=50_000, kwargs=dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]))),
    "sac": dict(cls=SAC, n_envs=1, n_timesteps=20_000, kwargs=dict(learning_rate=1e-3)),
    "td3": dict(cls=TD3, n_envs=1, n_timesteps=20_000, noise_std=0.1, kwargs=dict(
        gamma=0.98, buffer_size=200_000, learning_starts=10_000, train_freq=1,
        gradient_steps=1, learning_rate=1e-3, policy_kwargs=dict(net_arch=[400, 300]))),
}


class SolveCheck(BaseCallback):
    """Test at every multiple of ``crit.test_every`` env steps; stop training once solved."""

    def __init__(self, eval_env: VecEnv, crit: Criterion) -> None:
        super().__init__()
        self.eval_env, self.crit, self.next_test = eval_env, crit, crit.test_every
        self.solved, self.solved_at = False, None
        self.test_seconds, self.tests, self.test_means = 0.0, 0, []

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next_test:
            return True
        while self.next_test <= self.num_timesteps:  # several envs may step past a test point
            self.next_test += self.crit.test_every
        if self.model._n_updates == 0:  # not trained yet: the test would measure nothing
            return True
        t0 = time.perf_counter()
        mean, _ = evaluate_policy(self.model, self.eval_env,
                                  n_eval_episodes=self.crit.test_episodes, deterministic=True)
        self.test_seconds += time.perf_counter() - t0
        self.tests += 1
        self.test_means.append(round(float(mean), 1))
        if self.crit.solved(mean):
            self.solved, self.solved_at = True, self.num_timesteps
            return False
        return True


def build(algo: str, seed: int, env_id: str) -> BaseAlgorithm:
    zoo = ZOO[algo]
    env = make_vec_env(env_id, n_envs=zoo["n_envs"], seed=seed)
    kwargs = dict(zoo["kwargs"])
    if "noise_std" in zoo:  # the zoo's noise_type 'normal'
        n = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), zoo["noise_std"] * np.ones(n))
    return zoo["cls"]("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def main() -> None:
    args, crit = peer_args("sb3")
    torch.set_num_threads(1)
    model = build(args.algo, args.seed, crit.env_id)
    eval_env = make_vec_env(crit.env_id, n_envs=crit.num_test_envs, seed=args.seed + 1000)
    callback = SolveCheck(eval_env, crit)
    budget = crit.max_env_steps or ZOO[args.algo]["n_timesteps"]
    t_train = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    print(f"[sb3_run] tests={callback.tests} means={callback.test_means} "
          f"gradient_steps={model._n_updates}", file=sys.stderr)
    print_result("sb3", args, solved=callback.solved,
                 env_steps=callback.solved_at or model.num_timesteps, t_start=T_START,
                 t_train=t_train, test_seconds=callback.test_seconds, budget=budget)


if __name__ == "__main__":
    main()
