"""What one turn of the members of a batched sweep's batch costs: the hand-over between
threads and the swaps of the process-wide state each member keeps its own copy of
(rltrain.sweeps.batch_scheduler, rltrain.common.stacking).

Members that do nothing but hand work over, with a batch that does nothing: microseconds per
member per turn, with no swaps, with the RNGs only, and with every swap the batched launcher
uses. An algorithm whose members meet once per gradient step pays this once per step and
seed. (``--members``: the number of members, named as the docs name them.)

    .venv/bin/python scripts/bench_members.py [--members 10] [--turns 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from rltrain.common import stacking
from rltrain.sweeps.batch_scheduler import Member, RNGs, Scheduler, Swap
from rltrain.sweeps.batched import _Console, _HydraJob, _Logging


class _Nothing(stacking.Stackable):
    def batch_key(self) -> int:
        return 0

    @classmethod
    def run_batch(cls, works: Sequence[Any]) -> list[Any]:
        return [None] * len(works)


def per_turn_us(swaps: list[Swap], n_members: int, turns: int) -> float:
    def meets() -> None:
        for _ in range(turns):
            stacking.stack(_Nothing())

    scheduler = Scheduler([Member(str(i), meets, swaps) for i in range(n_members)])
    start = time.perf_counter()
    scheduler.run()
    return (time.perf_counter() - start) / (n_members * turns) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases: dict[str, list[Swap]] = {
        "no swaps": [],
        "RNGs": [RNGs()],
        "launcher's swaps": [RNGs(), _Logging(), _HydraJob(), _Console()],
    }
    for name, swaps in cases.items():
        runs = [per_turn_us(swaps, args.members, args.turns) for _ in range(args.repeats)]
        print(f"{name:18s} {statistics.median(runs):7.1f} us per member per turn "
              f"(runs: {', '.join(f'{r:.1f}' for r in runs)})")


if __name__ == "__main__":
    main()
