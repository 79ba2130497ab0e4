"""PPO on Atari: env steps per second of rltrain against Stable-Baselines3, same settings.

    .venv/bin/python scripts/bench_atari_ppo.py [--game Pong] [--steps 8192] [--device cpu]

Both train PPO with CleanRL's ppo_atari settings (8 envs x 128 steps, 4 passes in minibatches
of 256, the Nature CNN shared by actor and critic; rltrain's conf/tuned/ppo_atari.yaml, SB3's
CnnPolicy) on ``ALE/<game>-v5`` with the same protocol: sticky actions 0.25, frame skip 4 with
max-pooling, 84x84 grey, 4 frames stacked, no-op starts, FIRE on reset, a lost life ends the
training episode, rewards clipped (rltrain: env/atari.yaml; SB3: its AtariWrapper over the
same v5 env made with frameskip=1, then VecFrameStack(4)), gymnasium's sync vector envs, one
torch thread each, one after the other in fresh processes. The figure is training throughput:
env steps over the seconds spent collecting and updating (rltrain's summary.json timing;
SB3's ``learn()`` wall time, which has no test step), and the ratio rltrain / SB3.

SB3's learning rate is annealed over the tuned config's 10.24M steps (1,000 epochs of 10,240),
as ``rltrain algo=ppo env=atari`` anneals it, so that a short run sees the same rates.
``--curve OUT.jsonl`` trains SB3 alone for ``--steps`` env steps, and every 10,240 env steps
the greedy policy plays 4 full games (no life-loss ends, the game's own score, FIRE
pressed after a lost life as rltrain's test envs do). One JSON line per test: env steps, mean
test return, seconds. This is the SB3 curve that docs/images.md sets beside rltrain's.

Needs the atari and bench extras: pip install -e ".[atari,bench]".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RLTRAIN = Path(sys.executable).parent / "rltrain"

#: SB3's PPO with the tuned config's settings: argv game, steps, device and the curve's file
#: ("-": none, the throughput run). The last line printed is {"steps", "seconds"}: learn()'s
#: wall time, its tests included (a curve's rows give their seconds apart).
SB3 = """
import sys, time, json
import gymnasium as gym, ale_py, torch
from stable_baselines3 import PPO
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecFrameStack
from rltrain.envs.wrappers import FireReset
gym.register_envs(ale_py)
game, steps, device, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
EPOCH, SCHEDULE = 10240, 10240 * 1000
torch.set_num_threads(1)
kwargs = dict(frameskip=1, repeat_action_probability=0.25)
env = VecFrameStack(make_vec_env(f"ALE/{game}-v5", n_envs=8, seed=0, wrapper_class=AtariWrapper,
                                 env_kwargs=kwargs), 4)
def lr(remaining):  # SB3 passes the fraction of learn()'s steps left
    return 2.5e-4 * (1 - (1 - remaining) * steps / SCHEDULE)
model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4, learning_rate=lr,
            clip_range=0.1, clip_range_vf=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
            gamma=0.99, gae_lambda=0.95, device=device, seed=0, verbose=0)
def full_game(e):
    return FireReset(AtariWrapper(e, terminal_on_life_loss=False, clip_reward=False))
start = time.perf_counter()
tested = [0.0]
def test(k):
    t0 = time.perf_counter()
    tenv = VecFrameStack(make_vec_env(f"ALE/{game}-v5", n_envs=4, seed=10_000 + k,
                                      wrapper_class=full_game, env_kwargs=kwargs), 4)
    mean, std = evaluate_policy(model, tenv, n_eval_episodes=4, deterministic=True)
    tenv.close()
    tested[0] += time.perf_counter() - t0
    row = {"env_step": model.num_timesteps, "test_return": float(mean), "test_std": float(std),
           "seconds": time.perf_counter() - start, "test_seconds": tested[0]}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\\n")
    print(json.dumps(row), flush=True)
