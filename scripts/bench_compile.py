"""Does ``torch.compile`` pay for PPO's minibatch step on this CPU? (issue 23: "torch.compile on
CPU where it helps; measure compile time against the gain for short runs").

Three ways to run the same step (RL-Zoo3 CartPole settings: separate 64x64 tanh actor and
critic, batch 64 or 256, one thread): autograd eagerly; the loss and forward pass compiled
by ``torch.compile`` (inductor; its backward compiled too, by AOTAutograd), clipping and
rltrain's flat Adam as before; and rltrain's default, the gradient written out by hand. For
each: the first call's seconds (the compile), steady minibatch steps per second, and how many
steps the compile costs at the compiled rate. The compiled step's parameters after 20 steps
are checked against the eager ones.

    .venv/bin/python scripts/bench_compile.py [--batch 64 256] [--steps 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _build import build
from bench_throughput import ZOO_PPO
from rltrain.algorithms.base import clip_and_step


def make(batch_size: int):
    b = build([*ZOO_PPO, f"trainer.batch_size={batch_size}"])
    ppo = b.algorithm
    g = np.random.default_rng(0)
    obs = torch.as_tensor(g.normal(size=(batch_size, 4)), dtype=torch.float32)
    act = torch.as_tensor(g.integers(2, size=batch_size))
    adv, ret, old_v = (torch.as_tensor(g.normal(size=batch_size), dtype=torch.float32)
                       for _ in range(3))
    with torch.no_grad():
        old_logp, _ = ppo.pi.log_prob_entropy(obs, act)
    return ppo, (obs, act, adv, ret, old_v, old_logp)


def step_fn(ppo, compiled: bool):
    def loss(obs, act, adv, ret, old_v, old_logp):
        logp, entropy, v = ppo.evaluate(obs, act)
        return ppo.clipped_losses(logp, entropy, v, adv, ret, old_v, old_logp)

    fn = torch.compile(loss) if compiled else loss

    def step(*tensors):
        value, stats = fn(*tensors)
        clip_and_step(value, ppo.optim, ppo.cfg.max_grad_norm)
        return stats

    return step


def timed(step, tensors, n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    step(*tensors)
    first = time.perf_counter() - t0
    for _ in range(20):
        step(*tensors)
    t0 = time.perf_counter()
    for _ in range(n):
        step(*tensors)
    return first, n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for batch in args.batch:
        ppo, tensors = make(batch)
        start = ppo.optim.flat.clone()
        ppo.by_hand = False
        eager = step_fn(ppo, compiled=False)
        for _ in range(20):
            eager(*tensors)
        eager_after = ppo.optim.flat.clone()
        ppo.optim.flat.copy_(start)
        ppo.optim.exp_avg.zero_()
        ppo.optim.exp_avg_sq.zero_()
        ppo.optim.steps = 0
        compiled = step_fn(ppo, compiled=True)
        t0 = time.perf_counter()
        compiled(*tensors)
        compile_s = time.perf_counter() - t0
        for _ in range(19):
            compiled(*tensors)
        diff = (ppo.optim.flat - eager_after).abs().max().item()
        _, compiled_rate = timed(compiled, tensors, args.steps)
        _, eager_rate = timed(eager, tensors, args.steps)
        ppo.by_hand = True
        _, hand_rate = timed(ppo._minibatch, tensors, args.steps)
        print(f"batch {batch}: eager autograd {eager_rate:,.0f} steps/s; compiled "
              f"{compiled_rate:,.0f} steps/s after a {compile_s:.1f} s compile (the compile "
              f"costs {compile_s * compiled_rate:,.0f} steps); by hand {hand_rate:,.0f} steps/s; "
              f"compiled vs eager after 20 steps: max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
