"""rltrain against Stable-Baselines3 and Tianshou: wall seconds to solve a task.

Every tool runs in its own fresh process (start-up counted), one after another, one torch
thread each, on the same seeds, with the same solve criterion and test cadence
(scripts/peers/criterion.py):

  ppo, dqn  CartPole-v1: every 2,048 env steps, 10 deterministic test episodes on 10 test envs;
            solved at a mean return >= 475; each tool's own budget.
  sac, td3  Pendulum-v1: every 1,000 env steps, 10 deterministic test episodes on 10 test envs;
            solved at a mean return >= -200; at most 50,000 env steps for every tool (more than
            RL-Zoo3's 20,000, fewer than Tianshou's tests' 100k-240k); an unsolved run says so.

Where the tests fall, exactly (env steps count every step taken in the train envs, random
warm-up included, until the solving test):
  rltrain       after each epoch of 1,000 (2,048) env steps; its off-policy random warm-up
                (trainer.random_warmup_env_steps, 1,000 in the tuned Pendulum configs) comes
                before the first epoch and is not tested, so tests fall at 2,000, 3,000, ...;
                the cap sets max_epochs = (50,000 - warm-up) // 1,000.
  sb3           at every multiple of 1,000 (2,048) env steps once the model has made a gradient
                step (SAC learns from step 101: tests from 1,000; TD3's learning_starts=10000:
                tests from 11,000).
  tianshou      after each epoch of 1,000 env steps (whole collection steps: 100 x 10 envs for
                SAC, 125 x 8 for TD3; CartPole PPO: 2,000), plus its trainer's own test before
                training; no warm-up for SAC/TD3.
  rltrain-zoo   as rltrain; for SAC the zoo's learning_starts=100 becomes a 100-step warm-up,
                so its tests fall at 1,100, 2,100, ...

Configurations per task:
  rltrain       rltrain's own tuned config (conf/tuned/<algo>_<env>.yaml)
  sb3           Stable-Baselines3 with the RL-Zoo3 hyperparameters (scripts/peers/sb3_run.py)
  tianshou      Tianshou with its own test hyperparameters (scripts/peers/tianshou_run.py)
  rltrain-zoo   rltrain with the RL-Zoo3 hyperparameters, for a like-for-like comparison

Needs the bench extra: pip install -e ".[bench]".

    .venv/bin/python scripts/bench_peers.py [--tasks ppo dqn sac td3] [--seeds 0 1 2] [--tools ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

# the script's own folder is on sys.path when it runs as a script
from peers.criterion import ENV_OF, TASKS, Criterion, criterion_for

HERE = Path(__file__).resolve().parent
RLTRAIN = Path(sys.executable).parent / "rltrain"
TUNED = HERE.parent / "conf" / "tuned"
#: rltrain's OffPolicyTrainerParams.random_warmup_env_steps, where a config does not set it
DEFAULT_WARMUP = 1000
#: rl-zoo3's hyperparameters in rltrain's terms (sources: scripts/peers/sb3_run.py).
#: CartPole, differences that remain: SB3 also anneals PPO's clip range; SB3's DQN syncs its
#: target every 10 env steps, which with train_freq=256 means once per 128-gradient-step
#: training phase, as here. Pendulum: SB3's SAC and TD3 defaults spelt out (one env, one
#: gradient step per env step, batch 256, tau 0.005, target entropy -|A| from alpha 1, one
#: learning rate for every optimiser); learning_starts becomes the random warm-up (SB3 also
#: acts uniformly at random before it).
ZOO = {
    "ppo": ["env.num_train_envs=8", "trainer.collection_step_num_env_steps=256",
            "trainer.batch_size=256", "trainer.update_step_num_repetitions=20",
            "algo.gamma=0.98", "algo.gae_lambda=0.8", "algo.lr=1e-3", "algo.lr_annealing=true",
            "algo.ent_coef=0.0", "algo.clip_ratio=0.2", "algo.max_grad_norm=0.5",
            "algo.vf_coef=0.5", "algo.hidden_sizes=[64,64]", "algo.activation=tanh",
            "trainer.max_epochs=49"],
    "dqn": ["env.num_train_envs=1", "trainer.collection_step_num_env_steps=256",
            "trainer.update_step_num_gradient_steps_per_sample=0.5", "trainer.batch_size=64",
            "buffer.size=100000", "trainer.random_warmup_env_steps=1000", "algo.gamma=0.99",
            "algo.lr=2.3e-3", "algo.hidden_sizes=[256,256]", "algo.n_step=1",
            "algo.double_q=false", "algo.target_update_interval=128", "algo.eps_start=1.0",
            "algo.eps_end=0.04", "algo.exploration_fraction=0.16", "algo.max_grad_norm=10",
            "trainer.max_epochs=24"],
    "sac": ["env.num_train_envs=1", "trainer.collection_step_num_env_steps=1",
            "trainer.update_step_num_gradient_steps_per_sample=1.0", "trainer.batch_size=256",
            "buffer.size=1000000", "trainer.random_warmup_env_steps=100",
            "algo.hidden_sizes=[256,256]", "algo.actor_lr=1e-3", "algo.critic_lr=1e-3",
            "algo.alpha_lr=1e-3", "algo.gamma=0.99", "algo.tau=0.005", "algo.n_step=1",
            "algo.autotune=true", "algo.init_alpha=1.0"],
    "td3": ["env.num_train_envs=1", "trainer.collection_step_num_env_steps=1",
            "trainer.update_step_num_gradient_steps_per_sample=1.0", "trainer.batch_size=256",
            "buffer.size=200000", "trainer.random_warmup_env_steps=10000",
            "algo.hidden_sizes=[400,300]", "algo.actor_lr=1e-3", "algo.critic_lr=1e-3",
            "algo.gamma=0.98", "algo.tau=0.005", "algo.n_step=1", "algo.exploration_noise=0.1",
            "algo.policy_delay=2", "algo.target_noise=0.2", "algo.target_noise_clip=0.5"],
}
TOOLS = ("rltrain", "sb3", "tianshou", "rltrain-zoo")
#: Tianshou's PPO collects 2,000 steps at a time and ends epochs only on whole collections:
#: 2,000-step epochs are the nearest it gets to a test every 2,048 env steps
PEER_ARGS = {("tianshou", "ppo"): ["--test-every", "2000"]}


def rltrain_warmup(algo: str, extra: list[str]) -> int:
    """The random warm-up an rltrain run takes before its first epoch: from the overrides, else
    the tuned config, else the trainer's default. Needed to fit the cap in whole epochs."""
    for override in reversed(extra):
        key, _, value = override.partition("=")
        if key == "trainer.random_warmup_env_steps":
            return int(value)
    tuned = TUNED / f"{algo}_{ENV_OF[algo]}.yaml"
    if tuned.exists():
        trainer = (yaml.safe_load(tuned.read_text()) or {}).get("trainer") or {}
        if "random_warmup_env_steps" in trainer:
            return int(trainer["random_warmup_env_steps"])
    return DEFAULT_WARMUP


