"""Memory of a SAC Humanoid-v5 replay buffer: rltrain against Stable-Baselines3.

    .venv/bin/python scripts/bench_memory.py [--size 1000000] [--fill 200000] [--cli]

For a buffer of ``--size`` transitions with Humanoid-v5's spaces (obs (348,) float32,
act (17,) float32, one env as SAC runs it), prints per buffer:

- nominal bytes per transition: what the full buffer's arrays hold, divided by its size;
- allocation seconds and the resident memory (VmRSS) the buffer adds when it is built:
  storage allocated with ``np.zeros`` is mapped page by page as it is written, so a large
  buffer should cost almost nothing until it fills;
- resident bytes per transition after writing ``--fill`` transitions of episodes that end
  about once in 1000 steps (Humanoid's time limit; a trained policy) and of short ones
  (about once in 25 steps, a random policy falling), from VmRSS; for rltrain also its own
  estimate (``ReplayBuffer.resident_bytes``).

The buffers: rltrain's ``ReplayBuffer`` (each observation stored once; the next
observation of an episode's last step is kept aside), and SB3's
``stable_baselines3.common.buffers.ReplayBuffer`` with ``optimize_memory_usage=False``
(next observations stored twice) and ``True`` (stored once, like DQN Zoo's and Dopamine's
frame storage, but the final observation of an episode is overwritten by the next reset
one; SB3 requires ``handle_timeout_termination=False`` for it). SB3 is in the ``bench``
extra (``.venv/bin/pip install -e ".[bench]"``); without it its rows are skipped with the
reason. Each measurement runs in a fresh subprocess, so one buffer's pages do not count
against another's. Linux only (VmRSS is read from /proc/self/status).

``--cli`` (needs the mujoco extra) also measures whole runs of the real ``rltrain``, so that
another checkout can be measured the same way (``PYTHONPATH=OTHER/src``):

- SAC on Humanoid-v5 with a 1M buffer, one epoch of 300 env steps after 300 random ones and
  no checkpointed buffer: ``startup_time`` from ``summary.json`` (seconds from the command's
  start to the first env step: imports, envs, networks, the buffer) and the process's peak
  resident memory;
- SAC on Hopper-v5 (its tuned config) for 9,184 env steps (4,500 random, 2 epochs of 2,342):
  the size of ``checkpoints/last.pt``, which holds the replay buffer.
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

import numpy as np

OBS_SHAPE, ACT_SHAPE = (348,), (17,)
BLOCK = 64  # steps per write, as the collector writes them
KINDS = ("rltrain", "sb3", "sb3-optimized")
LABELS = {"rltrain": "rltrain ReplayBuffer", "sb3": "SB3 ReplayBuffer",
          "sb3-optimized": "SB3 optimize_memory_usage=True"}


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def episodes(rng: np.random.Generator, steps: int, episode_length: int):
    """Blocks of (obs, act, rew, next_obs, terminated, truncated) of one env: episodes end
    with probability 1 / episode_length per step, half by termination and half by
    truncation; a new episode starts from a fresh observation."""
    cur = rng.normal(size=OBS_SHAPE).astype(np.float32)
    for start in range(0, steps, BLOCK):
        t_max = min(BLOCK, steps - start)
        obs = np.empty((t_max, 1, *OBS_SHAPE), np.float32)
        nxt = rng.normal(size=(t_max, 1, *OBS_SHAPE)).astype(np.float32)
        ends = rng.random(t_max) < 1 / episode_length
        term = ends & (rng.random(t_max) < 0.5)
        for t in range(t_max):
            obs[t, 0] = cur
            cur = rng.normal(size=OBS_SHAPE).astype(np.float32) if ends[t] else nxt[t, 0]
        act = rng.uniform(-1, 1, size=(t_max, 1, *ACT_SHAPE)).astype(np.float32)
        rew = rng.normal(size=(t_max, 1)).astype(np.float32)
        yield obs, act, rew, nxt, term[:, None], (ends & ~term)[:, None]


def child(kind: str, size: int, fill: int, episode_length: int) -> dict:
    """Build one buffer, fill it, and report what it cost (run in a fresh process)."""
    if kind == "rltrain":
        from rltrain.data.buffers import ReplayBuffer

        nominal = ReplayBuffer.bytes_per_transition(OBS_SHAPE, np.float32, ACT_SHAPE,
                                                    np.float32)
        before = rss()
        start = time.perf_counter()
        buffer = ReplayBuffer(1, size, OBS_SHAPE, ACT_SHAPE, np.float32)
        seconds = time.perf_counter() - start
        built = rss()
        for block in episodes(np.random.default_rng(0), fill, episode_length):
            buffer.extend(*block)
        estimate = buffer.resident_bytes() / fill
    else:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

        obs_space = gym.spaces.Box(-np.inf, np.inf, OBS_SHAPE, np.float32)
        act_space = gym.spaces.Box(-1.0, 1.0, ACT_SHAPE, np.float32)
        optimized = kind == "sb3-optimized"
        before = rss()
        start = time.perf_counter()
        buffer = SB3ReplayBuffer(size, obs_space, act_space, device="cpu",
                                 optimize_memory_usage=optimized,
                                 handle_timeout_termination=not optimized)
        seconds = time.perf_counter() - start
        built = rss()
        arrays = [buffer.observations, buffer.actions, buffer.rewards, buffer.dones,
                  buffer.timeouts] + ([] if optimized else [buffer.next_observations])
        nominal = sum(a.nbytes for a in arrays) / size
        for obs, act, rew, nxt, term, trunc in episodes(np.random.default_rng(0), fill,
                                                       episode_length):
            for t in range(len(rew)):
                buffer.add(obs[t], nxt[t], act[t], rew[t], term[t] | trunc[t],
                           [{"TimeLimit.truncated": bool(trunc[t, 0])}])
        estimate = None
    filled = rss()
    return {"nominal": nominal, "seconds": seconds, "rss_built": built - before,
            "resident": (filled - built) / fill, "estimate": estimate}


def measure(kind: str, args: argparse.Namespace, episode_length: int) -> dict | str:
    """One child process's report, or why there is none."""
    cmd = [sys.executable, __file__, "--child", kind, "--size", str(args.size), "--fill",
           str(args.fill), "--episode-length", str(episode_length)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        return lines[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def sb3_missing() -> str | None:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return 'stable-baselines3 is not installed (.venv/bin/pip install -e ".[bench]")'
    return None


RLTRAIN = Path(sys.executable).parent / "rltrain"
#: the whole-run measurements: name -> overrides
CLI_RUNS = {
    "humanoid": ["algo=sac", "env=humanoid", "buffer.size=1000000", "trainer.max_epochs=1",
                 "trainer.epoch_num_steps=300", "trainer.random_warmup_env_steps=300",
                 "trainer.checkpoint_buffer=false"],
    "hopper": ["algo=sac", "env=hopper", "trainer.max_epochs=2", "trainer.epoch_num_steps=2342",
               "trainer.random_warmup_env_steps=4500"],
}


def cli_run(name: str, root: Path) -> dict:
    """Run ``rltrain`` with CLI_RUNS[name] in a child; its start-up, peak RSS (the child's own,
    from wait4), checkpoint."""
    run_dir = root / name
    with open(root / f"{name}.err", "w+") as err:
        child = subprocess.Popen([str(RLTRAIN), *CLI_RUNS[name], f"hydra.run.dir={run_dir}",
                                  "logger.tensorboard=false", "-q"], stdout=subprocess.DEVNULL,
                                 stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"rltrain {name} failed: {err.read().strip()[-500:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    last = run_dir / "checkpoints" / "last.pt"
    return {"startup": summary["startup_time"], "env_step": summary["env_step"],
            "peak_rss": usage.ru_maxrss * 1024,  # KiB on Linux
            "checkpoint": last.stat().st_size if last.exists() else None}


def cli_section() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        humanoid, hopper = cli_run("humanoid", Path(tmp)), cli_run("hopper", Path(tmp))
    print(f"\nrltrain algo=sac env=humanoid buffer.size=1000000: start-up "
          f"{humanoid['startup']:.2f} s (to the first env step), peak RSS "
          f"{humanoid['peak_rss'] / 1e6:,.0f} MB over the whole run")
    print(f"rltrain algo=sac env=hopper, {hopper['env_step']:,} env steps: checkpoints/last.pt "
          f"{hopper['checkpoint'] / 1e6:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="buffer transitions")
    # enough that the fixed costs (partly written 2 MB huge pages, the writer's temporaries)
    # weigh little per transition
    parser.add_argument("--fill", type=int, default=200_000, help="transitions written")
    parser.add_argument("--cli", action="store_true",
                        help="also time and measure whole rltrain runs (mujoco extra)")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--episode-length", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.size, args.fill, args.episode_length)))
        return
    print(f"SAC Humanoid-v5 replay buffer: {args.size:,} transitions, obs {OBS_SHAPE} "
          f"float32, act {ACT_SHAPE} float32, 1 env; resident after writing "
          f"{args.fill:,} transitions (MB = 1e6 bytes)")
    head = (f"{'buffer':32} {'nominal B/tr':>12} {'alloc s':>8} {'RSS built':>10} "
            f"{'long eps B/tr':>14} {'short eps B/tr':>15} {'own estimate':>13}")
    print(head)
    print("-" * len(head))
    missing = sb3_missing()
    for kind in KINDS:
        if kind != "rltrain" and missing:
            print(f"{LABELS[kind]:32} skipped: {missing}")
            continue
        long, short = measure(kind, args, 1000), measure(kind, args, 25)
        if isinstance(long, str) or isinstance(short, str):
            print(f"{LABELS[kind]:32} failed: {long if isinstance(long, str) else short}")
            continue
        estimate = ("" if long["estimate"] is None else
                    f"{long['estimate']:.0f} / {short['estimate']:.0f}")
        print(f"{LABELS[kind]:32} {long['nominal']:12,.0f} {long['seconds']:8.3f} "
              f"{long['rss_built'] / 1e6:8.1f}MB {long['resident']:14,.0f} "
              f"{short['resident']:15,.0f} {estimate:>13}")
    print("long eps: about 1 episode end in 1000 steps; short eps: 1 in 25. B/tr: bytes per "
          "transition; own estimate: rltrain's resident_bytes() (long / short)")
    if args.cli:
        cli_section()


if __name__ == "__main__":
    main()
