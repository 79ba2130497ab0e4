"""Stable-Baselines3 on CartPole-v1 with the RL-Zoo3 hyperparameters, to the benchmark's
solve criterion: every 2,048 env steps, 10 deterministic test episodes; solved at a mean
return >= 475. Prints one JSON line (the last line of stdout).

    python scripts/peers/sb3_run.py --algo ppo|dqn --seed S
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402
from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402

THRESHOLD, TEST_EVERY, TEST_EPISODES = 475.0, 2048, 10


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


# rl-zoo3 2.9.2, hyperparams/ppo.yml and dqn.yml, CartPole-v1
ZOO = {
    "ppo": dict(n_envs=8, n_timesteps=100_000, kwargs=dict(
        n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=linear(0.001), clip_range=linear(0.2))),
    "dqn": dict(n_envs=1, n_timesteps=50_000, kwargs=dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]))),
}


class SolveCheck(BaseCallback):
    """Test every TEST_EVERY env steps; stop training once solved."""

    def __init__(self, eval_env) -> None:
        super().__init__()
        self.eval_env, self.next_test = eval_env, TEST_EVERY
        self.solved, self.test_seconds, self.solved_at = False, 0.0, None

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next_test:
            return True
        self.next_test += TEST_EVERY
        t0 = time.perf_counter()
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=TEST_EPISODES,
                                  deterministic=True)
        self.test_seconds += time.perf_counter() - t0
        if mean >= THRESHOLD:
            self.solved, self.solved_at = True, self.num_timesteps
            return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", choices=["ppo", "dqn"], required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    zoo = ZOO[args.algo]
    env = make_vec_env("CartPole-v1", n_envs=zoo["n_envs"], seed=args.seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 1000)
    cls = PPO if args.algo == "ppo" else DQN
    model = cls("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **zoo["kwargs"])
    callback = SolveCheck(eval_env)
    t_train = time.perf_counter()
    model.learn(total_timesteps=zoo["n_timesteps"], callback=callback)
    t_end = time.perf_counter()
    print(json.dumps({
        "tool": "sb3", "algo": args.algo, "seed": args.seed, "solved": callback.solved,
        "env_steps": int(callback.solved_at or model.num_timesteps),
        "setup_seconds": t_train - T_START, "train_seconds": t_end - t_train,
        "test_seconds": callback.test_seconds,
    }))


if __name__ == "__main__":
    main()