def criterion_overrides(algo: str, crit: Criterion, extra: list[str]) -> list[str]:
    """Only the criterion: the test cadence, the test episodes and envs, the stop score, and
    (where the criterion caps env steps) max_epochs, the whole epochs after the warm-up."""
    over = [f"trainer.epoch_num_steps={crit.test_every}",
            f"trainer.test_step_num_episodes={crit.test_episodes}",
            f"env.num_test_envs={crit.num_test_envs}", f"trainer.stop_score={crit.threshold:g}"]
    if crit.max_env_steps is not None:
        epochs = (crit.max_env_steps - rltrain_warmup(algo, extra)) // crit.test_every
        over.append(f"trainer.max_epochs={epochs}")
    return over


def run_rltrain(algo: str, seed: int, extra: list[str]) -> dict:
    crit = criterion_for(algo)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        args = [str(RLTRAIN), f"algo={algo}", f"env={ENV_OF[algo]}", f"seed={seed}", *extra,
                *criterion_overrides(algo, crit, extra), f"hydra.run.dir={run_dir}"]
        t0 = time.perf_counter()
        res = subprocess.run(args, capture_output=True, text=True)
        total = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"rltrain failed: {res.stderr[-2000:]}")
        s = json.loads((run_dir / "summary.json").read_text())
    solved = s["best_score"] is not None and crit.solved(s["best_score"])
    return {"solved": solved, "env_steps": s["env_step"], "total_seconds": total,
            "setup_seconds": total - s["wall_time"], "test_seconds": s["timing"]["test"]}


