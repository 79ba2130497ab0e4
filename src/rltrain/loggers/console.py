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
    TimeRemainingColumn,
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


#: the width an epoch line never exceeds
LINE_WIDTH = 120


class ConsoleLogger(Logger):
    """A live progress bar during each epoch (terminals), or a progress line at most every
    ``progress_interval_s`` seconds when stdout is not a terminal (Slurm logs, ``| tee``);
    one line per epoch, at most 120 characters; a final summary table."""

    def __init__(self, max_epochs: int, progress_bar: bool = True, run_dir: Path | None = None,
                 console: Console | None = None, quiet: bool = False,
                 progress_interval_s: float = 30.0,
                 clock: Callable[[], float] = time.perf_counter,
                 stats: Sequence[tuple[str, str]] = (), started: float | None = None) -> None:
        """:param stats: the update stats the epoch line shows, as (name, short label), in
            order, as many as fit (the algorithm's registry entry says which).
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
        self._done = 0
        # the whole run, in this process: for the real rate and the run's ETA
        self._planned = 0
        self._run_start: float | None = None
        self._run_steps = 0
        self._env_step = 0
        #: the random warm-up's size while it runs (0 once the first epoch starts)
        self._warmup = 0
        self._label = ""

    def start_run(self, plan: dict[str, Any]) -> None:
        self._planned = int(plan.get("planned_steps", plan.get("planned_env_steps")) or 0)
        self._env_step = int(plan.get("step", plan.get("env_step")) or 0)
        super().start_run(plan)

    def _rate(self) -> float | None:
        if self._run_start is None:
            return None
        elapsed = self.clock() - self._run_start
        return self._run_steps / elapsed if elapsed > 0 and self._run_steps else None

    def _run_eta(self) -> float | None:
        rate = self._rate()
        if not self._planned or not rate:
            return None
        return max(self._planned - self._env_step, 0) / rate

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
        if self._progress is not None:  # the warm-up's bar
            self._progress.stop()
            self._progress = None
        self._warmup = 0
        if self._run_steps == 0:  # the rate and ETA count learning steps only
            self._run_start = None
        self._epoch = epoch
        self._begin(num_steps, done, f"epoch {epoch}/{self.max_epochs}")

    def _begin(self, num_steps: int, done: int, label: str) -> None:
        now = self.clock()
        if self._run_start is None:
            self._run_start = now
        self._epoch_steps, self._label = num_steps, label
        self._epoch_start, self._last_line, self._done = now, now, 0
        if not self.progress_bar:
            return
        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sps]} steps/s"),
            TextColumn("epoch"),
            TimeRemainingColumn(),
            TextColumn("run eta {task.fields[run_eta]}"),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task("train", total=num_steps, sps="-", run_eta="-")
        self._progress.update(self._task, completed=done)
        self._progress.start()

    def advance(self, num_steps: int) -> None:
        self._done += num_steps
        if not self._warmup:
            self._run_steps += num_steps
        self._env_step += num_steps
        now = self.clock()
        elapsed = now - self._epoch_start
        sps = self._done / elapsed if elapsed > 0 else None
        if self._progress is not None:
            self._progress.update(self._task, advance=num_steps,
                                  sps="-" if sps is None else f"{sps:,.0f}",
                                  run_eta=_duration(self._run_eta()))
        elif (not self.quiet and not self.console.is_terminal
              and now - self._last_line >= self.progress_interval_s):
            self._last_line = now
            left = (self._epoch_steps - self._done) / sps if sps else None
            self.console.print(
                f"  {self._label}: {self._done:,}/{self._epoch_steps:,} "
                f"steps, {_fmt(sps, ',.0f')} steps/s, epoch eta {_duration(left)}, "
                f"run eta {_duration(self._run_eta())}", soft_wrap=True)

    def start_test(self, epoch: int, num_episodes: int) -> None:
        now = self.clock()
        if (self._progress is None and not self.quiet and not self.console.is_terminal
                and now - self._last_line >= self.progress_interval_s):
            self._last_line = now
            self.console.print(f"  epoch {epoch}/{self.max_epochs}: testing ({num_episodes} "
                               "episodes)", soft_wrap=True)

    def epoch_line(self, r: dict[str, Any], width: int = LINE_WIDTH) -> str:
        """The epoch's one line, at most ``width`` characters: the real rate (env steps over
        the epoch's wall time, test and saving included), where the run stands, its ETA, and
        the losses that fit. On a narrow terminal the fields that matter least go first:
        the losses, then the rate, the train return, the ETA and the best score; the epoch,
        the steps and the test return always stay."""
        sps = r.get("steps_per_s")
        if sps is None:  # a record from elsewhere: this logger's own count
            elapsed = self.clock() - self._epoch_start
            sps = self._done / elapsed if elapsed > 0 and self._done else None
        budget = f"/{_count(self._planned)}" if self._planned else ""
        # (field, rank): the lower the rank, the sooner it goes when the line is too wide
        fields = [
            (f"epoch {r['epoch']:>3}/{self.max_epochs}", 9),
            (f"{_count(r[self.step_key]):>6}{budget} "
             + ("steps" if self.step_key == "env_step" else "updates"), 8),
            (f"train {_ret(r['train/return_mean'])}", 2),
            (f"test {_ret(r['test/return_mean'])}±{_ret(r['test/return_std'])}", 9),
            (f"best {_ret(r['best/score'])} ({r['best/epoch']})", 4),
            (f"{_count(sps) if sps else '-'} sps", 1),
            (f"eta {_duration(self._run_eta())}", 3),
        ]
        for rank in sorted({rank for _, rank in fields}):
            if len("  ".join(text for text, _ in fields)) <= width:
                break
            fields = [(text, k) for text, k in fields if k != rank or k >= 8]
        line = "  ".join(text for text, _ in fields)
        losses = ""
        for key, label in self.stats:
            value = r.get(f"update/{key}")
            if value is None:
                continue
            more = f"{losses} {label} {_fmt(value, '.3g')}"
            if len(line) + 2 + len(more) > width:
                break
            losses = more
        if losses:
            line += " |" + losses
        return line

    def _width(self) -> int:
        """A terminal's width (at most LINE_WIDTH), or LINE_WIDTH off a terminal (log files
        keep whole lines)."""
        if not self.console.is_terminal:
            return LINE_WIDTH
        return min(self.console.width, LINE_WIDTH)

    def log_epoch(self, r: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if not self.quiet:
            self.console.print(self.epoch_line(r, self._width()), soft_wrap=True)

    def _command_time(self) -> str:
        """The command's (or sweep job's) time so far, start-up (imports, building the envs
        and networks) included: what a user waited, where training time is what it cost."""
        if self.started is None:
            return ""
        return f"; {self.clock() - self.started:.1f}s in all, start-up included"

    def finish(self, info: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
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