class Tests(BaseCallback):
    def _on_rollout_start(self):
        if self.num_timesteps and self.num_timesteps % EPOCH == 0:
            test(self.num_timesteps // EPOCH)
    def _on_step(self):
        return True
model.learn(total_timesteps=steps, callback=None if out == "-" else Tests())
seconds = time.perf_counter() - start
if out != "-":
    test(-1)
print(json.dumps({"steps": model.num_timesteps, "seconds": seconds}))
"""

def rltrain(game: str, steps: int, device: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [str(RLTRAIN), "algo=ppo", "env=atari", f"env.id=ALE/{game}-v5", f"device={device}",
               "trainer.max_epochs=1", f"trainer.epoch_num_steps={steps}",
               "trainer.test_step_num_episodes=1", "env.num_test_envs=1",
               "logger.progress_bar=false", "logger.tensorboard=false", f"hydra.run.dir={run}"]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if res.returncode != 0:
            raise SystemExit(f"rltrain failed: {res.stderr[-2000:]}")
        summary = json.loads((run / "summary.json").read_text())
        timing = summary["timing"]
        return {"steps": summary["env_step"],
                "seconds": timing["collect"] + timing["update"]}


def sb3(game: str, steps: int, device: str) -> dict[str, float]:
    res = subprocess.run([sys.executable, "-c", SB3, game, str(steps), device, "-"],
                         capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:
        raise SystemExit(f"SB3 failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(run_dir: Path, curve: Path) -> None:
    ours = {r["env_step"]: r for r in map(json.loads, (run_dir / "epochs.jsonl").open())}
    theirs = {r["env_step"]: r for r in map(json.loads, curve.open())}
    print("| env steps | rltrain | SB3 |\n| --- | --- | --- |")
    steps = sorted(set(ours) & set(theirs))
    for step in steps:
        print(f"| {step:,} | {ours[step]['test']['return_mean']:.1f} "
              f"| {theirs[step]['test_return']:.1f} |")
    a = [ours[s]["test"]["return_mean"] for s in steps]
    b = [theirs[s]["test_return"] for s in steps]
    print(f"| best | {max(a):.1f} | {max(b):.1f} |")
    print(f"| mean of the last ten | {sum(a[-10:]) / len(a[-10:]):.1f} "
          f"| {sum(b[-10:]) / len(b[-10:]):.1f} |")
    seconds = sum(r["timing"]["collect"] + r["timing"]["update"] for r in ours.values())
    print(f"{len(steps)} tests in common, the last at {steps[-1]:,} env steps")
    print(f"rltrain training throughput: {max(ours) / seconds:.1f} env steps/s "
          "(its epochs' collection and update time)")
    end = theirs[max(theirs)]
    print(f"SB3 training throughput: {max(theirs) / (end['seconds'] - end['test_seconds']):.1f} "
          "env steps/s (learn()'s wall time less its tests)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Pong")
    p.add_argument("--steps", type=int, default=8192)
    p.add_argument("--device", default="cpu")
    p.add_argument("--curve", metavar="OUT.jsonl", help="train SB3 alone and write its test curve")
    p.add_argument("--table", nargs=2, metavar=("RUN_DIR", "OUT.jsonl"), type=Path,
                   help="print rltrain's run and SB3's curve side by side")
    args = p.parse_args()
    if args.table:
        table(*args.table)
        return
    if args.curve:
        Path(args.curve).unlink(missing_ok=True)
        subprocess.run([sys.executable, "-c", SB3, args.game, str(args.steps), args.device,
                        args.curve], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return
    rows = {}
    for name, fn in (("rltrain", rltrain), ("sb3", sb3)):
        t0 = time.perf_counter()
        r = fn(args.game, args.steps, args.device)
        rows[name] = r
        print(f"{name:8s} {r['steps']:>8,} env steps in {r['seconds']:7.1f} s training "
              f"= {r['steps'] / r['seconds']:7.1f} steps/s  ({time.perf_counter() - t0:.0f} s "
              "with start-up and tests)", flush=True)
    ratio = (rows["rltrain"]["steps"] / rows["rltrain"]["seconds"]) / (
        rows["sb3"]["steps"] / rows["sb3"]["seconds"])
    print(f"rltrain / SB3 throughput: {ratio:.2f}x on ALE/{args.game}-v5, {args.device}")


if __name__ == "__main__":
    main()