def run_peer(tool: str, algo: str, seed: int) -> dict:
    script = HERE / "peers" / f"{tool}_run.py"
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(script), "--algo", algo, "--seed", str(seed),
                          *PEER_ARGS.get((tool, algo), [])], capture_output=True, text=True)
    total = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{tool} failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # start-up = everything but the training loop: interpreter, imports, set-up
    return {"solved": out["solved"], "env_steps": out["env_steps"], "total_seconds": total,
            "setup_seconds": total - out["train_seconds"], "test_seconds": out["test_seconds"]}


def run(tool: str, algo: str, seed: int) -> dict:
    if tool == "rltrain":
        return run_rltrain(algo, seed, [])
    if tool == "rltrain-zoo":
        return run_rltrain(algo, seed, ZOO[algo])
    return run_peer(tool, algo, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    args = parser.parse_args()
    print("tool          task seed solved  env steps   total s   set-up s   test s", flush=True)
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for algo in args.tasks:
        for tool in args.tools:
            rows = []
            for seed in args.seeds:
                r = run(tool, algo, seed)
                rows.append(r)
                print(f"{tool:<13} {algo:<4} {seed:>4} {r['solved']!s:<6} {r['env_steps']:>10,} "
                      f"{r['total_seconds']:>9.1f} {r['setup_seconds']:>10.1f} "
                      f"{r['test_seconds']:>8.1f}", flush=True)
            medians[tool, algo] = {k: statistics.median(r[k] for r in rows) for k in
                                   ("total_seconds", "setup_seconds", "test_seconds",
                                    "env_steps")}
            medians[tool, algo]["solved"] = sum(r["solved"] for r in rows)
    n = len(args.seeds)
    print("\nmedians over seeds", args.seeds)
    print("tool          task  solved  env steps   total s   set-up s   test s")
    for (tool, algo), m in medians.items():
        print(f"{tool:<13} {algo:<4} {int(m['solved'])}/{n:<5} "
              f"{m['env_steps']:>10,.0f} {m['total_seconds']:>9.1f} {m['setup_seconds']:>10.1f} "
              f"{m['test_seconds']:>8.1f}")
    print("\nratios of median wall seconds to solve (rltrain / peer; lower is better)")
    for algo in args.tasks:
        for ours, peer in (("rltrain", "sb3"), ("rltrain", "tianshou"), ("rltrain-zoo", "sb3")):
            if (ours, algo) in medians and (peer, algo) in medians:
                a, b = medians[ours, algo], medians[peer, algo]
                ratio = a["total_seconds"] / b["total_seconds"]
                # an unsolved run's seconds are those to its cap, not to a solution
                note = "" if a["solved"] == b["solved"] == n else (
                    f"  (solved {int(a['solved'])}/{n} vs {int(b['solved'])}/{n}: "
                    "unsolved runs count their time to the cap)")
                print(f"  {algo}: {ours} / {peer} = {ratio:.2f}{note}")


if __name__ == "__main__":
    main()
