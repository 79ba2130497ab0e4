"""rltrain against Stable-Baselines3 and Tianshou on CartPole-v1: wall seconds to solve.

Every tool runs in its own fresh process (start-up counted), one after another, one torch
thread each, on the same seeds, with the same solve criterion and test cadence: every
2,048 env steps, 10 deterministic test episodes; solved at a mean return >= 475.

Configurations per task (PPO, DQN):
  rltrain       rltrain's own tuned config (conf/tuned/<algo>_cartpole.yaml)
  sb3           Stable-Baselines3 with the RL-Zoo3 hyperparameters (scripts/peers/sb3_run.py)
  tianshou      Tianshou with its own test hyperparameters (scripts/peers/tianshou_run.py)
  rltrain-zoo   rltrain with the RL-Zoo3 hyperparameters, for a like-for-like comparison

Needs the bench extra: pip install -e ".[bench]".

    .venv/bin/python scripts/bench_peers.py [--tasks ppo dqn] [--seeds 0 1 2] [--tools ...]
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

HERE = Path(__file__).resolve().parent
RLTRAIN = Path(sys.executable).parent / "rltrain"
CRITERION = ["trainer.epoch_num_steps=2048", "trainer.test_step_num_episodes=10",
             "env.num_test_envs=10", "trainer.stop_score=475"]
#: rl-zoo3 2.9.2's CartPole-v1 hyperparameters in rltrain's terms. Differences that remain:
#: SB3 also anneals PPO's clip range; SB3's DQN syncs its target every 10 env steps, which
#: with train_freq=256 means once per 128-gradient-step training phase, as here.
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
}
TOOLS = ("rltrain", "sb3", "tianshou", "rltrain-zoo")
#: Tianshou's PPO collects 2,000 steps at a time and ends epochs only on whole collections:
#: 2,000-step epochs are the nearest it gets to a test every 2,048 env steps
PEER_ARGS = {("tianshou", "ppo"): ["--epoch-num-steps", "2000"]}


def run_rltrain(algo: str, seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        args = [str(RLTRAIN), f"algo={algo}", "env=cartpole", f"seed={seed}", *extra,
                *CRITERION, f"hydra.run.dir={run_dir}"]
        t0 = time.perf_counter()
        res = subprocess.run(args, capture_output=True, text=True)
        total = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"rltrain failed: {res.stderr[-2000:]}")
        s = json.loads((run_dir / "summary.json").read_text())
    return {"solved": s["solved"], "env_steps": s["env_step"], "total_seconds": total,
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
    parser.add_argument("--tasks", nargs="+", default=["ppo", "dqn"], choices=["ppo", "dqn"])
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
    print("\nmedians over seeds", args.seeds)
    print("tool          task  solved  env steps   total s   set-up s   test s")
    for (tool, algo), m in medians.items():
        print(f"{tool:<13} {algo:<4} {int(m['solved'])}/{len(args.seeds):<5} "
              f"{m['env_steps']:>10,.0f} {m['total_seconds']:>9.1f} {m['setup_seconds']:>10.1f} "
              f"{m['test_seconds']:>8.1f}")
    print("\nratios of median wall seconds to solve (rltrain / peer; lower is better)")
    for algo in args.tasks:
        for ours, peer in (("rltrain", "sb3"), ("rltrain", "tianshou"), ("rltrain-zoo", "sb3")):
            if (ours, algo) in medians and (peer, algo) in medians:
                ratio = medians[ours, algo]["total_seconds"] / medians[peer, algo]["total_seconds"]
                print(f"  {algo}: {ours} / {peer} = {ratio:.2f}")


if __name__ == "__main__":
    main()
