"""Loggers: console (rich), epochs.jsonl + summary.json, TensorBoard.

A logger receives flat records (``{"test/return_mean": 475.0, ...}``) and writes
them; nothing else in rltrain writes log files.
"""

from __future__ import annotations

import json
import math
import time
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

from rltrain.stats import unflatten


class Logger:
    """The logger protocol; every hook is optional."""

    def start_epoch(self, epoch: int, num_steps: int) -> None:
        """An epoch of ``num_steps`` steps begins."""

    def advance(self, num_steps: int) -> None:
        """``num_steps`` more steps of the current epoch are done."""

    def log_epoch(self, record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` is its flattened EpochStats."""

    def finish(self, info: dict[str, Any]) -> None:
        """The run ended; ``info`` is the flattened InfoStats plus run facts."""


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLogger(Logger):
    """``epochs.jsonl`` (one nested JSON object per epoch, flushed at once) and
    ``summary.json`` at the end."""

    def __init__(self, run_dir: Path, keep_epochs: int | None = None,
                 extra_summary: dict[str, Any] | None = None) -> None:
        """:param keep_epochs: when resuming, the epochs already done: later records (logged
            after the checkpoint) are dropped, so the file continues without gap or repeat."""
        self.run_dir = run_dir
        self.extra_summary = extra_summary or {}
        path = run_dir / "epochs.jsonl"
        if keep_epochs is not None and path.exists():
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [ln for ln in lines if ln.strip() and json.loads(ln)["epoch"] <= keep_epochs]
            tmp = path.with_name(".epochs.jsonl.tmp")
            tmp.write_text("".join(kept), encoding="utf-8")
            tmp.replace(path)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def log_epoch(self, record: dict[str, Any]) -> None:
        row = unflatten({k: _json_safe(v) for k, v in record.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def finish(self, info: dict[str, Any]) -> None:
        self._file.close()
        summary = unflatten({k: _json_safe(v) for k, v in info.items()})
        summary.update(self.extra_summary)
        tmp = self.run_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.run_dir / "summary.json")


class TensorBoardLogger(Logger):
    """Every numeric scalar of the epoch record, at ``env_step``, under ``tb/``."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        """:param purge_step: when resuming, events at this step and later (logged after the
            checkpoint) are discarded by TensorBoard, so curves continue without repeats."""
        # imported here: tensorboard is slow to import and not needed to start
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log_epoch(self, record: dict[str, Any]) -> None:
        step = int(record["env_step"])
        for key, value in record.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and key != "env_step" and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, info: dict[str, Any]) -> None:
        self.writer.close()


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(
        value, spec)


class ConsoleLogger(Logger):
    """A live progress bar during each epoch (terminals only), one line per epoch and a
    final summary table."""

    def __init__(self, max_epochs: int, progress_bar: bool = True, run_dir: Path | None = None,
                 console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.run_dir = run_dir
        self.max_epochs = max_epochs
        self.progress_bar = progress_bar and self.console.is_terminal
        self._progress: Progress | None = None
        self._task: Any = None
        self._epoch_start = 0.0
        self._done = 0

    def start_epoch(self, epoch: int, num_steps: int) -> None:
        self._epoch_start, self._done = time.perf_counter(), 0
        if not self.progress_bar:
            return
        self._progress = Progress(
            TextColumn(f"epoch {epoch}/{self.max_epochs}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sps]} steps/s"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task("train", total=num_steps, sps="-")
        self._progress.start()

    def advance(self, num_steps: int) -> None:
        self._done += num_steps
        if self._progress is not None:
            elapsed = time.perf_counter() - self._epoch_start
            sps = f"{self._done / elapsed:,.0f}" if elapsed > 0 else "-"
            self._progress.update(self._task, advance=num_steps, sps=sps)

    def log_epoch(self, r: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        losses = " ".join(
            f"{k.split('/', 1)[1]}={_fmt(v, '.3g')}"
            for k, v in r.items()
            if k.startswith("update/") and k.split("/", 1)[1] in LOSS_KEYS
        )
        self.console.print(
            f"epoch {r['epoch']:>3}/{self.max_epochs} | step {r['env_step']:>8,} | "
            f"train {_fmt(r['train/return_mean'])} | "
            f"test {_fmt(r['test/return_mean'])} ± {_fmt(r['test/return_std'])} | "
            f"best {_fmt(r['best/score'])} (ep {r['best/epoch']}) | "
            f"{_fmt(r['train/steps_per_s'], ',.0f')} steps/s | "
            f"collect {r['timing/collect']:.1f}s update {r['timing/update']:.1f}s "
            f"test {r['timing/test']:.1f}s"
            + (f" | {losses}" if losses else ""),
            soft_wrap=True,
        )

    def finish(self, info: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
        table = Table(title="rltrain summary", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        status = "interrupted" if info["interrupted"] else (
            "solved" if info["solved"] else "not solved")
        rows = [
            ("result", status),
            ("best test return", f"{_fmt(info['best_score'], '.2f')} (epoch {info['best_epoch']})"),
            ("reward threshold", _fmt(info["reward_threshold"], ".1f")),
            ("epochs", str(info["epochs"])),
            ("env steps", f"{info['env_step']:,}"),
            ("gradient steps", f"{info['gradient_step']:,}"),
            ("wall time", f"{info['wall_time']:.1f}s (collect {info['timing/collect']:.1f}s, "
                          f"update {info['timing/update']:.1f}s, test {info['timing/test']:.1f}s, "
                          f"save {info['timing/save']:.1f}s)"),
        ]
        if self.run_dir is not None:
            rows.append(("run directory", str(self.run_dir)))
        for row in rows:
            table.add_row(*row)
        self.console.print(table)


#: update stats shown on the console line (all of them go to the files)
LOSS_KEYS = ("pg_loss", "v_loss", "entropy", "approx_kl", "loss", "q_mean", "epsilon")
