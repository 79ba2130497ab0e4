"""Env steps per second on CartPole-v1, from the bare env to the whole PPO training loop.

(a) the raw vector env with random actions; (b) env plus a 64x64 MLP sampling actions,
written as plainly as possible: the ceiling for any collector; (c) rltrain's collector
alone (PPO policy, transitions written to the buffer); (d) rltrain's whole PPO training
loop with the RL-Zoo3 hyperparameters (8 envs x 32 steps, 20 passes of minibatch 256), no
testing. Then DQN gradient steps per second: the update alone, and with buffer sampling. Then
PPO's minibatch step against its plain-PyTorch floor (batch 64 and 256). Then
SAC's gradient steps per second on Pendulum-v1 (batch 256, 64x64 and 256x256 networks) against
the plain-PyTorch floor: the same losses written the textbook way (nn.Linear critics,
torch.optim.Adam, a parameter loop for the Polyak update), as CleanRL's sac_continuous_action.py
does. One torch thread, as in the peer comparison.

    .venv/bin/python scripts/bench_throughput.py [--envs 8] [--steps 200000] [--peers]
    .venv/bin/python scripts/bench_throughput.py --only-ppo | --only-sac | --only-dqn
    .venv/bin/python scripts/bench_throughput.py --loop-rounds 5   # PPO loop against SB3's
    .venv/bin/python scripts/bench_throughput.py --sac-collector   # SAC's collection, Hopper
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from _build import build
from rltrain.algorithms.ppo import PPO
from rltrain.common.types import Progress
from rltrain.nets.actors_critics import mlp

#: rltrain overrides equal to rl-zoo3's hyperparams/ppo.yml for CartPole-v1
ZOO_PPO = ["algo=ppo", "env=cartpole", "env.num_train_envs=8",
           "trainer.collection_step_num_env_steps=256", "trainer.batch_size=256",
           "trainer.update_step_num_repetitions=20", "algo.gamma=0.98", "algo.gae_lambda=0.8",
           "algo.lr=1e-3", "algo.ent_coef=0.0", "algo.clip_ratio=0.2", "algo.max_grad_norm=0.5"]


def per_second(step: Callable[[], object], n: int, warmup: int = 50) -> float:
    """Calls of ``step`` per second over ``n`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return n / (time.perf_counter() - t0)


def rate(steps: int, seconds: float) -> str:
    return f"{steps / seconds:>12,.0f} env steps/s"


def raw_env(num_envs: int, steps: int) -> float:
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(2, size=(steps // num_envs, num_envs))
    t0 = time.perf_counter()
    for a in actions:
        envs.step(a)
    return steps / (time.perf_counter() - t0)


def env_plus_policy(num_envs: int, steps: int, sampler: str = "gumbel") -> float:
    """The ceiling: the env stepped with actions drawn from a 64x64 MLP, nothing else.
    "gumbel" draws them with the same maths as rltrain's PPO (the Gumbel-max trick, written
    inline); "multinomial" with softmax + torch.multinomial, for reference."""
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    obs, _ = envs.reset(seed=0)
    net = mlp(4, [64, 64], 2)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(steps // num_envs):
            logits = net(torch.from_numpy(obs))
            if sampler == "gumbel":
                act = (logits - torch.rand_like(logits).log_().neg_().log_()).argmax(-1)
            else:
                act = torch.multinomial(logits.softmax(-1), 1)[:, 0]
            obs, *_ = envs.step(act.numpy())
    return steps / (time.perf_counter() - t0)


def collector_alone(num_envs: int, steps: int) -> float:
    b = build(["algo=dqn", "env=cartpole", f"env.num_train_envs={num_envs}",
               f"buffer.size={max(steps, num_envs)}"])
    # the PPO policy acting, written into a replay buffer large enough for every step
    ppo = build(["algo=ppo", "env=cartpole", f"env.num_train_envs={num_envs}"]).algorithm
    policy = ppo.policy(Progress(0, 0, 0.0))
    t0 = time.perf_counter()
    episodes = b.train_collector.collect(policy, n_steps=steps)
    return episodes.n_steps / (time.perf_counter() - t0)


def ppo_training_loop(steps: int, by_hand: bool = True) -> tuple[float, float, float]:
    """rltrain's PPO loop: env steps per second, and the shares collecting and updating.
    ``by_hand=False`` differentiates the minibatch steps through autograd instead."""
    b = build([*ZOO_PPO, "trainer.max_epochs=1000"])
    b.algorithm.by_hand = b.algorithm.by_hand and by_hand
    trainer = b.trainer
    collect = update = 0.0
    t0 = time.perf_counter()
    while trainer.env_step < steps:
        _, _, _, spent = trainer.training_step()
        collect, update = collect + spent.collect, update + spent.update
    seconds = time.perf_counter() - t0
    return trainer.env_step / seconds, collect / seconds, update / seconds


def trainer_batch(b, batch_size: int):
    """A batch as the off-policy trainer reads it: its read path (sampler, gather, the
    algorithm's transforms); for a checkout from before the read path (on PYTHONPATH), the
    sampler's indices and the algorithm's own batch."""
    if hasattr(b.trainer, "reader"):
        return b.trainer.reader.batch(b.buffer, batch_size, 0.5)
    return b.algorithm.batch(b.buffer, *b.trainer.sampler.sample(b.buffer, batch_size))


def gradient_steps(overrides: list[str], batch_size: int, n: int) -> tuple[float, float]:
    """An off-policy algorithm's update on batches from its buffer after 5,000 random env
    steps: gradient steps per second (update alone on one batch, with buffer sampling)."""
    b = build([*overrides, f"trainer.batch_size={batch_size}"])
    b.train_collector.collect(b.trainer.random_policy, n_steps=5000)

    def sample():  # as the off-policy trainer does
        return trainer_batch(b, batch_size)

    batch = sample()
    for i in range(50):
        b.algorithm.update(batch, progress=Progress(0, i, 0.5))
    t0 = time.perf_counter()
    for i in range(n):
        b.algorithm.update(batch, progress=Progress(0, i, 0.5))
    alone = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(n):
        b.algorithm.update(sample(), progress=Progress(0, i, 0.5))
    return alone, n / (time.perf_counter() - t0)


def dqn_gradient_steps(batch_size: int, n: int = 2000) -> tuple[float, float]:
    return gradient_steps(["algo=dqn", "env=cartpole"], batch_size, n)


#: DQN's tuned configs --only-dqn times: a plain MLP, and a CNN in front of one
DQN_CASES = {
    "CartPole tuned (128x128)": ["algo=dqn", "env=cartpole"],
    "MinAtar Breakout tuned (CNN, 128)": ["algo=dqn", "env=minatar",
                                          "env.id=MinAtar/Breakout-v1"],
}


def dqn_report(rounds: int = 5, n: int = 1000) -> None:
    """DQN's gradient step on its tuned networks (one batch, update alone), the layers
    differentiated by hand against autograd for all of it: interleaved rounds, medians."""
    for label, overrides in DQN_CASES.items():
        b = build(overrides)
        b.train_collector.collect(b.trainer.random_policy, n_steps=5000)
        batch_size = b.trainer.params.batch_size
        batch = trainer_batch(b, batch_size)
        algo = b.algorithm
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for by_hand in (True, False):
                algo.by_hand = by_hand
                for i in range(50):
                    algo.update(batch, progress=Progress(0, i, 0.5))
                t0 = time.perf_counter()
                for i in range(n):
                    algo.update(batch, progress=Progress(0, i, 0.5))
                times[by_hand].append((time.perf_counter() - t0) / n * 1e6)
        hand, auto = (float(np.median(times[k])) for k in (True, False))
        print(f"DQN gradient step, {label}, batch {batch_size}, medians of {rounds}: by hand "
              f"{hand:,.0f} us, autograd {auto:,.0f} us (by hand / autograd = "
              f"{hand / auto:.2f})", flush=True)


def sac_gradient_steps(hidden: int, batch_size: int = 256, n: int = 1000) -> tuple[float, float]:
    """rltrain's SAC update (Pendulum-v1, hidden x hidden networks)."""
    return gradient_steps(["algo=sac", "env=pendulum", f"algo.hidden_sizes=[{hidden},{hidden}]"],
                          batch_size, n)


def plain_sac_gradient_steps(hidden: int, batch_size: int = 256, n: int = 1000) -> float:
    """The floor: SAC's update in plain PyTorch (two nn.Sequential critics and their targets,
    a squashed Gaussian actor, torch.optim.Adam, autograd for alpha, a loop of lerp_ for the
    Polyak update), on one fixed batch of Pendulum-sized tensors."""
    from torch import nn

    obs_dim, act_dim = 3, 1

    def net(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                             nn.ReLU(), nn.Linear(hidden, o))

    actor, q1, q2 = net(obs_dim, 2 * act_dim), net(obs_dim + act_dim, 1), net(obs_dim + act_dim, 1)
    q1_t, q2_t = net(obs_dim + act_dim, 1), net(obs_dim + act_dim, 1)
    q1_t.load_state_dict(q1.state_dict())
    q2_t.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    a_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    q_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=1e-3)
    al_opt = torch.optim.Adam([log_alpha], lr=3e-4)
    obs, next_obs = torch.randn(batch_size, obs_dim), torch.randn(batch_size, obs_dim)
    act, rew = torch.rand(batch_size, act_dim) * 2 - 1, torch.randn(batch_size)
    done = torch.zeros(batch_size)

    def sample(o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(o).chunk(2, -1)
        log_std = -5 + 3.5 * (torch.tanh(log_std) + 1)
        normal = torch.distributions.Normal(mean, log_std.exp())
        u = normal.rsample()
        a = torch.tanh(u)
        return a, (normal.log_prob(u) - torch.log(1 - a.pow(2) + 1e-6)).sum(-1)

    def step() -> None:
        alpha = log_alpha.exp().item()
        with torch.no_grad():
            na, nlogp = sample(next_obs)
            x = torch.cat([next_obs, na], -1)
            nq = torch.min(q1_t(x), q2_t(x)).squeeze(-1) - alpha * nlogp
            target = rew + 0.99 * (1 - done) * nq
        x = torch.cat([obs, act], -1)
        q_loss = ((q1(x).squeeze(-1) - target) ** 2).mean() + (
            (q2(x).squeeze(-1) - target) ** 2).mean()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        a, logp = sample(obs)
        x = torch.cat([obs, a], -1)
        a_loss = (alpha * logp - torch.min(q1(x), q2(x)).squeeze(-1)).mean()
        a_opt.zero_grad()
        a_loss.backward()
        a_opt.step()
        al_loss = (-log_alpha.exp() * (logp.detach() - act_dim)).mean()
        al_opt.zero_grad()
        al_loss.backward()
        al_opt.step()
        with torch.no_grad():
            for p, tp in zip([*q1.parameters(), *q2.parameters()],
                             [*q1_t.parameters(), *q2_t.parameters()], strict=True):
                tp.lerp_(p, 0.005)

    return per_second(step, n)


def ppo_minibatch_steps(batch_size: int, n: int = 2000) -> float:
    """rltrain's PPO minibatch step (the RL-Zoo3 CartPole settings: separate 64x64 tanh actor
    and critic, clipped surrogate, value loss, entropy, gradient-norm clip 0.5, Adam) on one
    fixed minibatch cut from a real rollout: minibatch steps per second."""
    ppo, tensors = ppo_minibatch(batch_size)
    return per_second(lambda: ppo._minibatch(*tensors), n)


def ppo_minibatch(batch_size: int) -> tuple[PPO, tuple[torch.Tensor, ...]]:
    """A PPO with the RL-Zoo3 CartPole settings, and one minibatch for it: (obs, act, adv,
    ret, old_v, old_logp)."""
    ppo = build([*ZOO_PPO, f"trainer.batch_size={batch_size}"]).algorithm
    assert isinstance(ppo, PPO)
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(batch_size, 4)),
                          dtype=torch.float32)
    act = torch.randint(2, (batch_size,))
    adv, ret, old_v = torch.randn(batch_size), torch.randn(batch_size), torch.randn(batch_size)
    with torch.no_grad():
        old_logp, _ = ppo.pi.log_prob_entropy(obs, act)
    return ppo, (obs, act, adv, ret, old_v, old_logp)


def ppo_update_minibatch_steps(batch_size: int, passes: int = 20, n: int = 100) -> float:
    """The same steps as :func:`ppo_minibatch_steps`, as an update runs them: one minibatch
    of ``batch_size`` samples a pass, ``passes`` passes, gathered once with their advantages
    normalised together and their stats reduced at the end (``ppo_by_hand.update_steps``):
    minibatch steps per second."""
    ppo, tensors = ppo_minibatch(batch_size)
    perms = [torch.randperm(batch_size) for _ in range(passes)]
    return passes * per_second(lambda: ppo.minibatch_steps(tensors, perms, batch_size), n,
                               warmup=5)


def plain_ppo_minibatch_steps(batch_size: int, n: int = 2000) -> float:
    """The floor: the same minibatch step in plain PyTorch, written as CleanRL's ppo.py does
    (two nn.Sequential 64x64 tanh networks, log_softmax for the categorical, the same losses,
    nn.utils.clip_grad_norm_, torch.optim.Adam with eps 1e-5)."""
    from torch import nn

    def net(out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                             nn.Linear(64, out))

    actor, critic = net(2), net(1)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-5)
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(batch_size, 4)),
                          dtype=torch.float32)
    act = torch.randint(2, (batch_size,))
    adv, ret = torch.randn(batch_size), torch.randn(batch_size)
    with torch.no_grad():
        old_logp = actor(obs).log_softmax(-1).gather(1, act[:, None]).squeeze(1)

    def step() -> None:
        logits = actor(obs).log_softmax(-1)
        logp = logits.gather(1, act[:, None]).squeeze(1)
        entropy = -(logits.exp() * logits).sum(-1).mean()
        v = critic(obs).squeeze(1)
        a = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = (logp - old_logp).exp()
        pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
        loss = pg + 0.5 * 0.5 * (v - ret).pow(2).mean() - 0.0 * entropy
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    return per_second(step, n)


def ppo_report() -> None:
    for bs in (64, 256):
        ours, floor = ppo_minibatch_steps(bs), plain_ppo_minibatch_steps(bs)
        in_update = ppo_update_minibatch_steps(bs)
        print(f"PPO minibatch steps/s, batch {bs:>3}, 64x64: rltrain {ours:,.0f} one at a time, "
              f"{in_update:,.0f} within an update of 20; plain PyTorch floor {floor:,.0f} "
              f"(rltrain / floor = {ours / floor:.2f}, {in_update / floor:.2f})")


def sb3_ppo_loop(steps: int) -> float:
    """Stable-Baselines3's PPO with the same RL-Zoo3 hyperparameters, no evaluation."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                n_epochs=20, ent_coef=0.0, learning_rate=lambda p: p * 1e-3,
                clip_range=lambda p: p * 0.2, seed=0, device="cpu")
    model.learn(2048)  # warm-up, as rltrain's loop is timed after its set-up
    t0 = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.perf_counter() - t0)


def sac_collector_rounds(env_name: str = "hopper", n: int = 3000, rounds: int = 3) -> None:
    """SAC's collection on a MuJoCo env (one env, one step per training step, as SAC trains)
    against its floor: ``env.step`` and the actor's ``sample`` written as plainly as possible.
    What the collector adds beyond that is rltrain's own (observation handling, the buffer
    write, episode bookkeeping, the gymnasium vector and wrapper layers)."""
    b = build(["algo=sac", f"env={env_name}"])
    actor = b.algorithm.actor()
    env = gym.make(b.s.env.id)
    obs, _ = env.reset(seed=0)
    policy = b.algorithm.policy(Progress(0, 0, 0.5))

    def floor() -> float:
        nonlocal obs
        t0 = time.perf_counter()
        with torch.inference_mode():
            for _ in range(n):
                act, _ = actor.sample(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))
                obs, _, terminated, truncated, _ = env.step(act[0].numpy())
                if terminated or truncated:
                    obs, _ = env.reset()
        return n / (time.perf_counter() - t0)

    def collector() -> float:
        t0 = time.perf_counter()
        b.train_collector.collect(policy, n_steps=n)
        return n / (time.perf_counter() - t0)

    for r in range(rounds):
        f, c = floor(), collector()
        print(f"round {r + 1}: {b.s.env.id} floor (env.step + actor.sample) {1e6 / f:,.0f} us "
              f"a step; rltrain's collector {1e6 / c:,.0f} us; collector / floor speed "
              f"{c / f:.2f}")


def loop_rounds(rounds: int) -> None:
    """The PPO loop (100k env steps), by hand and through autograd, and SB3's (50k),
    interleaved ``rounds`` times so that a slow spell of the machine hits all three; medians."""
    from statistics import median

    hand, auto, sb3 = [], [], []
    for r in range(rounds):
        hand.append(ppo_training_loop(100_000)[0])
        auto.append(ppo_training_loop(100_000, by_hand=False)[0])
        sb3.append(sb3_ppo_loop(50_000))
        print(f"round {r + 1}: rltrain {hand[-1]:,.0f} (autograd {auto[-1]:,.0f}), "
              f"SB3 {sb3[-1]:,.0f} env steps/s; rltrain / SB3 = {hand[-1] / sb3[-1]:.2f}")
    ratios = [h / s for h, s in zip(hand, sb3, strict=True)]
    print(f"medians of {rounds}: rltrain {median(hand):,.0f}, autograd {median(auto):,.0f}, "
          f"SB3 {median(sb3):,.0f} env steps/s; rltrain / SB3 {median(ratios):.2f} "
          f"(rounds {min(ratios):.2f}-{max(ratios):.2f}); by hand / autograd "
          f"{median(h / a for h, a in zip(hand, auto, strict=True)):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--only-sac", action="store_true",
                        help="time SAC's update only (skip the CartPole measurements)")
    parser.add_argument("--only-ppo", action="store_true",
                        help="time PPO's minibatch step only, against its plain-PyTorch floor")
    parser.add_argument("--only-dqn", action="store_true",
                        help="time DQN's gradient step only, by hand against autograd")
    parser.add_argument("--peers", action="store_true",
                        help="also time Stable-Baselines3's PPO loop (needs the bench extra)")
    parser.add_argument("--sac-collector", action="store_true",
                        help="only SAC's collector on Hopper against env.step + actor.sample")
    parser.add_argument("--loop-rounds", type=int, default=0, metavar="K",
                        help="only the PPO loops: rltrain by hand, through autograd, and SB3, "
                             "interleaved K times, medians")
    args = parser.parse_args()
    torch.set_num_threads(1)
    m, n = args.envs, args.steps
    if args.only_sac:
        sac_report()
        return
    if args.only_ppo:
        ppo_report()
        return
    if args.only_dqn:
        dqn_report()
        return
    if args.sac_collector:
        sac_collector_rounds()
        return
    if args.loop_rounds:
        loop_rounds(args.loop_rounds)
        return
    a = raw_env(m, n)
    b = env_plus_policy(m, n)
    b_multinomial = env_plus_policy(m, n, "multinomial")
    c = collector_alone(m, n)
    print(f"CartPole-v1, {m} envs, {n:,} steps, torch {torch.__version__}, 1 thread")
    print(f"(a) raw vector env, random actions   {rate(n, n / a)}")
    print(f"(b) env + 64x64 MLP policy (ceiling) {rate(n, n / b)}")
    print(f"    the same, torch.multinomial     {rate(n, n / b_multinomial)}")
    print(f"(c) rltrain collector alone          {rate(n, n / c)}   (c)/(b) = {c / b:.2f}")
    d, collect_share, update_share = ppo_training_loop(min(n, 100_000))
    print(f"(d) rltrain PPO loop, RL-Zoo3 params {rate(1, 1 / d)}   (d)/(b) = {d / b:.2f}  "
          f"[{collect_share:.0%} collecting, {update_share:.0%} updating]")
    if args.peers:
        sb3 = sb3_ppo_loop(min(n, 100_000) // 2)
        print(f"    SB3 PPO loop, same params        {rate(1, 1 / sb3)}   rltrain / SB3 = "
              f"{d / sb3:.2f}")
    ppo_report()
    for bs in (64, 256):
        alone, sampled = dqn_gradient_steps(bs)
        print(f"DQN gradient steps/s, batch {bs:>3}, tuned net: update alone {alone:,.0f}, "
              f"with buffer sampling {sampled:,.0f}")
    dqn_report()
    sac_report()


def sac_report() -> None:
    for hidden in (64, 256):
        alone, sampled = sac_gradient_steps(hidden)
        floor = plain_sac_gradient_steps(hidden)
        print(f"SAC gradient steps/s, batch 256, {hidden}x{hidden}: rltrain update alone "
              f"{alone:,.0f}, with buffer sampling {sampled:,.0f}; plain PyTorch floor "
              f"{floor:,.0f} (rltrain / floor = {alone / floor:.2f})")


if __name__ == "__main__":
    main()
