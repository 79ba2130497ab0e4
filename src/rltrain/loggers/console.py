"""The console logger: a live progress bar (or, off a terminal, a progress line now and then),
one line per epoch, and a summary table at the end. It is the run's own: always on."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
)
from rich.table import Table

from rltrain.loggers.base import Logger


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(
        value, spec)


def _ret(value: Any) -> str:
    """A return in at most 8 characters: -99999.9, or with a unit: -1.2M."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) < 1e5:
        return f"{value:.1f}"
    return ("-" if value < 0 else "") + _count(abs(value))


def _count(n: float) -> str:
    """6144 -> '6.1k', 10_000_000 -> '10.0M': at most 6 characters."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def _duration(seconds: float | None) -> str:
    """'1:52', '1:02:03', '5d': at most 8 characters."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h >= 100:
        return f"{h / 24:.0f}d"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


#: the width of an epoch line off a terminal (a log file, a pipe); on a terminal, its width
LINE_WIDTH = 120


class ConsoleLogger(Logger):
    """A live progress bar during each epoch and its test step (terminals), or a progress
    line at most every ``progress_interval_s`` seconds when stdout is not a terminal (Slurm
    logs, ``| tee``); one line per epoch, fitted to the terminal (120 characters off one); a
    final summary table.

    The run's ETA is the steps left at the learning rate (steps over the time spent
    collecting and updating, in this process) plus the test steps left at the time a test
    step takes here (the epoch's end, saving included): a run whose greedy test games take
    minutes says so before they are over, and a long test step shows its own progress."""

    def __init__(self, max_epochs: int, progress_bar: bool = True, run_dir: Path | None = None,
                 console: Console | None = None, quiet: bool = False,
                 progress_interval_s: float = 30.0,
                 clock: Callable[[], float] = time.perf_counter,
                 stats: Sequence[tuple[str, str]] = (), started: float | None = None) -> None:
        """:param stats: the update stats the epoch line shows, as (name, short label), in
            order, as many as fit (the algorithm's registry entry says which); the first two
            are its key stats, kept before the train return and the rate.
        :param started: when the command (a sweep's job: the job) started, on ``clock``'s
            scale: the summary gives the time since then as well, start-up included."""
        self.started = started
        self.console = console or Console(highlight=False)
        self.stats = tuple(stats)
        self.clock = clock
        self.run_dir = run_dir
        self.max_epochs = max_epochs
        self.quiet = quiet
        self.progress_bar = progress_bar and self.console.is_terminal and not quiet
        self.progress_interval_s = progress_interval_s
        self._progress: Progress | None = None
        self._task: Any = None
        self._epoch, self._epoch_steps = 0, 0
        self._epoch_start = self._last_line = 0.0
        #: the epoch's steps done in this process, and before (a resumed epoch's)
        self._done = self._done_before = 0
        # the whole run, in this process: the learning rate and the run's ETA
        self._planned = 0
        self._env_step = 0
        #: learning steps (not the warm-up's) and the time spent on them, in this process
        self._run_steps = 0
        self._train_time = 0.0
        #: the random warm-up's size while it runs (0 once the first epoch starts)
        self._warmup = 0
        self._label = ""
        #: whether an epoch's training steps are in flight (their time is learning time)
        self._learning = False
        #: the test step in flight: when it began, its episodes asked and counted, its steps
        self._testing: float | None = None
        self._last_update = 0.0
        self._test_episodes = self._tested = self._test_steps = 0
        #: how long each epoch's end took here (its test step, saving, the next start)
        self._test_times: list[float] = []
        self._epoch_end: float | None = None

    def start_run(self, plan: dict[str, Any]) -> None:
        self._planned = int(plan.get("planned_steps", plan.get("planned_env_steps")) or 0)
        self._env_step = int(plan.get("step", plan.get("env_step")) or 0)
        super().start_run(plan)

    # ------------------------------------------------------------------ rates and ETAs
    def _learning_time(self) -> float:
        """Seconds spent collecting and updating in this process, the epoch in flight's
        included."""
        running = self.clock() - self._epoch_start if self._learning else 0.0
        return self._train_time + running

    def _rate(self) -> float | None:
        elapsed = self._learning_time()
        return self._run_steps / elapsed if elapsed > 0 and self._run_steps else None

    def _test_left(self) -> float | None:
        """Seconds left of the test step in flight: its episodes so far say how long the
        others take; before the first ends, what a test step took here before."""
        if self._testing is None:
            return None
        elapsed = self.clock() - self._testing
        if self._tested:
            return elapsed * max(self._test_episodes - self._tested, 0) / self._tested
        if self._test_times:
            return max(self._mean_test() - elapsed, 0.0)
        return None

    def _mean_test(self) -> float:
        return sum(self._test_times) / len(self._test_times)

    def _run_eta(self, tested: int | None = None) -> float | None:
        """The learning steps left at the learning rate, plus the test steps left: those of
        the epochs after ``tested`` (the epoch whose test is over; by default the one in
        flight, whose test is still to come or running) at what one took here."""
        rate = self._rate()
        if not self._planned or not rate:
            return None
        eta = max(self._planned - self._env_step, 0) / rate
        if tested is None:
            tested = max(self._epoch - 1, 0)
            if self._testing is not None:  # the test in flight: its own estimate
                left = self._test_left()
                tested += 1
                if left is not None:
                    eta += left
        per_test = self._mean_test() if self._test_times else None
        if per_test is None and self._testing is not None:
            left = self._test_left()
            per_test = None if left is None else self.clock() - self._testing + left
        if per_test is not None:
            eta += max(self.max_epochs - tested, 0) * per_test
        return eta

    # ------------------------------------------------------------------ phases
    def start_warmup(self, num_steps: int) -> None:
        """The random warm-up: a line saying so, then a bar (terminals) or progress lines.
        Its steps count towards where the run stands, not towards the rate: the run's ETA is
        the steps left at the learning rate (random steps are many times faster)."""
        self._warmup = num_steps
        if not self.quiet:
            self.console.print(f"warm-up: {num_steps:,} env steps of random actions before "
                               "learning starts", soft_wrap=True)
        self._begin(num_steps, 0, "warm-up")

    def start_epoch(self, epoch: int, num_steps: int, done: int = 0) -> None:
        self._stop_bar()
        self._warmup = 0
        if self._epoch_end is not None and self._test_times:  # saving after the epoch's line
            self._test_times[-1] += self.clock() - self._epoch_end
        self._epoch_end = self._testing = None
        self._epoch = epoch
        self._begin(num_steps, done, f"epoch {epoch}/{self.max_epochs}")
        self._learning = True

    def _stop_learning(self) -> None:
        """The epoch's training steps are over: their time is learning time."""
        if self._learning:
            self._train_time += self.clock() - self._epoch_start
            self._learning = False

    def _stop_bar(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _begin(self, num_steps: int, done: int, label: str) -> None:
        now = self.clock()
        # an epoch resumed mid-way: its bar starts where it stood
        self._epoch_steps, self._label = max(num_steps, done), label
        self._epoch_start, self._last_line, self._done, self._done_before = now, now, 0, done
        if not self.progress_bar:
            return
        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sps]} steps/s"),
            TextColumn("epoch eta {task.fields[eta]}"),
            TextColumn("run eta {task.fields[run_eta]}"),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task("train", total=self._epoch_steps, sps="-",
                                             eta="-", run_eta="-")
        self._progress.update(self._task, completed=done)
        self._progress.start()

    def advance(self, num_steps: int) -> None:
        self._done += num_steps
        if not self._warmup:
            self._run_steps += num_steps
        self._env_step += num_steps
        # an epoch of whole collection steps of episodes runs past its least size: the bar
        # and the ETA count on from there, never below zero
        done = self._done_before + self._done
        self._epoch_steps = max(self._epoch_steps, done)
        now = self.clock()
        elapsed = now - self._epoch_start
        sps = self._done / elapsed if elapsed > 0 and self._done else None
        left = (self._epoch_steps - done) / sps if sps else None
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=self._epoch_steps,
                                  sps="-" if sps is None else f"{sps:,.0f}",
                                  eta=_duration(left), run_eta=_duration(self._run_eta()))
        elif self._due(now):
            self.console.print(
                f"  {self._label}: {done:,}/{self._epoch_steps:,} "
                f"steps, {_fmt(sps, ',.0f')} steps/s, epoch eta {_duration(left)}, "
                f"run eta {_duration(self._run_eta())}", soft_wrap=True)

    def _due(self, now: float) -> bool:
        """Whether a progress line is due (off a terminal, one per ``progress_interval_s``)."""
        if (self._progress is not None or self.quiet or self.console.is_terminal
                or now - self._last_line < self.progress_interval_s):
            return False
        self._last_line = now
        return True

    def start_test(self, epoch: int, num_episodes: int) -> None:
        """The epoch's test step: its time is the test's share of the ETA, not learning."""
        self._stop_learning()
        self._stop_bar()
        now = self.clock()
        self._testing, self._test_episodes, self._tested, self._test_steps = (
            now, num_episodes, 0, 0)
        label = f"epoch {epoch}/{self.max_epochs} test"
        if self.progress_bar:
            self._progress = Progress(
                TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("episodes,"),
                TextColumn("{task.fields[steps]} steps, test eta {task.fields[eta]}, run eta "
                           "{task.fields[run_eta]}"),
                console=self.console, transient=True)
            self._task = self._progress.add_task("test", total=num_episodes, steps="0",
                                                 eta="-", run_eta=_duration(self._run_eta()))
            self._progress.start()
        elif self._due(now):
            self.console.print(f"  epoch {epoch}/{self.max_epochs}: testing ({num_episodes} "
                               "episodes)", soft_wrap=True)

    def test_progress(self, steps: int, episodes: int) -> None:
        counted = episodes != self._tested
        self._test_steps, self._tested = steps, episodes
        if self._progress is not None:
            now = self.clock()
            if counted or now - self._last_update >= 0.1:  # the bar redraws 10 times a second
                self._last_update = now
                self._progress.update(self._task, completed=episodes, steps=f"{steps:,}",
                                      eta=_duration(self._test_left()),
                                      run_eta=_duration(self._run_eta()))
        elif self._due(self.clock()):
            self.console.print(
                f"  epoch {self._epoch}/{self.max_epochs}: testing, {episodes}/"
                f"{self._test_episodes} episodes, {steps:,} steps, test eta "
                f"{_duration(self._test_left())}, run eta {_duration(self._run_eta())}",
                soft_wrap=True)

    # ------------------------------------------------------------------ the epoch's line
    def epoch_line(self, r: dict[str, Any], width: int = LINE_WIDTH) -> str:
        """The epoch's one line, at most ``width`` characters: where the run stands, the test
        return (and how many test episodes were cut), the best, the run's ETA, the
        algorithm's stats, the train return and the real rate (env steps over the epoch's
        wall time, test and saving included; with the test's share when it took a quarter
        of it or more). When the line is too wide the fields that matter least go first: a
        train return no episode gave, the algorithm's stats past its first two, then the rate,
        the train return, its key stats, the best and the ETA; the epoch, the steps and the
        test return always stay."""
        sps = r.get("steps_per_s")
        if sps is None:  # a record from elsewhere: this logger's own count
            elapsed = self.clock() - self._epoch_start
            sps = self._done / elapsed if elapsed > 0 and self._done else None
        budget = f"/{_count(self._planned)}" if self._planned else ""
        cut = r.get("test/n_cut") or 0
        testing = r.get("timing/test") or 0.0
        wall = (r.get("timing/collect") or 0.0) + (r.get("timing/update") or 0.0) + testing
        share = (f" ({testing / wall:.0%} test)" if wall > 0 and testing >= wall / 4 and sps
                 else "")
        # (field, rank): the lower the rank, the sooner it goes when the line is too wide
        main = [
            (f"epoch {r['epoch']:>3}/{self.max_epochs}", 9),
            (f"{_count(r[self.step_key]):>6}{budget} "
             + ("steps" if self.step_key == "env_step" else "updates"), 9),
            # no training episode ended: nothing to say, the first to go
            (f"train {_ret(r['train/return_mean'])}",
             3 if r.get("train/return_mean") is not None else 0),
            (f"test {_ret(r['test/return_mean'])}±{_ret(r['test/return_std'])}"
             + (f" ({cut} cut)" if cut else ""), 9),
            (f"best {_ret(r['best/score'])} ({r['best/epoch']})", 6),
            (f"{_count(sps) if sps else '-'} sps{share}", 2),
            (f"eta {_duration(self._run_eta(tested=int(r['epoch'])))}", 7),
        ]
        stats = [(f"{label} {_fmt(r[f'update/{key}'], '.3g')}", 5 - i if i < 2 else 1 - i / 100)
                 for i, (key, label) in enumerate(self.stats)
                 if r.get(f"update/{key}") is not None]

        def text() -> str:
            line = "  ".join(t for t, _ in main)
            return line + (" | " + " ".join(t for t, _ in stats) if stats else "")

        while len(text()) > width:
            ranks = [k for _, k in main + stats if k < 9]
            if not ranks:
                break
            lowest = min(ranks)
            main = [(t, k) for t, k in main if k != lowest]
            stats = [(t, k) for t, k in stats if k != lowest]
        return text()

    def _width(self) -> int:
        """A terminal's width, or LINE_WIDTH off a terminal (log files keep whole lines)."""
        return self.console.width if self.console.is_terminal else LINE_WIDTH

    def log_epoch(self, r: dict[str, Any]) -> None:
        self._stop_learning()  # an epoch ended by a test in training has no test step
        self._stop_bar()
        now = self.clock()
        if self._testing is not None:  # the test step (and the best policy's saving)
            self._test_times.append(now - self._testing)
        self._testing, self._epoch_end = None, now
        if not self.quiet:
            self.console.print(self.epoch_line(r, self._width()), soft_wrap=True)

    def _command_time(self) -> str:
        """The command's (or sweep job's) time so far, start-up (imports, building the envs
        and networks) included: what a user waited, where training time is what it cost."""
        if self.started is None:
            return ""
        return f"; {self.clock() - self.started:.1f}s in all, start-up included"

    def finish(self, info: dict[str, Any]) -> None:
        self._stop_bar()
        if self.quiet:  # warnings and errors only, and where the run went
            if self.run_dir is not None and self.run_dir.is_dir():
                self.console.print(f"run directory: {self.run_dir}", soft_wrap=True)
            return
        table = Table(title="rltrain summary", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        status = info.get("status") or ("interrupted" if info["interrupted"] else "completed")
        if status == "completed":
            status = "solved" if info["solved"] else "not solved"
        elif status == "pruned":
            status = "pruned by the tuning study's pruner"
        rows = [
            ("result", status + (f": {info['error']}" if info.get("error") else "")),
            ("best test return", f"{_fmt(info['best_score'], '.2f')} (epoch {info['best_epoch']})"),
            ("reward threshold", _fmt(info["reward_threshold"], ".1f")),
            ("epochs", str(info["epochs"])),
            ("env steps", f"{info['env_step']:,}"),
            ("gradient steps", f"{info['gradient_step']:,}"),
            ("wall time", f"{info['wall_time']:.1f}s training (collect "
                          f"{info['timing/collect']:.1f}s, update {info['timing/update']:.1f}s, "
                          f"test {info['timing/test']:.1f}s, save {info['timing/save']:.1f}s)"
                          + self._command_time()),
        ]
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
        if self.run_dir is not None and self.run_dir.is_dir():  # not one removed meanwhile
            # on its own line, never cut or folded: it is what a user copies
            self.console.print(f"run directory: {self.run_dir}", soft_wrap=True)
