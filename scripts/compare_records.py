"""Same seed, same numbers: run a fixed set of short trainings and compare their records with
another checkout's.

Every registered algorithm and trainer kind runs once or more (observation and reward
normalisation, n-step returns, episode-counted collection, next-step and same-step autoreset,
discrete and continuous offline data), each into ``OUT/<name>/``. ``diff`` compares two such
folders: every field of every ``epochs.jsonl`` record and of ``summary.json`` but the ones that
measure time. A refactoring that keeps behaviour shows no difference.

    # the checkout to compare against, e.g. a worktree of the previous commit
    git worktree add /tmp/rltrain-before HEAD~1
    export PYTHONPATH=/tmp/rltrain-before/src
    .venv/bin/python scripts/compare_records.py run /tmp/rec_before && unset PYTHONPATH
    .venv/bin/python scripts/compare_records.py run /tmp/rec_after --data /tmp/rec_before/data
    .venv/bin/python scripts/compare_records.py diff /tmp/rec_before /tmp/rec_after

``--data`` reuses the first run's offline datasets, so both sides learn from the same bytes.
SWEEPS are ``--multirun`` sweeps (the batched launcher): each job's run directory is compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent

#: name -> overrides; short runs (seconds each), seeds other than 0 where it costs nothing
RUNS: dict[str, list[str]] = {
    "ppo_cartpole": ["algo=ppo", "env=cartpole", "seed=1", "trainer.max_epochs=3",
                     "trainer.stop_score=null"],
    "ppo_pendulum_norm": ["algo=ppo", "env=pendulum", "seed=2", "trainer.max_epochs=2",
                          "trainer.epoch_num_steps=4096", "env.normalize.obs=true",
                          "env.normalize.reward=true"],
    "ppo_acrobot_episodes": ["algo=ppo", "env=gym", "env.id=Acrobot-v1", "seed=3",
                             "trainer.max_epochs=2", "trainer.epoch_num_steps=1500",
                             "trainer.collection_step_num_env_steps=null",
                             "trainer.collection_step_num_episodes=4", "trainer.batch_size=null"],
    "dqn_cartpole": ["algo=dqn", "env=cartpole", "seed=4", "trainer.max_epochs=3",
                     "trainer.epoch_num_steps=2000", "trainer.stop_score=null"],
    "dqn_cartpole_nstep": ["algo=dqn", "env=cartpole", "seed=5", "trainer.max_epochs=2",
                           "trainer.epoch_num_steps=2000", "algo.n_step=3",
                           "env.normalize.obs=true", "trainer.stop_score=null"],
    "sac_pendulum": ["algo=sac", "env=pendulum", "seed=6", "trainer.max_epochs=3",
                     "trainer.epoch_num_steps=1000"],
    "sac_pendulum_norm_nstep": ["algo=sac", "env=pendulum", "seed=7", "trainer.max_epochs=2",
                                "trainer.epoch_num_steps=1000", "algo.n_step=3",
                                "env.normalize.obs=true", "env.normalize.reward=true",
                                "env.vectorization=sync"],
    "td3_pendulum": ["algo=td3", "env=pendulum", "seed=8", "trainer.max_epochs=3",
                     "trainer.epoch_num_steps=1000"],
    "ddpg_pendulum_episodes": ["algo=ddpg", "env=pendulum", "seed=9", "trainer.max_epochs=2",
                               "trainer.epoch_num_steps=800",
                               "trainer.collection_step_num_env_steps=null",
                               "trainer.collection_step_num_episodes=2"],
    "cql_pendulum": ["algo=cql", "env=pendulum", "seed=10", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=300", "dataset={data}/pendulum.h5"],
    "cql_cartpole": ["algo=cql", "env=cartpole", "seed=11", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=500", "dataset={data}/cartpole.h5"],
    "bc_cartpole": ["algo=bc", "env=cartpole", "seed=12", "trainer.max_epochs=2",
                    "trainer.epoch_num_steps=500", "dataset={data}/cartpole.h5",
                    "env.normalize.obs=true"],
    "td3bc_pendulum": ["algo=td3bc", "env=pendulum", "seed=13", "trainer.max_epochs=2",
                       "trainer.epoch_num_steps=500", "dataset={data}/pendulum.h5",
                       "algo.n_step=2"],
    "iql_pendulum": ["algo=iql", "env=pendulum", "seed=14", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=500", "dataset={data}/pendulum.h5"],
    "iql_cartpole": ["algo=iql", "env=cartpole", "seed=15", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=500", "dataset={data}/cartpole.h5"],
    "a2c_cartpole": ["algo=a2c", "env=cartpole", "seed=16", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=2000", "trainer.stop_score=null"],
    "a2c_pendulum": ["algo=a2c", "env=pendulum", "seed=17", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=2000"],
    "reinforce_cartpole": ["algo=reinforce", "env=cartpole", "seed=18", "trainer.max_epochs=2",
                           "trainer.epoch_num_steps=2000", "trainer.stop_score=null"],
    "ppo_lstm_cartpole_novel": ["algo=ppo_lstm", "env=cartpole_novel", "seed=19",
                                "trainer.max_epochs=2", "trainer.epoch_num_steps=2048",
                                "trainer.stop_score=null"],
    "discrete_sac_cartpole": ["algo=discrete_sac", "env=cartpole", "seed=20",
                              "trainer.max_epochs=2", "trainer.epoch_num_steps=1000",
                              "trainer.stop_score=null"],
    "dqn_cartpole_prioritized": ["algo=dqn", "env=cartpole", "seed=21", "buffer=prioritized",
                                 "trainer.max_epochs=2", "trainer.epoch_num_steps=2000",
                                 "trainer.stop_score=null"],
    "c51_cartpole": ["algo=c51", "env=cartpole", "seed=22", "trainer.max_epochs=2",
                     "trainer.epoch_num_steps=1500", "trainer.stop_score=null"],
    "qrdqn_cartpole": ["algo=qrdqn", "env=cartpole", "seed=23", "trainer.max_epochs=2",
                       "trainer.epoch_num_steps=1500", "trainer.stop_score=null"],
    "rainbow_cartpole": ["algo=rainbow", "env=cartpole", "seed=24", "trainer.max_epochs=2",
                         "trainer.epoch_num_steps=1500", "trainer.stop_score=null"],
    # images stored frame by frame: Atari's 4-frame stacks, one 84x84 frame a transition
    "dqn_atari_frames": ["algo=dqn", "env=atari", "env.id=ALE/Pong-v5", "seed=25",
                         "trainer.max_epochs=2", "trainer.epoch_num_steps=1000",
                         "trainer.random_warmup_env_steps=1000", "buffer.size=4000",
                         "env.num_test_envs=1", "trainer.test_step_num_episodes=1",
                         "algo.target_update_interval=100"],
    # dict observations (image, direction, mission) through the dict encoder
    "ppo_minigrid_dict": ["algo=ppo", "env=minigrid", "seed=26", "trainer.max_epochs=2",
                          "trainer.epoch_num_steps=1024"],
}

#: sweeps: name -> overrides of one ``rltrain --multirun``; each job's records are compared
SWEEPS: dict[str, list[str]] = {
    # seeds batched in one process (stacked PPO updates)
    "ppo_batched_sweep": ["hydra/launcher=batched", "algo=ppo", "env=cartpole",
                          "trainer.max_epochs=2", "trainer.stop_score=null", "seed=27,28,29"],
}

#: datasets the offline runs learn from (random actions: any rltrain makes the same bytes)
DATASETS = {
    "pendulum.h5": ["--random", "--env", "Pendulum-v1", "--steps", "6000", "--seed", "1"],
    "cartpole.h5": ["--random", "--env", "CartPole-v1", "--steps", "6000", "--seed", "2"],
}

#: record fields that measure time, not learning
TIMED = ("time", "steps_per_s", "collect_steps_per_s", "wall_time", "startup_time")


#: fields left out of the comparison at any depth (``diff --ignore``): e.g. a field one side's
#: version added, which the other cannot have
IGNORED: set[str] = set()


def _untimed(record: dict) -> dict:
    """The record without what measures time (at any depth), where the run lives, or which
    run it is (its id: every run has its own), nor the ``--ignore``d fields."""
    return {k: _untimed(v) if isinstance(v, dict) else v for k, v in record.items()
            if k not in TIMED and not k.startswith("timing") and k not in IGNORED
            and k not in ("system", "run_dir", "checkpoint", "run")}


def run(out: Path, data: Path | None, only: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = out / "data"
        data.mkdir(exist_ok=True)
        for name, args in DATASETS.items():
            if not (data / name).exists():
                subprocess.run([str(BIN / "rltrain-collect"), *args, "--out", str(data / name)],
                               check=True, capture_output=True)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for name, overrides in RUNS.items():
        if only and name not in only:
            continue
        args = [o.format(data=data.absolute()) for o in overrides]
        t0 = time.perf_counter()
        res = subprocess.run([str(BIN / "rltrain"), *args, f"hydra.run.dir={out / name}",
                              "logger.tensorboard=false"], capture_output=True, text=True,
                             env=env)
        print(f"{name:<26} rc {res.returncode}  {time.perf_counter() - t0:6.1f} s", flush=True)
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)
    for name, overrides in SWEEPS.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        res = subprocess.run([str(BIN / "rltrain"), "--multirun", *overrides,
                              f"hydra.sweep.dir={out / name}", "logger.tensorboard=false"],
                             capture_output=True, text=True, env=env)
        print(f"{name:<26} rc {res.returncode}  {time.perf_counter() - t0:6.1f} s", flush=True)
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)


def _runs(folder: Path) -> list[str]:
    """The run directories to compare, relative to ``folder``: one per entry of RUNS, and
    one per job of each sweep (its subfolders that hold records, e.g. ``seed=27_job0``)."""
    names = list(RUNS)
    for name in SWEEPS:
        jobs = sorted(p.parent.name for p in (folder / name).glob("*/epochs.jsonl"))
        names += [f"{name}/{job}" for job in jobs] or [name]
    return names


def _load(run_dir: Path) -> tuple[list[dict], dict]:
    lines = (run_dir / "epochs.jsonl").read_text().splitlines()
    records = [_untimed(json.loads(line)) for line in lines if line.strip()]
    summary = _untimed(json.loads((run_dir / "summary.json").read_text()))
    return records, summary


def _differences(a: object, b: object, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'second' if key not in a else 'first'}")
            else:
                out += _differences(a[key], b[key], f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def diff(first: Path, second: Path) -> int:
    bad = 0
    names = _runs(first)
    names += [n for n in _runs(second) if n not in names]
    for name in names:
        if not (first / name).is_dir() or not (second / name).is_dir():
            print(f"{name:<26} missing in {'first' if not (first / name).is_dir() else 'second'}")
            bad += 1
            continue
        (ra, sa), (rb, sb) = _load(first / name), _load(second / name)
        problems = _differences(ra, rb, "epochs") + _differences(sa, sb, "summary")
        status = "same" if not problems else f"{len(problems)} difference(s)"
        print(f"{name:<26} {len(ra)} epochs  {status}")
        for p in problems[:8]:
            print(f"    {p}")
        bad += bool(problems)
    print(f"{len(names) - bad} of {len(names)} runs have the same records")
    return 1 if bad else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train the fixed set into OUT/<name>/")
    r.add_argument("out", type=Path)
    r.add_argument("--data", type=Path, default=None, help="reuse these offline datasets")
    r.add_argument("--only", nargs="*", default=[], help="run only these names")
    d = sub.add_parser("diff", help="compare two folders written by run")
    d.add_argument("first", type=Path)
    d.add_argument("second", type=Path)
    d.add_argument("--ignore", nargs="*", default=[],
                   help="leave these fields out, at any depth (one side's version added them)")
    args = p.parse_args()
    if args.command == "run":
        run(args.out, args.data, args.only)
    else:
        IGNORED.update(args.ignore)
        if IGNORED:
            print(f"left out of the comparison: {', '.join(sorted(IGNORED))}")
        sys.exit(diff(args.first, args.second))


if __name__ == "__main__":
    main()
