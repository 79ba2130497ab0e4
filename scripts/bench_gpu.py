"""rltrain on a GPU in one command: eager against compiled (``algo.compile=true``: torch.compile,
CUDA graphs on CUDA), the CPU beside them, and the batched launcher (the issue that asked for
the compiled GPU path; a GPU is lent to this project's sessions only now and then, so the
figures come from one prepared command).

Sections, each in its own fresh process, in this order (``--sections`` picks some):

- ``sac_update``: SAC's gradient step on HalfCheetah-v5 with its tuned settings (256x256
  networks, batch 256), sampling from a buffer of 5,000 random transitions included:
  gradient steps per second, eager and compiled, on ``--device`` and on the CPU; on the
  device each with the batches copied through page-locked memory without waiting (the
  default for compiled losses) and from pageable memory (eager's default; with ``--profile 1``
  each path with its default copies only); the first 50 steps (the compile, for the compiled
  path) are timed apart; then the update alone, repeated on one
  sampled batch (its copies to the device still included), and the host-side sampling alone
  (indices and gather), to show which of the two bounds the step.
- ``ppo_atari``: PPO on ``ALE/Pong-v5``, tuned (8 async envs, the Nature CNN), the whole CLI:
  env steps per second of training (collection and update, from ``epochs.jsonl``) in the
  second epoch, after any compile; the device eager and compiled, and the machine's CPU with
  all its cores as torch threads (epochs of 4,096 env steps instead of 16,384).
- ``ppo_mlp``: the same for PPO on HalfCheetah-v5, tuned (one env, 2,048-step rollouts, 10
  passes of minibatch 64), and on the CPU too.
- ``tests``: the suite's tests that need a CUDA device.
- ``sac_loop``: SAC on HalfCheetah-v5, the whole CLI after 1,000 random steps: training steps
  per second in the second epoch, eager and compiled on the device (the acting step reads
  each action back to the CPU; the update's stats stay on the device). The ``*_loop``,
  ``ppo_*`` sections also run compiled with the acting step left eager (the update still
  compiled): what the compiled acting step adds.
- ``batched``: ``scripts/bench_batched.py`` on the device (``--override device=...``, fixed
  budget of 2 epochs): PPO CartPole (the batched launcher stacks PPO's updates), one seed
  alone, 1 and 10 seeds batched (``--batched-seeds``), 2 seeds under the basic launcher.
  (``--batched-seeds 1,2,5,10,20`` and the basic launcher took 84 s on an H200; with 3
  epochs, and PPO Pendulum as well, it did not finish within 240 s.)
- ``td3_update``, ``ddpg_update``: as ``sac_update``, for TD3 (its tuned HalfCheetah
  settings) and DDPG (its defaults), each with its default copies (eager: pageable;
  compiled: page-locked).

Each section has a time limit; ``--deadline`` seconds after the start no new section begins,
so the command fits a lease. Results print as they come and go to ``--out`` (JSON lines).

    python scripts/bench_gpu.py [--device cuda] [--sections sac_update,ppo_atari,...]
        [--deadline 330] [--out gpu.jsonl] [--quick] [--skip-cpu] [--profile 1]
        [--variants "cuda compiled,..."] [--batched-seeds 1,2,5,10,20]

``--quick`` shrinks every budget (a check of the script itself on a CPU-only machine, with
``--device cpu``).
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECTIONS = ("sac_update", "ppo_atari", "ppo_mlp", "tests", "sac_loop", "batched", "td3_update",
            "ddpg_update")


def update_worker(algo_name: str, device: str, compile_: bool, steps: int, pinned: bool,
                  profile: bool = False) -> dict[str, Any]:
    """In this process: SAC's (TD3's, DDPG's) update on HalfCheetah, timed (see the module's
    docstring); ``pinned`` False copies each batch to the device from pageable memory, as
    before page-locked copies were the default. ``profile``: then ``torch.profiler`` over
    100 more sampled updates, its operators by self CPU time and (on CUDA) self CUDA time."""
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    from _build import build
    from rltrain.common.types import Progress

    b = build([f"algo={algo_name}", "env=halfcheetah", f"device={device}",
               f"algo.compile={str(compile_).lower()}"])
    b.train_collector.collect(b.trainer.random_policy, n_steps=5000)
    algo, size = b.algorithm, b.s.trainer.batch_size
    if device.startswith("cuda"):
        algo.pinned_copies = pinned

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def sample():  # as the off-policy trainer does: its read path
        return b.trainer.reader.batch(b.buffer, size, 0.5)

    def timed(n: int, start: int, fixed=None) -> float:
        """Seconds for ``n`` updates, each on a new sample (``fixed`` None) or on ``fixed``."""
        sync()
        t0 = time.perf_counter()
        for i in range(start, start + n):
            algo.update(sample() if fixed is None else fixed, progress=Progress(0, i, 0.5))
        sync()
        return time.perf_counter() - t0

    def sampling(n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            sample()
        sync()
        return time.perf_counter() - t0

    first = timed(50, 0)
    seconds = timed(steps, 50)
    alone = timed(steps, 50 + steps, fixed=sample())
    tables = {}
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        kinds = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda")
                                          else [])
        with profiler(activities=kinds) as prof:
            timed(100, 50 + 2 * steps)
        averages = prof.key_averages()
        tables["by_self_cpu"] = averages.table(sort_by="self_cpu_time_total", row_limit=25)
        if device.startswith("cuda"):
            tables["by_self_cuda"] = averages.table(sort_by="self_cuda_time_total",
                                                    row_limit=25)
    return {**tables, "algo": algo_name, "device": device, "compile": compile_,
            "pinned": algo.pinned_copies,
            "threads": torch.get_num_threads(),
            "first_50_s": first, "steps": steps, "gradient_steps_per_s": steps / seconds,
            "update_alone_per_s": steps / alone, "sampling_alone_per_s": steps / sampling(steps)}


#: ``rltrain`` with the acting step left eager (the update still compiled when asked): what
#: compiling the acting step adds, measured beside the full compiled path
EAGER_ACTING = ("import sys; from rltrain.algorithms import actor_critic, ddpg, sac; "
                "plain = lambda algo, name: getattr(algo, name); "
                "sac.acting = ddpg.acting = actor_critic.acting = plain; "
                "from rltrain.commands.train import main; sys.argv[0] = 'rltrain'; main()")


def cli_rate(overrides: list[str], timeout: float, eager_acting: bool = False
             ) -> dict[str, Any]:
    """One whole ``rltrain`` run of two epochs; its second epoch's training rate."""
    program = [sys.executable, "-c", EAGER_ACTING] if eager_acting else [str(BIN / "rltrain")]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        argv = [*program, *overrides, "trainer.max_epochs=2",
                "trainer.stop_score=null", "logger.progress_bar=false",
                "logger.tensorboard=false", f"hydra.run.dir={run}"]
        t0 = time.perf_counter()
        res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"exit {res.returncode}: {' '.join(argv)}\n{res.stderr[-3000:]}")
        epochs = [json.loads(line) for line in (run / "epochs.jsonl").read_text().splitlines()]
    first, second = epochs[0], epochs[-1]
    steps = second["env_step"] - first["env_step"]

    def busy(e: dict[str, Any]) -> float:
        return float(e["timing"]["collect"] + e["timing"]["update"])

    return {"overrides": overrides, "eager_acting": eager_acting, "wall_s": wall,
            "epoch1_train_s": busy(first), "epoch2_train_s": busy(second),
            "epoch2_env_steps": steps,
            "steps_per_s": steps / busy(second),
            "epoch2_update_share": second["timing"]["update"] / busy(second),
            "test_return": second["test"]["return_mean"]}


