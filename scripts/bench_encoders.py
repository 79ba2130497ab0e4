"""The image encoders' training step on the CPU: forward and backward of each convolutional
torso at a training batch, its input in NCHW memory (contiguous) against NHWC memory
(``channels_last``, what rltrain.nets.encoders.image.ImageInput gives the convolutions), on raw
uint8 observations scaled inside the network either way. Before ImageInput asked for NHWC,
a CHW observation (Atari's frame stack) reached the convolutions as NCHW; an HWC one (MinAtar,
MiniGrid, CarRacing) already as NHWC, its permuted view.

    .venv/bin/python scripts/bench_encoders.py [--batch 256] [--threads 1] [--rounds 3]
    .venv/bin/python scripts/bench_encoders.py --ppo-atari   # PPO Pong's update, 3 inputs

Rounds alternate the two layouts (the machine's load moves between them); milliseconds per
step, median of the rounds. ``--ppo-atari`` times PPO's whole update on Pong (the tuned
config, 1,024 env steps a round: 16 minibatch steps and the values) with ImageInput's forward
as it was (NCHW, a scale tensor), with NHWC memory alone, and as it is (NHWC in the same copy
as the conversion to float, the scale one number multiplied in place); needs the atari extra.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from rltrain.nets.encoders.image import ConvEncoder, ImageInput, impala_cnn, minatar_cnn, nature_cnn

CASES: dict[str, tuple[Callable[[gym.Space], ConvEncoder], tuple[int, ...]]] = {
    "nature (Atari, 4x84x84)": (nature_cnn, (4, 84, 84)),
    "impala (Procgen-sized, 64x64x3)": (impala_cnn, (64, 64, 3)),
    "minatar (10x10x6)": (minatar_cnn, (10, 10, 6)),
}


def step_ms(encoder: ConvEncoder, obs: torch.Tensor, nchw: bool, steps: int) -> float:
    def once() -> None:
        encoder.zero_grad(set_to_none=True)
        if nchw:  # the layout as it was: the scaled input made contiguous NCHW
            x = encoder.input(obs).contiguous()
            out = encoder.torso(x)
        else:
            out = encoder(obs)
        out.sum().backward()

    once()
    start = time.perf_counter()
    for _ in range(steps):
        once()
    return (time.perf_counter() - start) / steps * 1e3


def _nchw_tensor_scale(self: ImageInput, obs: torch.Tensor) -> torch.Tensor:
    x = obs.to(self.scale.dtype)  # before 2026-11-27
    return (x.permute(0, 3, 1, 2) if self.last else x) * self.scale


def _nhwc_tensor_scale(self: ImageInput, obs: torch.Tensor) -> torch.Tensor:
    if self.last:  # commit 8722513
        obs = obs.permute(0, 3, 1, 2)
    elif obs.dim() == 4:
        obs = obs.contiguous(memory_format=torch.channels_last)
    return obs.to(self.scale.dtype) * self.scale


def ppo_atari(rounds: int) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_throughput import build

    variants = {"NCHW, scale tensor (before)": _nchw_tensor_scale,
                "NHWC, scale tensor": _nhwc_tensor_scale,
                "NHWC in one copy, scale number (now)": ImageInput.forward}
    trainer = build(["algo=ppo", "env=atari", "env.id=ALE/Pong-v5",
                     "trainer.epoch_num_steps=1024", "trainer.max_epochs=100"]).trainer
    trainer.training_step()
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(rounds):
            for name, forward in variants.items():
                ImageInput.forward = forward  # type: ignore[method-assign]
                seconds[name].append(trainer.training_step()[3].update)
    finally:
        ImageInput.forward = variants["NHWC in one copy, scale number (now)"]  # type: ignore[method-assign]
    for name, times in seconds.items():
        print(f"{name:38s} PPO Pong update, 1,024 env steps: {statistics.median(times):.2f} s "
              f"(rounds: {', '.join(f'{t:.2f}' for t in times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--ppo-atari", action="store_true",
                        help="PPO's whole update on Pong under ImageInput's three forwards")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.ppo_atari:
        ppo_atari(args.rounds)
        return
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {args.batch}")
    for name, (make, shape) in CASES.items():
        space = gym.spaces.Box(0, 255, shape, np.uint8)
        torch.manual_seed(0)
        encoder = make(space)
        obs = torch.randint(0, 256, (args.batch, *shape), dtype=torch.uint8)
        with torch.no_grad():
            gap = (encoder(obs) - encoder.torso(encoder.input(obs).contiguous())).abs().max()
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for nchw in (True, False):
                times[nchw].append(step_ms(encoder, obs, nchw, args.steps))
        old, new = statistics.median(times[True]), statistics.median(times[False])
        print(f"{name:34s} NCHW {old:7.1f} ms  NHWC {new:7.1f} ms  ({old / new:.2f}x; "
              f"outputs differ by at most {float(gap):.1e})")


if __name__ == "__main__":
    main()
