"""Memory of replay buffers, rltrain against Stable-Baselines3: SAC Humanoid-v5, DQN Atari.

    .venv/bin/python scripts/bench_memory.py [--size 1000000] [--fill 200000] [--cli]
    .venv/bin/python scripts/bench_memory.py --atari [--size 1000000] [--part 100000]
        [--memory-limit 10]

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

``--atari``: DQN on Atari instead, with the settings of CleanRL's ``dqn_atari.py`` and SB3's
DQN (one env, a buffer of ``--size`` transitions, obs (4, 84, 84) uint8 as
``FrameStackObservation`` stacks them, a Discrete action that rltrain stores as int64). The
buffers: rltrain's ``ReplayBuffer`` with ``frame_stack=4`` (one frame per transition, the
stack rebuilt by index; what ``env=atari`` gets) and ``frame_stack=1`` (whole stacks), SB3's
with ``optimize_memory_usage`` False (SB3's default) and True (CleanRL's). One lane each, as
the peers run it: ``rltrain algo=dqn env=atari`` (``tuned/dqn_atari.yaml``) plays 4 envs
into 4 lanes of a quarter of the size each, which adds per lane k - 1 frames, a pending stack
and its asides (kilobytes). The data: a synthetic episode stream of (84, 84) frames that
change 16 pixels a step, episodes of 1,000 to 3,000 steps (each starting from a fresh
frame, padded as ``FrameStackObservation(padding_type="reset")`` pads it, so rltrain's frame
storage verifies and accepts every write), written in blocks of 64 steps (rltrain, as its
collector writes) or one step at a time (SB3's ``add``). A buffer whose nominal size at
``--size`` fits under ``--memory-limit`` GB (and under the memory available) is built at
``--size`` and filled whole; any other (at 1M: all but rltrain's frame_stack=4) is built and
filled at ``--part`` transitions, and its resident bytes per transition, measured there, are
extrapolated to ``--size`` and labelled so.
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
# --atari: DQN on Atari (obs as FrameStackObservation stacks AtariPreprocessing's frames)
FRAME, STACK, NUM_ACTIONS = (84, 84), 4, 6  # Pong's minimal action set
ATARI_OBS = (STACK, *FRAME)
PIXELS_PER_STEP = 16  # how many pixels of the frame change from one step to the next
ATARI_KINDS = ("rltrain-fs4", "rltrain-fs1", "sb3", "sb3-optimized")
ATARI_LABELS = {"rltrain-fs4": "rltrain frame_stack=4", "rltrain-fs1": "rltrain frame_stack=1",
                "sb3": "SB3 ReplayBuffer", "sb3-optimized": "SB3 optimize_memory_usage=True"}


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
        from rltrain.data.storage import ReplayBuffer

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


def atari_episodes(rng: np.random.Generator, steps: int):
    """Blocks of (obs, act, rew, next_obs, terminated, truncated) of one Atari-like env: a
    frame that changes PIXELS_PER_STEP pixels a step, stacked as FrameStackObservation stacks
    (oldest first; at a reset, the first frame repeated: padding_type="reset"); episodes of
    1,000 to 3,000 steps, each ended by termination (a game over, or a lost life under
    EpisodicLife) and followed by a fresh reset frame."""
    frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
    stack = np.broadcast_to(frame, ATARI_OBS).copy()
    left = int(rng.integers(1000, 3001))
    for start in range(0, steps, BLOCK):
        t_max = min(BLOCK, steps - start)
        obs = np.empty((t_max, 1, *ATARI_OBS), np.uint8)
        nxt = np.empty_like(obs)
        term = np.zeros((t_max, 1), bool)
        where = rng.integers(0, frame.size, (t_max, PIXELS_PER_STEP))
        values = rng.integers(0, 256, (t_max, PIXELS_PER_STEP), dtype=np.uint8)
        for t in range(t_max):
            obs[t, 0] = stack
            frame.flat[where[t]] = values[t]  # (stack may be a view of frame: read obs)
            nxt[t, 0, :-1] = obs[t, 0, 1:]
            nxt[t, 0, -1] = frame
            left -= 1
            if left == 0:
                term[t, 0] = True
                left = int(rng.integers(1000, 3001))
                frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
                stack = np.broadcast_to(frame, ATARI_OBS)
            else:
                stack = nxt[t, 0]
        act = rng.integers(0, NUM_ACTIONS, (t_max, 1))  # int64, as rltrain stores Discrete
        rew = rng.choice(np.array([-1, 0, 1], np.float32), (t_max, 1), p=[0.01, 0.98, 0.01])
        yield obs, act, rew, nxt, term, np.zeros_like(term)


def atari_buffer(kind: str, capacity: int):
    """One lane of ``capacity`` transitions of (4, 84, 84) uint8 stacks and Discrete actions."""
    if kind.startswith("rltrain"):
        from rltrain.data.storage import ReplayBuffer

        return ReplayBuffer(1, capacity, ATARI_OBS, (), np.int64, obs_dtype=np.uint8,
                            frame_stack=STACK if kind == "rltrain-fs4" else 1)
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    optimized = kind == "sb3-optimized"
    return SB3ReplayBuffer(capacity, gym.spaces.Box(0, 255, ATARI_OBS, np.uint8),
                           gym.spaces.Discrete(NUM_ACTIONS), device="cpu",
                           optimize_memory_usage=optimized,
                           handle_timeout_termination=not optimized)


def atari_nominal(kind: str, buffer) -> float:  # rltrain's or SB3's buffer
    """The bytes per transition the buffer's arrays hold when full."""
    if kind.startswith("rltrain"):
        return buffer.bytes_per_transition(ATARI_OBS, np.uint8, (), np.int64,
                                           frame_stack=buffer.frame_stack)
    arrays = [buffer.observations, buffer.actions, buffer.rewards, buffer.dones,
              buffer.timeouts] + ([] if buffer.optimize_memory_usage
                                  else [buffer.next_observations])
    return sum(a.nbytes for a in arrays) / buffer.buffer_size


