"""Checkpoint cost of a DQN run with a full 100,000-transition replay buffer.

Builds the objects as `rltrain algo=dqn env=cartpole` does, fills the buffer with
real CartPole transitions, then times one checkpoint save and reports its size and
the process's peak memory growth while saving (read from /proc/self/status VmHWM,
reset before the save through /proc/self/clear_refs).

    .venv/bin/python scripts/bench_checkpoint.py [--size 100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _build import build
from rltrain.assembly.lifecycle import rng_state
from rltrain.rundir.checkpoint import load_checkpoint, save_checkpoint


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    args = parser.parse_args()
    built = build(["algo=dqn", "env=cartpole", f"buffer.size={args.size}"])
    algorithm, buffer, collector = built.algorithm, built.buffer, built.train_collector
    policy = built.trainer.random_policy
    capacity = buffer.num_lanes * buffer.lane_capacity
    while len(buffer) < capacity:  # reset steps store nothing, so collect until full
        collector.collect(policy, n_steps=capacity)
    print(f"buffer: {len(buffer):,} transitions, about {buffer.resident_bytes() / 1e6:.1f} MB "
          "held (each observation once)")
    state = {"config": {}, "algorithm": algorithm.training_state(),
             "trainer": {"storage": {"buffer": buffer.state_dict(),
                                     "sampler": built.trainer.reader.state_dict()}},
             "collectors": {"train": collector.state_dict()}, "rng": rng_state()}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to now
        rss_before = vm_kib("VmRSS")
        t0 = time.perf_counter()
        last = save_checkpoint(directory, state, "ckpt_0.pt", keep=3)
        seconds = time.perf_counter() - t0
        peak_growth = vm_kib("VmHWM") - rss_before
        size = last.stat().st_size
        t0 = time.perf_counter()
        load_checkpoint(last)
        load_seconds = time.perf_counter() - t0
    print(f"checkpoint: {size / 1e6:.2f} MB, save {seconds * 1e3:.0f} ms (fsync included), "
          f"load {load_seconds * 1e3:.0f} ms, peak memory growth while saving "
          f"{peak_growth / 1024:.1f} MiB (RSS before {rss_before / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
