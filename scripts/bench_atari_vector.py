"""Atari env steps per second: ale-py's native vector env against gymnasium's vector envs.

Three ways to step 8 preprocessed Atari games with uniformly random actions:

  sync     rltrain's training envs (env=atari, train_only wrappers included) in gymnasium's
           SyncVectorEnv, one process: what rltrain uses (env.vectorization=auto)
  async    the same envs in gymnasium's AsyncVectorEnv, one subprocess per env
           (env.vectorization=async)
  native   ale-py's AtariVectorEnv: the emulators and the preprocessing in C++ threads, set to
           match env=atari (sticky actions 0.25, frame skip 4 with max-pooling, 84x84
           greyscale, 4 frames stacked, up to 30 no-ops, 108,000 frames; and, as rltrain's
           training envs, episodic life, FIRE on reset and reward clipping)
  sync-rgb sync, with the env's own observation in RGB (gymnasium's default) rather than
           env=atari's greyscale, which AtariPreprocessing never reads

The native env cannot save and restore each emulator's state (ALEVectorInterface has no
cloneState; its envs live in C++ threads), so a run on it could not resume exactly; nor
does it apply Python wrappers. Env steps count every env: one vector step of 8 envs is 8.

Needs the atari extra: pip install -e ".[atari]".

    .venv/bin/python scripts/bench_atari_vector.py [--game Pong] [--steps 20000] [--envs 8]
        [--modes sync async native] [--threads 0] [--repeat 1]

With --repeat R the modes run in turn R times and each reports its best round (on a shared
machine the best is the least disturbed).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from hydra import compose, initialize_config_dir

from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.envs.vector import make_vector_env

CONF = Path(__file__).resolve().parents[1] / "conf"


def env_config(game: str, vectorization: str, overrides: list[str]) -> Any:
    """The env section of ``rltrain env=atari env.id=ALE/<game>-v5``, checked."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["algo=dqn", "env=atari", f"env.id=ALE/{game}-v5",
                                           f"env.vectorization={vectorization}", *overrides])
    return settings(cfg).env


def rltrain_envs(game: str, num_envs: int, vectorization: str,
                 overrides: list[str]) -> gym.vector.VectorEnv:
    return make_vector_env(env_config(game, vectorization, overrides), num_envs, train=True)


def native_envs(game: str, num_envs: int, threads: int) -> gym.vector.VectorEnv:
    from ale_py.vector_env import AtariVectorEnv

    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in game).lstrip("_")
    return AtariVectorEnv(
        snake, num_envs, num_threads=threads, repeat_action_probability=0.25,
        max_num_frames_per_episode=108_000, img_height=84, img_width=84, grayscale=True,
        stack_num=4, frameskip=4, maxpool=True, noop_max=30, episodic_life=True,
        reward_clipping=True, use_fire_reset=True)


def measure(make: Callable[[], gym.vector.VectorEnv], steps: int, seed: int) -> dict[str, float]:
    """Env steps per second over ``steps`` env steps (after the reset, which is not timed)."""
    envs = make()
    try:
        rng = np.random.default_rng(seed)
        num = envs.num_envs
        space = envs.single_action_space
        assert isinstance(space, gym.spaces.Discrete)
        actions = rng.integers(0, int(space.n), size=(steps // num + 1, num))
        envs.reset(seed=seed)
        episodes = 0
        start = time.perf_counter()
        for action in actions[: steps // num]:
            _, _, terminated, truncated, _ = envs.step(action)
            episodes += int(np.sum(terminated | truncated))
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    done = steps // num * num
    return {"steps": done, "seconds": seconds, "steps_per_s": done / seconds,
            "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Pong", help="ALE game, as in ALE/<Game>-v5")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per mode")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", nargs="+", default=["sync", "async", "native"],
                        choices=["sync", "async", "native", "sync-rgb"])
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the modes")
    parser.add_argument("--threads", type=int, default=0,
                        help="native: its C++ threads (0: ale-py's default)")
    args = parser.parse_args()

    makers: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        "sync": lambda: rltrain_envs(args.game, args.envs, "sync", []),
        "async": lambda: rltrain_envs(args.game, args.envs, "async", []),
        "native": lambda: native_envs(args.game, args.envs, args.threads),
        # sync with the env's own observation in RGB, gymnasium's default (env=atari asks for
        # greyscale: AtariPreprocessing reads the screen itself, and the env's own RGB copy
        # of every frame would go unused)
        "sync-rgb": lambda: rltrain_envs(args.game, args.envs, "sync",
                                         ["env.kwargs.obs_type=rgb"]),
    }
    print(f"ALE/{args.game}-v5, {args.envs} envs, {args.steps:,} env steps per mode, "
          f"random actions, {os.cpu_count()} CPUs")
    results: dict[str, dict[str, float]] = {}
    for round_ in range(args.repeat):
        for mode in args.modes:
            r = measure(makers[mode], args.steps, args.seed)
            print(f"  {mode:9s} {r['steps_per_s']:9,.0f} env steps/s  ({r['steps']:,} steps in "
                  f"{r['seconds']:.1f} s, {r['episodes']} episode ends; round {round_ + 1})",
                  flush=True)
            if mode not in results or r["steps_per_s"] > results[mode]["steps_per_s"]:
                results[mode] = r
    if args.repeat > 1:
        print("  best: " + ", ".join(f"{m} {r['steps_per_s']:,.0f}" for m, r in results.items()))
    if "sync" in results:
        base = results["sync"]["steps_per_s"]
        print("  vs sync: " + ", ".join(f"{m} x{r['steps_per_s'] / base:.2f}"
                                        for m, r in results.items() if m != "sync"))


if __name__ == "__main__":
    main()
