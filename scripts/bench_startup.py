"""Start-up against its floor: whole-command wall and CPU seconds of ``python -c 'import torch'``,
``rltrain --help`` and ``rltrain experiment=smoke``, medians of several runs, and how far the
smoke run is from "import torch plus its own training" (the run's ``wall_time`` in
summary.json: its epochs, tests and checkpoints).

Each command runs in a fresh process, one after another; CPU is the child's user + system
time. ``--importtime`` also runs the smoke command once under ``python -X importtime`` and
prints the packages whose import took longest (cumulative, top-level packages).

    .venv/bin/python scripts/bench_startup.py [--runs 7] [--importtime] [--src OTHER/src]

``--src`` runs another checkout's rltrain (its ``src`` first on PYTHONPATH) with this
environment's packages: a before/after comparison on one machine. Both trees should hold
their bytecode (``python -m compileall -q src``), as an installed package does.

Run it on an idle machine: on a shared 2-core VM the figures move by 10-20% from run to run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def import_report(work: Path, env: dict[str, str], top: int = 15) -> list[tuple[str, float]]:
    """Import seconds of one smoke run (-X importtime) by top-level package: each module's
    own time, so that torch imported from inside rltrain counts as torch's."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "rltrain.commands.train",
                          "experiment=smoke", f"hydra.run.dir={work / 'imp'}", "-q"],
                         cwd=work, env=env, capture_output=True, text=True, check=True)
    own: collections.Counter[str] = collections.Counter()
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            own[m.group(2).split(".")[0]] += int(m.group(1)) / 1e6
    return [("(all)", sum(own.values())), *own.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--src", type=Path, help="another checkout's src folder to run")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(args.src.resolve()), env.get("PYTHONPATH", "")) if p)
    env_threads = os.environ.get("OMP_NUM_THREADS", "unset")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        commands = {
            "import torch": [sys.executable, "-c", "import torch"],
            "rltrain --help": [str(BIN / "rltrain"), "--help"],
            "rltrain experiment=smoke": None,
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        training: list[float] = []
        for i in range(args.runs):  # interleaved, so that a slow spell hits every command
            for name, argv in commands.items():
                if argv is None:
                    run_dir = work / f"smoke{i}"
                    argv = [str(BIN / "rltrain"), "experiment=smoke", f"hydra.run.dir={run_dir}",
                            "-q"]
                    results[name].append(timed(argv, work, env))
                    training.append(json.loads((run_dir / "summary.json").read_text())[
                        "wall_time"])
                else:
                    results[name].append(timed(argv, work, env))
        print(f"{args.runs} runs each, medians (OMP_NUM_THREADS={env_threads}; rltrain from "
              f"{args.src or 'this checkout'})")
        print(f"{'command':28s} {'wall s':>8s} {'CPU s':>8s}")
        medians = {}
        for name, rows in results.items():
            wall = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            medians[name] = (wall, cpu)
            print(f"{name:28s} {wall:8.2f} {cpu:8.2f}")
        train = statistics.median(training)
        torch_wall, torch_cpu = medians["import torch"]
        smoke_wall, smoke_cpu = medians["rltrain experiment=smoke"]
        print(f"smoke's own training (summary wall_time): {train:.2f} s")
        print(f"smoke / (import torch + training): wall {smoke_wall / (torch_wall + train):.2f}x, "
              f"CPU {smoke_cpu / (torch_cpu + train):.2f}x  (goal 1.1x)")
        print(f"smoke - import torch - training: {smoke_wall - torch_wall - train:.2f} s wall")
        if args.importtime:
            print("\nsmoke run, -X importtime (inflates), seconds by top-level package:")
            for package, seconds in import_report(work, env):
                print(f"  {package:28s} {seconds:6.3f}")


if __name__ == "__main__":
    main()