def variants(device: str, skip_cpu: bool) -> list[tuple[str, list[str]]]:
    """(label, overrides) for eager on the CPU, eager on the device, compiled on the device,
    and compiled with the acting step eager or with the replay buffer's device copy."""
    out = [("cpu eager", ["device=cpu"])] if not skip_cpu else []
    if device != "cpu":
        out.append((f"{device} eager", [f"device={device}"]))
    out.append((f"{device} compiled", [f"device={device}", "algo.compile=true"]))
    if device != "cpu":
        out.append((f"{device} compiled, eager acting", [f"device={device}",
                                                         "algo.compile=true"]))
        # the replay buffer's device copy, which an online run has only when asked: what it
        # changes
        out.append((f"{device} compiled, replay on device", [f"device={device}",
                                                             "algo.compile=true",
                                                             "buffer.on_device=true"]))
    return out


def section(name: str, args: argparse.Namespace, emit) -> None:
    quick, device = args.quick, args.device
    if name in ("sac_update", "td3_update", "ddpg_update"):
        steps = 100 if quick else 2000
        runs = [] if args.skip_cpu else [("cpu", False, True)]
        if device != "cpu":  # SAC: eager and compiled, each with both kinds of copy
            runs += ([(device, comp, pin) for comp in (False, True) for pin in (True, False)]
                     if name == "sac_update" and not args.profile
                     else [(device, False, False), (device, True, True)])
        else:
            runs += [(device, True, True)]
        for dev, comp, pin in runs:
            res = subprocess.run([sys.executable, __file__, "--worker", name.split("_")[0],
                                  "--device", dev, "--compile", str(int(comp)),
                                  "--pinned", str(int(pin)), "--steps", str(steps),
                                  "--profile", str(int(args.profile))],
                                 capture_output=True, text=True, timeout=200)
            if res.returncode != 0:
                emit({"section": name, "device": dev, "compile": comp,
                      "error": res.stderr[-3000:]})
                continue
            emit({"section": name, **json.loads(res.stdout.strip().splitlines()[-1])})
    elif name in ("ppo_mlp", "ppo_atari", "sac_loop"):
        if name == "ppo_mlp":
            base = ["algo=ppo", "env=halfcheetah",
                    f"trainer.epoch_num_steps={2048 if quick else 10240}"]
        elif name == "ppo_atari":
            base = ["algo=ppo", "env=atari", "env.id=ALE/Pong-v5", "env.vectorization=async",
                    f"trainer.epoch_num_steps={1024 if quick else 16384}",
                    "trainer.test_step_num_episodes=1", "env.num_test_envs=1"]
        else:
            base = ["algo=sac", "env=halfcheetah",
                    f"trainer.random_warmup_env_steps={100 if quick else 1000}",
                    f"trainer.epoch_num_steps={300 if quick else 2000}",
                    "trainer.test_step_num_episodes=1", "env.num_test_envs=1"]
        for label, extra in variants(device, args.skip_cpu):
            if args.variants and label not in args.variants.split(","):
                continue
            if name == "sac_loop" and label == "cpu eager" and device != "cpu":
                continue  # the CPU's figures for SAC are in sac_update
            if name != "sac_loop" and "replay on device" in label:
                continue  # on-policy: no replay buffer
            overrides = base + extra
            if name == "ppo_atari" and label == "cpu eager":
                # all the machine's cores for torch, and a quarter of the epoch (the rate is
                # per step; the CPU's update is slow)
                overrides = [o if not o.startswith("trainer.epoch_num_steps=") else
                             f"trainer.epoch_num_steps={1024 if quick else 4096}"
                             for o in overrides] + [f"torch_threads={os.cpu_count()}"]
            try:
                emit({"section": name, "variant": label,
                      **cli_rate(overrides, 200, eager_acting="eager acting" in label)})
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                emit({"section": name, "variant": label, "error": str(exc)[-3000:]})
    elif name == "batched":
        # the basic launcher runs its seeds one after another: 5 of them say what 20 would
        common = [sys.executable, str(ROOT / "scripts" / "bench_batched.py"),
                  "--tasks", "ppo_cartpole", "--budget", "fixed", "--epochs", "2",
                  "--override", f"device={device}"]
        for launcher, seeds in (("batched", "1,2" if quick else args.batched_seeds),
                                ("basic", "1" if quick else "2")):
            # its lines pass straight through, so that a lease that ends mid-table keeps them
            res = subprocess.run([*common, "--launchers", launcher, "--seeds", seeds],
                                 timeout=400)
            emit({"section": name, "launcher": launcher, "rc": res.returncode})
    elif name == "tests":
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-n", "0", "-k", "cuda", "tests/assembly/test_checked_config.py",
                              "tests/nets/test_image_encoders.py",
                              "tests/data/test_device_copies.py",
                              "tests/algorithms/test_compile.py",
                              "tests/data/test_device_replay.py",
                              "tests/algorithms/test_ppo_by_hand.py"],
                             capture_output=True, text=True, timeout=180, cwd=ROOT)
        emit({"section": name, "rc": res.returncode, "output": res.stdout[-3000:]})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--deadline", type=float, default=330.0,
                   help="seconds after which no new section starts")
    p.add_argument("--out", type=Path)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--skip-cpu", action="store_true", help="leave out the CPU's figures")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--compile", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=2000, help=argparse.SUPPRESS)
    p.add_argument("--pinned", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--variants", default="",
                   help="the CLI sections' variants to run, by label (e.g. 'cuda compiled')")
    p.add_argument("--batched-seeds", default="1,10",
                   help="the batched section's seed counts (e.g. 1,2,5,10,20)")
    p.add_argument("--profile", type=int, default=0,
                   help="1: the update sections also profile 100 updates (torch.profiler) "
                        "and print the operator tables")
    args = p.parse_args()
    if args.worker in ("sac", "td3", "ddpg"):
        print(json.dumps(update_worker(args.worker, args.device, bool(args.compile), args.steps,
                                       bool(args.pinned), bool(args.profile))))
        return
    names = [n for n in args.sections.split(",") if n]
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s) {', '.join(unknown)} (known: {', '.join(SECTIONS)})")
    start = time.perf_counter()
    records: list[dict[str, Any]] = []

    def emit(record: dict[str, Any]) -> None:
        records.append(record)
        record["t"] = round(time.perf_counter() - start, 1)
        line = json.dumps(record)
        print(line, flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(line + "\n")

    import torch

    emit({"section": "machine", "torch": torch.__version__, "cpus": os.cpu_count(),
          "cuda": torch.cuda.is_available(),
          "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None})
    for name in names:
        if time.perf_counter() - start > args.deadline:
            emit({"section": name, "skipped": f"past the {args.deadline:.0f} s deadline"})
            continue
        try:
            section(name, args, emit)
        except subprocess.TimeoutExpired as exc:
            emit({"section": name, "error": f"timed out after {exc.timeout} s"})
    print_summary(records)


def print_summary(records: list[dict[str, Any]]) -> None:
    """The records as lines a person reads."""
    print("\nsummary")
    for r in records:
        where = r["section"]
        if "error" in r:
            print(f"  {where} {r.get('variant', r.get('device', ''))}: FAILED (above)")
        elif where == "machine":
            print(f"  {r['gpu'] or 'no GPU'}, torch {r['torch']}, {r['cpus']} CPUs")
        elif where in ("sac_update", "td3_update", "ddpg_update"):
            mode = ("compiled" if r["compile"] else "eager") + (
                ", pageable copies" if r["device"] != "cpu" and not r["pinned"] else "")
            for table in ("by_self_cpu", "by_self_cuda"):
                if table in r:
                    print(f"  {r['algo'].upper()} {r['device']} {mode}, operators {table}:\n"
                          f"{r[table]}")
            print(f"  {r['algo'].upper()} HalfCheetah update, {r['device']} {mode}: "
                  f"{r['gradient_steps_per_s']:,.1f} gradient steps/s (one batch over and over, "
                  f"copies included: {r['update_alone_per_s']:,.1f}; sampling alone: "
                  f"{r['sampling_alone_per_s']:,.0f}/s); first 50 steps {r['first_50_s']:.1f} s")
        elif "steps_per_s" in r:
            print(f"  {where}, {r['variant']}: {r['steps_per_s']:,.0f} env steps/s of training "
                  f"(epoch 1 {r['epoch1_train_s']:.1f} s, epoch 2 {r['epoch2_train_s']:.1f} s, "
                  f"update {r['epoch2_update_share']:.0%} of epoch 2)")
        elif "rc" in r:
            print(f"  {where} {r.get('launcher', '')}: exit {r['rc']}")
        elif "skipped" in r:
            print(f"  {where}: skipped, {r['skipped']}")


if __name__ == "__main__":
    main()
