"""What bench_peers.py holds every tool to, in one place: the solve criterion of each task, the
peer runners' command line, and the one JSON line each runner prints last.

Standard library only, on purpose: the peer runners import it after starting their clock and
before their heavy imports, so it must cost nothing, and bench_peers.py (which imports it too)
must not load torch.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Criterion:
    """When a run counts as solved, how often it is tested, and how long it may run."""

    env_id: str
    #: solved when the mean return of one test step is >= this
    threshold: float
    #: env steps between test steps
    test_every: int
    #: deterministic episodes per test step, one per test env
    test_episodes: int
    num_test_envs: int
    #: a cap on env steps common to every tool, so that an unsolved run ends; None: each tool
    #: keeps its own budget (CartPole, whose figures in the README were measured that way)
    max_env_steps: int | None

    def solved(self, mean_return: float) -> bool:
        return mean_return >= self.threshold


CARTPOLE = Criterion("CartPole-v1", threshold=475.0, test_every=2048, test_episodes=10,
                     num_test_envs=10, max_env_steps=None)
#: gymnasium registers no threshold for Pendulum-v1; -200 is a little below what RL-Zoo3's
#: tuned SAC and TD3 agents publish (about -150). Tianshou's own tests stop at -250.
PENDULUM = Criterion("Pendulum-v1", threshold=-200.0, test_every=1000, test_episodes=10,
                     num_test_envs=10, max_env_steps=50_000)

#: task (algorithm) -> rltrain's env config name, and its criterion
ENV_OF = {"ppo": "cartpole", "dqn": "cartpole", "sac": "pendulum", "td3": "pendulum"}
CRITERIA = {"cartpole": CARTPOLE, "pendulum": PENDULUM}
TASKS = tuple(ENV_OF)


def criterion_for(algo: str) -> Criterion:
    return CRITERIA[ENV_OF[algo]]


def peer_args(tool: str) -> tuple[argparse.Namespace, Criterion]:
    """The runners' shared command line; ``--test-every`` and ``--max-env-steps`` exist for a
    tool that cannot test exactly on the criterion's cadence and for short smoke runs."""
    parser = argparse.ArgumentParser(description=f"{tool} peer run for bench_peers.py")
    parser.add_argument("--algo", choices=TASKS, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-every", type=int, default=None,
                        help="env steps between tests (default: the criterion's)")
    parser.add_argument("--max-env-steps", type=int, default=None,
                        help="cap on env steps (default: the criterion's cap, if it has one, "
                             "else the tool's own budget)")
    args = parser.parse_args()
    crit = criterion_for(args.algo)
    if args.test_every is not None:
        crit = replace(crit, test_every=args.test_every)
    if args.max_env_steps is not None:
        crit = replace(crit, max_env_steps=args.max_env_steps)
    return args, crit


def print_result(tool: str, args: argparse.Namespace, *, solved: bool, env_steps: int,
                 t_start: float, t_train: float, test_seconds: float, **extra: Any) -> None:
    """The runner's last stdout line. ``t_start`` is the clock before the heavy imports and
    ``t_train`` when the training loop began; bench_peers.py times the whole process itself and
    reads train_seconds (and test_seconds, part of it) from here."""
    t_end = time.perf_counter()
    print(json.dumps({
        "tool": tool, "algo": args.algo, "seed": args.seed, "solved": bool(solved),
        "env_steps": int(env_steps), "setup_seconds": t_train - t_start,
        "train_seconds": t_end - t_train, "test_seconds": test_seconds, **extra,
    }), flush=True)