def atari_child(kind: str, size: int, part: int, limit: float) -> dict:
    """Build one Atari buffer, at ``size`` if its nominal bytes fit under ``limit`` and the
    memory available, else at ``part``; fill it whole; report (run in a fresh process)."""
    from rltrain.process.system import available_memory

    nominal = atari_nominal(kind, atari_buffer(kind, 1))
    room = min(limit, 0.8 * (available_memory() or limit))
    capacity = size if nominal * size <= room else part
    stream = atari_episodes(np.random.default_rng(0), capacity)
    before = rss()
    buffer = atari_buffer(kind, capacity)
    built = rss()
    if kind.startswith("rltrain"):
        for block in stream:
            buffer.extend(*block)
        estimate = buffer.resident_bytes() / capacity
    else:
        for obs, act, rew, nxt, term, trunc in stream:
            for t in range(len(rew)):
                buffer.add(obs[t], nxt[t], act[t], rew[t], term[t] | trunc[t],
                           [{"TimeLimit.truncated": bool(trunc[t, 0])}])
        estimate = None
    filled = rss()
    return {"nominal": nominal, "filled": capacity, "rss_built": built - before,
            "resident": (filled - built) / capacity, "estimate": estimate}


def measure(kind: str, args: argparse.Namespace, episode_length: int) -> dict | str:
    """One child process's report, or why there is none."""
    return child_report([sys.executable, __file__, "--child", kind, "--size", str(args.size),
                         "--fill", str(args.fill), "--episode-length", str(episode_length)])


def child_report(cmd: list[str]) -> dict | str:
    """The last stdout line of ``cmd`` as JSON, or the last line it said about failing."""
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


def atari_section(args: argparse.Namespace) -> None:
    print(f"DQN Atari replay buffer: {args.size:,} transitions, obs {ATARI_OBS} uint8, "
          f"Discrete({NUM_ACTIONS}) actions (int64 in rltrain, as SB3 casts them), 1 env in 1 "
          f"lane (CleanRL's and SB3's DQN; rltrain's tuned run uses 4 lanes); a buffer over "
          f"{args.memory_limit:g} GB at {args.size:,} is filled to {args.part:,} and "
          f"extrapolated (MB, GB = 1e6, 1e9 bytes)")
    head = (f"{'buffer':32} {'nominal B/tr':>12} {'nominal GB':>10} {'filled':>9} "
            f"{'RSS built':>10} {'resident B/tr':>13} {'own estimate':>12} "
            f"{'resident GB at ' + format(args.size, ','):>28}")
    print(head)
    print("-" * len(head))
    missing = sb3_missing()
    for kind in ATARI_KINDS:
        if kind.startswith("sb3") and missing:
            print(f"{ATARI_LABELS[kind]:32} skipped: {missing}")
            continue
        r = child_report([sys.executable, __file__, "--atari", "--child", kind, "--size",
                          str(args.size), "--part", str(args.part), "--memory-limit",
                          str(args.memory_limit)])
        if isinstance(r, str):
            print(f"{ATARI_LABELS[kind]:32} failed: {r}")
            continue
        whole = r["filled"] == args.size
        at_size = (f"{r['resident'] * args.size / 1e9:.2f} "
                   f"{'measured' if whole else 'extrapolated'}")
        estimate = "" if r["estimate"] is None else f"{r['estimate']:,.0f}"
        print(f"{ATARI_LABELS[kind]:32} {r['nominal']:12,.0f} "
              f"{r['nominal'] * args.size / 1e9:10.2f} {r['filled']:9,} "
              f"{r['rss_built'] / 1e6:8.1f}MB {r['resident']:13,.0f} {estimate:>12} "
              f"{at_size:>28}")
    print("B/tr: bytes per transition; nominal GB: the full buffer's arrays; filled: "
          "transitions written (= the buffer's size); resident: VmRSS added by filling it; "
          "own estimate: rltrain's resident_bytes()")


def sac_section(args: argparse.Namespace) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="buffer transitions")
    # enough that the fixed costs (partly written 2 MB huge pages, the writer's temporaries)
    # weigh little per transition
    parser.add_argument("--fill", type=int, default=200_000, help="transitions written")
    parser.add_argument("--cli", action="store_true",
                        help="also time and measure whole rltrain runs (mujoco extra)")
    parser.add_argument("--atari", action="store_true",
                        help="DQN on Atari ((4, 84, 84) uint8 frame stacks) instead of SAC")
    parser.add_argument("--part", type=int, default=100_000,
                        help="--atari: the size a buffer too large for --memory-limit is "
                             "built and filled at")
    parser.add_argument("--memory-limit", type=float, default=10.0,
                        help="--atari: GB one buffer may fill (each in its own process)")
    parser.add_argument("--child", choices=sorted({*KINDS, *ATARI_KINDS}),
                        help=argparse.SUPPRESS)
    parser.add_argument("--episode-length", type=int, default=1000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.atari:
        print(json.dumps(atari_child(args.child, args.size, args.part,
                                     args.memory_limit * 1e9)))
    elif args.child:
        print(json.dumps(child(args.child, args.size, args.fill, args.episode_length)))
    elif args.atari:
        atari_section(args)
    else:
        sac_section(args)
        if args.cli:
            cli_section()


if __name__ == "__main__":
    main()
