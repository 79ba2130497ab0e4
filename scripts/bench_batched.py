"""Sweeps of many seeds against one seed: whole-command wall seconds of ``rltrain --multirun
... seed=0,...,k-1`` under Hydra's basic launcher, the joblib launcher (2 workers) and rltrain's
batched launcher (``hydra/launcher=batched``: seeds as the members of a batch in one process,
PPO's updates stacked over them), for PPO CartPole, DQN CartPole and SAC Pendulum with their
shipped tuned configs.

The goal (the issue that asked for the batched launcher): 10 seeds of PPO CartPole and of DQN
CartPole in at most 3x the wall time of one seed (a single ``rltrain algo=... env=...`` run,
whole command), and 10 seeds of SAC Pendulum at least 2x faster than the basic launcher.

What is timed is the whole command in a fresh process, start-up included, as a user waits for
it. Each sweep writes into a fresh temporary directory (removed afterwards; kept, and named,
when the command fails); the command must exit 0 and leave k job directories whose
summary.json says ``completed``. No command gets ``logger.quiet``: every launcher prints its
console lines (epochs, summaries) into a pipe that this script reads, so that all pay the same
small cost for them, and the batched launcher prints its "rltrain: the batch ran N updates as M
stacked computations" line, shown below its table.

Budgets: ``--budget solve`` (default) keeps the shipped settings, so each run stops when its
test return reaches the env's reward threshold; seeds differ in how long they take, and a
batch lasts as long as its slowest seed. ``--budget fixed`` adds ``trainer.stop_score=null
trainer.max_epochs=E`` (``--epochs``, default 3) to every command, the single run included, so
that every seed does the same work: the fair comparison of launchers.

    .venv/bin/python scripts/bench_batched.py [--tasks ppo_cartpole,dqn_cartpole,sac_pendulum]
        [--launchers basic,joblib,batched,batched2] [--seeds 1,2,5,10,20] [--budget solve|fixed]
        [--epochs 3] [--repeats 1] [--n-jobs 2] [--out results.json] [--override device=cuda]
        [--grid algo.lr=1e-4,3e-4,1e-3]

``--grid KEY=V1,V2,...`` sweeps a setting too: each sweep is then k seeds times the values
(PPO's members may differ in the settings of ``AlgoSpec.member_fields``, such as its learning
rate, so such a grid is one batch); the single run takes the first value.

With ``--repeats`` above 1 the rounds are interleaved (every command once, then again), so that
a slow spell hits every command, and the tables show medians. Run it on an idle machine: on a
shared 2-core VM the figures move by 10-20% from run to run, and the defaults take a while
(about 80 sweeps, up to 20 runs each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent

#: task name -> rltrain overrides (the tuned config, conf/tuned/ALGO_ENV.yaml, comes with them)
TASKS = {
    "ppo_cartpole": ["algo=ppo", "env=cartpole"],
    # PPO whose update is most of its time (4096-step rollouts, 10 passes of minibatch 64)
    "ppo_pendulum": ["algo=ppo", "env=pendulum"],
    "dqn_cartpole": ["algo=dqn", "env=cartpole"],
    "sac_pendulum": ["algo=sac", "env=pendulum"],
}
#: batched: the batched launcher in one process (hydra.launcher.n_jobs=1); batched2: with
#: hydra.launcher.n_jobs=2 (two worker processes, forked; the launcher's default on 2 CPUs)
LAUNCHERS = ("basic", "joblib", "batched", "batched2")
#: the batched launcher's last line (rltrain.sweeps.batched), printed once per batch
BATCH_LINE = re.compile(r"rltrain: the batch (?:of jobs [\d, ]+ )?ran \d+ updates as \d+ "
                        r"stacked computations")
#: the batched launcher's line for a job it runs as an ordinary job
ALONE_LINE = re.compile(r"rltrain: job \d+ (?:\(.*\) )?runs alone: (.*)")
#: the goal, per task: ("ratio", r): k seeds in at most r x one seed's wall time, with some
#: launcher; ("speedup", s): batched at least s x faster than basic
GOAL_SEEDS = 10
GOALS = {"ppo_cartpole": ("ratio", 3.0), "dqn_cartpole": ("ratio", 3.0),
         "sac_pendulum": ("speedup", 2.0)}


def launcher_overrides(launcher: str, n_jobs: int) -> list[str]:
    if launcher == "basic":
        return []
    if launcher == "joblib":
        return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
    if launcher == "batched2":
        return ["hydra/launcher=batched", "hydra.launcher.n_jobs=2"]
    return ["hydra/launcher=batched", "hydra.launcher.n_jobs=1"]


def budget_overrides(budget: str, epochs: int) -> list[str]:
    return [] if budget == "solve" else ["trainer.stop_score=null", f"trainer.max_epochs={epochs}"]


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def check_runs(summaries: list[Path], expected: int) -> list[dict[str, Any]]:
    """The runs' summaries; each must exist and say ``completed``, and there must be
    ``expected`` of them."""
    if len(summaries) != expected:
        raise RuntimeError(f"expected {expected} job directories with a summary.json, "
                           f"found {len(summaries)}")
    out = []
    for path in summaries:
        summary = json.loads(path.read_text())
        if summary.get("status") != "completed":
            raise RuntimeError(f"{path}: status {summary.get('status')!r}, "
                               f"error {summary.get('error')!r}")
        out.append(summary)
    return out


def run_command(task: str, launcher: str | None, seeds: int, extra: list[str],
                n_jobs: int, env: dict[str, str], grid: str | None = None) -> dict[str, Any]:
    """Runs one whole command in a fresh temporary directory and returns its record: wall
    seconds, the batched launcher's lines and the runs' epochs and env steps. ``launcher``
    None is the single run (not --multirun). Exits, with the command's output tail, if the
    command fails or its runs did not complete."""
    work = Path(tempfile.mkdtemp(prefix=f"bench_batched_{task}_"))
    key, values = grid.split("=", 1) if grid else ("", "")
    if launcher is None:
        first = [f"{key}={values.split(',')[0]}"] if grid else []
        argv = [str(BIN / "rltrain"), *TASKS[task], *first, *extra,
                f"hydra.run.dir={work / 'run'}"]
    else:
        seed_list = ",".join(str(s) for s in range(seeds))
        argv = [str(BIN / "rltrain"), "--multirun", *TASKS[task], f"seed={seed_list}",
                *([grid] if grid else []), *launcher_overrides(launcher, n_jobs), *extra,
                f"hydra.sweep.dir={work / 'sweep'}"]
    jobs = seeds * len(values.split(",")) if grid and launcher is not None else seeds
    start = time.perf_counter()
    res = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    try:
        if res.returncode != 0:
            raise RuntimeError(f"exit code {res.returncode}")
        pattern = "run/summary.json" if launcher is None else "sweep/*/summary.json"
        summaries = check_runs(sorted(work.glob(pattern)), jobs)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"\nFAILED: {' '.join(argv)}\n  {exc}\n  (its directory is kept: {work})",
              file=sys.stderr)
        print(f"--- stdout tail ---\n{tail(res.stdout)}\n--- stderr tail ---\n{tail(res.stderr)}",
              file=sys.stderr)
        raise SystemExit(1) from exc
    shutil.rmtree(work, ignore_errors=True)
    output = res.stdout + res.stderr
    return {
        "task": task, "launcher": launcher or "single", "seeds": seeds, "wall": wall,
        "command": argv,
        "batch_lines": BATCH_LINE.findall(output),
        "alone": sorted(set(ALONE_LINE.findall(output))),
        "epochs": [s.get("epochs") for s in summaries],
        "env_steps": [s.get("env_step") for s in summaries],
        "train_wall": [s.get("wall_time") for s in summaries],
    }


def median_wall(records: list[dict[str, Any]], task: str, launcher: str,
                seeds: int) -> float | None:
    walls = [r["wall"] for r in records
             if r["task"] == task and r["launcher"] == launcher and r["seeds"] == seeds]
    return statistics.median(walls) if walls else None


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_task(records: list[dict[str, Any]], task: str, launchers: list[str],
               seed_counts: list[int]) -> None:
    """The task's table: wall seconds per launcher, ratio to one seed, batched's speed-up."""
    one = median_wall(records, task, "single", 1)
    assert one is not None
    print(f"\n{task}: one seed (single run, whole command) {one:.2f} s")
    walls_head = " ".join(f"{name + ' s':>10s}" for name in launchers)
    ratio_head = " ".join(f"{name + '/1':>10s}" for name in launchers)
    speed = "batched" in launchers and "basic" in launchers
    print(f"{'seeds':>5s} {walls_head}   {ratio_head}"
          + (f"   {'batched speed-up':>16s}" if speed else ""))
    for k in seed_counts:
        walls = [median_wall(records, task, name, k) for name in launchers]
        ratios = [None if w is None else w / one for w in walls]
        row = (f"{k:5d} {' '.join(fmt(w, '10.2f') for w in walls)}   "
               f"{' '.join(fmt(r, '9.2f', 'x') for r in ratios)}")
        if speed:
            basic = walls[launchers.index("basic")]
            batched = walls[launchers.index("batched")]
            gain = None if batched is None or basic is None else basic / batched
            row += f"   {fmt(gain, '15.2f', 'x')}"
        print(row)
    if "batched" in launchers:
        for k in seed_counts:
            runs = [r for r in records
                    if r["task"] == task and r["launcher"] == "batched" and r["seeds"] == k]
            lines = sorted({line for r in runs for line in r["batch_lines"]})
            alone = sorted({why for r in runs for why in r["alone"]})
            said = "; ".join(lines) if lines else "(no batch line)"
            if alone:
                said += f"; ran alone: {'; '.join(alone)}"
            print(f"  batched, {k} seed(s): {said}")
    print_goal(records, task, launchers, one)


def print_goal(records: list[dict[str, Any]], task: str, launchers: list[str],
               one: float) -> None:
    """Whether the goal's seed count (10) meets the task's goal, per launcher (a task the
    issue set no goal for, such as PPO Pendulum, has no line)."""
    if task not in GOALS:
        return
    kind, target = GOALS[task]
    walls = {name: median_wall(records, task, name, GOAL_SEEDS) for name in launchers}
    if kind == "ratio":
        parts = [f"{name} {w / one:.2f}x {'met' if w / one <= target else 'not met'}"
                 for name, w in walls.items() if w is not None]
        goal = f"{GOAL_SEEDS} seeds in <= {target:g}x one seed's wall"
    else:
        basic = walls.get("basic")
        parts = []
        for name in ("batched", "batched2"):
            wall = walls.get(name)
            if basic is not None and wall is not None:
                gain = basic / wall
                parts.append(f"{name} {gain:.2f}x {'met' if gain >= target else 'not met'}")
        goal = f"{GOAL_SEEDS} seeds batched >= {target:g}x faster than basic"
    print(f"  goal ({goal}): {', '.join(parts) if parts else 'not measured'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--seeds", default="1,2,5,10,20", help="seed counts k (seeds 0..k-1)")
    parser.add_argument("--budget", choices=("solve", "fixed"), default="solve")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run with --budget fixed")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--n-jobs", type=int, default=2, help="the joblib launcher's workers")
    parser.add_argument("--out", type=Path, help="write the raw results here (JSON)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="one more override for every command (repeatable), e.g. device=cuda")
    parser.add_argument("--grid", metavar="KEY=V1,V2,...",
                        help="sweep this setting too (k seeds times its values per sweep)")
    args = parser.parse_args()
    if args.grid is not None and not re.fullmatch(r"[\w.]+=[^,=]+(,[^,=]+)*", args.grid):
        parser.error(f"--grid takes KEY=V1,V2,... (e.g. algo.lr=1e-4,3e-4), got {args.grid!r}")
    tasks = [t for t in args.tasks.split(",") if t]
    launchers = [name for name in args.launchers.split(",") if name]
    seed_counts = [int(k) for k in args.seeds.split(",") if k]
    for task in tasks:
        if task not in TASKS:
            parser.error(f"unknown task {task!r} (known: {', '.join(TASKS)})")
    for name in launchers:
        if name not in LAUNCHERS:
            parser.error(f"unknown launcher {name!r} (known: {', '.join(LAUNCHERS)})")
    if any(k < 1 for k in seed_counts) or args.epochs < 1 or args.repeats < 1:
        parser.error("seed counts, --epochs and --repeats must be >= 1")
    extra = budget_overrides(args.budget, args.epochs) + args.override
    env = dict(os.environ)
    records: list[dict[str, Any]] = []
    for repeat in range(args.repeats):  # interleaved, so that a slow spell hits every command
        for task in tasks:
            jobs: list[tuple[str | None, int]] = [(None, 1)]
            jobs += [(name, k) for k in seed_counts for name in launchers]
            for launcher, k in jobs:
                print(f"[{repeat + 1}/{args.repeats}] {task} {launcher or 'single'} "
                      f"{k} seed(s) ...", end=" ", flush=True)
                record = run_command(task, launcher, k, extra, args.n_jobs, env, args.grid)
                record["repeat"] = repeat
                records.append(record)
                print(f"{record['wall']:.2f} s", flush=True)
    budget = "solve (shipped settings, early stopping)" if args.budget == "solve" else (
        f"fixed ({' '.join(extra)})")
    runs = f"medians of {args.repeats} runs" if args.repeats > 1 else "one run each"
    grid = "" if args.grid is None else f"each seed count times {args.grid}; "
    print(f"\nwhole-command wall seconds, {runs}; {grid}"
          f"budget {budget}; joblib n_jobs={args.n_jobs}; "
          f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}; {os.cpu_count()} CPUs")
    for task in tasks:
        print_task(records, task, launchers, seed_counts)
    if args.out is not None:
        meta = {"argv": sys.argv, "budget": args.budget, "epochs": args.epochs, "grid": args.grid,
                "repeats": args.repeats, "n_jobs": args.n_jobs, "cpus": os.cpu_count(),
                "python": platform.python_version(), "platform": platform.platform(),
                "omp_num_threads": env.get("OMP_NUM_THREADS")}
        args.out.write_text(json.dumps({"meta": meta, "records": records}, indent=2) + "\n")
        print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
