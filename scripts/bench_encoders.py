"""The image encoders' training step on the CPU: forward and backward of each convolutional
torso at a training batch, its input in NCHW memory (contiguous) against NHWC memory
(``channels_last``, what rltrain.encoders.image.ImageInput gives the convolutions), on raw
uint8 observations scaled inside the network either way. Before ImageInput asked for NHWC,
a CHW observation (Atari's frame stack) reached the convolutions as NCHW; an HWC one (MinAtar,
MiniGrid, CarRacing) already as NHWC, its permuted view.

    .venv/bin/python scripts/bench_encoders.py [--batch 256] [--threads 1] [--rounds 3]

Rounds alternate the two layouts (the machine's load moves between them); milliseconds per
step, median of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from rltrain.encoders.image import ConvEncoder, impala_cnn, minatar_cnn, nature_cnn

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
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
