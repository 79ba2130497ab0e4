"""Loggers: console (rich), epochs.jsonl + summary.json, TensorBoard.

A logger receives flat records (``{"test/return_mean": 475.0, ...}``) and writes
them; nothing else in rltrain writes log files.
"""

from __future__ import annotations

import contextlib
import json
import logging
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

from rltrain.errors import SaveError
from rltrain.stats import unflatten

log = logging.getLogger("rltrain")


class Logger:
    """The logger protocol; every hook is optional."""

    #: the record's count that curves are plotted against: ``env_step``, or ``gradient_step``
    #: for an offline run (set from the plan by :meth:`start_run`)
    step_key = "env_step"

    def start_run(self, plan: dict[str, Any]) -> None:
        """Training begins: ``plan`` has ``step_key`` (what an epoch's steps count: env_step
        or, offline, gradient_step), ``planned_steps`` (the run's budget in those, 0 if not
        known), ``step`` (where it starts: 0, or a resumed run's count), ``max_epochs``, and
        the env-step figures ``planned_env_steps`` and ``env_step``. Subclasses that override
        this call it."""
        self.step_key = str(plan.get("step_key") or "env_step")

    def start_epoch(self, epoch: int, num_steps: int, done: int = 0) -> None:
        """An epoch of ``num_steps`` steps begins (``done`` of them before a resume)."""

    def advance(self, num_steps: int) -> None:
        """``num_steps`` more steps of the current epoch are done."""

    def start_test(self, epoch: int, num_episodes: int) -> None:
        """The epoch's test step begins."""

    def log_epoch(self, record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` is its flattened EpochStats."""

    def finish(self, info: dict[str, Any]) -> None:
        """The run ended; ``info`` is the flattened InfoStats plus run facts."""


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The epoch records of ``epochs.jsonl`` and what was wrong with the file: a torn last
    line (a write cut short by a full disk or a kill) is dropped and reported, not fatal."""
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("epoch"), int):
                raise ValueError("no epoch number")
        except ValueError:
            last = i == len(lines) - 1
            problems.append(f"{path.name} line {i + 1} is "
                            f"{'a torn last record' if last else 'not a valid record'}: dropped")
            continue
        rows.append(row)
    return rows, problems


class JsonlLogger(Logger):
    """``epochs.jsonl`` (one nested JSON object per epoch, flushed at once) and
    ``summary.json`` at the end."""

    def __init__(self, run_dir: Path, keep_epochs: int | None = None,
                 extra_summary: dict[str, Any] | None = None) -> None:
        """:param keep_epochs: when resuming, the epochs already done: later records (logged
            after the checkpoint) and a torn last line are dropped, so the file continues
            without gap or repeat."""
        self.run_dir = run_dir
        self.extra_summary = extra_summary if extra_summary is not None else {}
        self.path = run_dir / "epochs.jsonl"
        try:
            if keep_epochs is not None and self.path.exists():
                rows, problems = read_records(self.path)
                for problem in problems:
                    log.warning(problem)
                kept = [json.dumps(r) + "\n" for r in rows if r["epoch"] <= keep_epochs]
                tmp = self.path.with_name(".epochs.jsonl.tmp")
                tmp.write_text("".join(kept), encoding="utf-8")
                tmp.replace(self.path)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise SaveError(f"could not write {self.path}: {e.strerror or e}") from None

    def log_epoch(self, record: dict[str, Any]) -> None:
        row = unflatten({k: _json_safe(v) for k, v in record.items()})
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as e:
            raise SaveError(f"could not write the record of epoch {record['epoch']} to "
                            f"{self.path}: {e.strerror or e}") from None

    def finish(self, info: dict[str, Any]) -> None:
        # a failed flush: the record it held was reported when its write failed
        with contextlib.suppress(OSError):
            self._file.close()
        summary = unflatten({k: _json_safe(v) for k, v in info.items()})
        summary.update(self.extra_summary)
        tmp = self.run_dir / "summary.json.tmp"
        try:
            tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self.run_dir / "summary.json")
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.warning(f"could not write {self.run_dir / 'summary.json'}: {e.strerror or e}")


def _hparams(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as TensorBoard hyperparameters: numbers, strings and booleans."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_hparams(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


class TensorBoardLogger(Logger):
    """Every numeric scalar of the epoch record, at ``env_step``, under ``tb/``; the run's
    config as text and as hyperparameters (TensorBoard's HParams tab, whose metrics are the
    best and the last test return)."""

    #: the scalars the HParams tab shows for each run (their last values)
    METRICS = ("best/score", "test/return_mean")

    def __init__(self, log_dir: Path, purge_step: int | None = None,
                 config: dict[str, Any] | None = None) -> None:
        """:param purge_step: when resuming, events at this step and later (logged after the
            checkpoint) are discarded by TensorBoard, so curves continue without repeats."""
        # imported here: tensorboard is slow to import and not needed to start
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        self._end = None
        if config is not None:
            import yaml
            from torch.utils.tensorboard.summary import hparams

            text = yaml.safe_dump(config, sort_keys=False)
            self.writer.add_text("config", "```yaml\n" + text + "```", 0)
            exp, ssi, self._end = hparams(_hparams(config), dict.fromkeys(self.METRICS, 0.0))
            self.writer.file_writer.add_summary(exp)
            self.writer.file_writer.add_summary(ssi)
            self.writer.flush()

    def log_epoch(self, record: dict[str, Any]) -> None:
        step = int(record[self.step_key])
        for key, value in record.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and key != self.step_key and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, info: dict[str, Any]) -> None:
        if self._end is not None:
            self.writer.file_writer.add_summary(self._end)
        self.writer.close()


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
                 stats: Sequence[tuple[str, str]] = ()) -> None:
        """:param stats: the update stats the epoch line shows, as (name, short label), in
            order, as many as fit (the algorithm's registry entry says which)."""
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

    def start_epoch(self, epoch: int, num_steps: int, done: int = 0) -> None:
        now = self.clock()
        if self._run_start is None:
            self._run_start = now
        self._epoch, self._epoch_steps = epoch, num_steps
        self._epoch_start, self._last_line, self._done = now, now, 0
        if not self.progress_bar:
            return
        self._progress = Progress(
            TextColumn(f"epoch {epoch}/{self.max_epochs}"),
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
                f"  epoch {self._epoch}/{self.max_epochs}: {self._done:,}/{self._epoch_steps:,} "
                f"steps, {_fmt(sps, ',.0f')} steps/s, epoch eta {_duration(left)}, "
                f"run eta {_duration(self._run_eta())}", soft_wrap=True)

    def start_test(self, epoch: int, num_episodes: int) -> None:
        now = self.clock()
        if (self._progress is None and not self.quiet and not self.console.is_terminal
                and now - self._last_line >= self.progress_interval_s):
            self._last_line = now
            self.console.print(f"  epoch {epoch}/{self.max_epochs}: testing ({num_episodes} "
                               "episodes)", soft_wrap=True)

    def epoch_line(self, r: dict[str, Any]) -> str:
        """The epoch's one line: the real rate (env steps over the epoch's wall time, test
        and saving included), where the run stands, its ETA, and the losses that fit."""
        sps = r.get("steps_per_s")
        if sps is None:  # a record from elsewhere: this logger's own count
            elapsed = self.clock() - self._epoch_start
            sps = self._done / elapsed if elapsed > 0 and self._done else None
        budget = f"/{_count(self._planned)}" if self._planned else ""
        line = "  ".join((
            f"epoch {r['epoch']:>3}/{self.max_epochs}",
            f"{_count(r[self.step_key]):>6}{budget} "
            + ("steps" if self.step_key == "env_step" else "updates"),
            f"train {_ret(r['train/return_mean'])}",
            f"test {_ret(r['test/return_mean'])}±{_ret(r['test/return_std'])}",
            f"best {_ret(r['best/score'])} ({r['best/epoch']})",
            f"{_count(sps) if sps else '-'} sps",
            f"eta {_duration(self._run_eta())}",
        ))
        losses = ""
        for key, label in self.stats:
            value = r.get(f"update/{key}")
            if value is None:
                continue
            more = f"{losses} {label} {_fmt(value, '.3g')}"
            if len(line) + 2 + len(more) > LINE_WIDTH:
                break
            losses = more
        if losses:
            line += " |" + losses
        return line

    def log_epoch(self, r: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if not self.quiet:
            self.console.print(self.epoch_line(r), soft_wrap=True)

    def finish(self, info: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.quiet:
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
            ("wall time", f"{info['wall_time']:.1f}s (collect {info['timing/collect']:.1f}s, "
                          f"update {info['timing/update']:.1f}s, test {info['timing/test']:.1f}s, "
                          f"save {info['timing/save']:.1f}s)"),
        ]
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
        if self.run_dir is not None:
            # on its own line, never cut or folded: it is what a user copies
            self.console.print(f"run directory: {self.run_dir}", soft_wrap=True)
