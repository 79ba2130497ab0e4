"""``rltrain-report``: arguments, inputs, the output directory, the console summary.

The report is written whole or not at all: its files are made in a fresh directory in the
output directory's file system (:func:`staged`) and moved into place only once every one is
written. A full disk, an error or a signal (Ctrl-C, SIGTERM) on the way removes what was made;
the output directory, an earlier report in it included, is as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from rltrain.commands.evaluate import ArgumentParser, positive_int
from rltrain.commands.report.compose import Settings, build
from rltrain.commands.report.runs import DamagedRun, Run, find_runs, load_run, show
from rltrain.commands.report.stats import Reference
from rltrain.common.errors import UserError
from rltrain.process import signals
from rltrain.process.streams import clip_long_words, os_error_text

PROG = "rltrain-report"
#: the files a report writes (``--force`` replaces these, and only these)
OWN_FILES = ("runs.csv", "report.md", "report.html", "curves_*.png", "curves_*.svg",
             "performance_profiles.png", "performance_profiles.svg")


def parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Compare runs: group run directories by config minus the seed and write "
        "learning curves, final-score tables with bootstrap CIs (rliable), probabilities of "
        "improvement and performance profiles to report.md, report.html and runs.csv. Needs "
        "the 'report' extra.",
        epilog="example: rltrain-report multirun/2026-11-21_06-00-00 --last 5",
    )
    p.add_argument("inputs", nargs="+", type=Path, metavar="RUN_OR_SWEEP_DIR",
                   help="run directories, or directories searched for them (sweeps, outputs/)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where to write the report (default: report/ in the inputs' common "
                   "directory, else ./rltrain-report-<time>)")
    p.add_argument("--force", action="store_true",
                   help="write into an output directory that is not empty (replacing the "
                   "files of an earlier report)")
    p.add_argument("--last", type=positive_int, default=3, metavar="K",
                   help="final score: the mean of a run's last K test returns (default: 3)")
    p.add_argument("--reference", action="append", default=[], type=_reference,
                   metavar="ENV_ID=SCORE",
                   help="the score that normalises ENV_ID (default: its reward threshold); "
                   "ENV_ID=LOW:HIGH maps LOW to 0 and HIGH to 1 (needed when the threshold "
                   "is not positive, as Pendulum's); repeatable")
    p.add_argument("--reps", type=positive_int, default=2000, metavar="N",
                   help="bootstrap resamples per estimate (default: 2000)")
    return p


def _reference(text: str) -> tuple[str, Reference]:
    env_id, sep, value = text.rpartition("=")
    try:
        low, high = value.split(":") if ":" in value else ("0", value)
        ref = Reference(float(high), float(low), source="--reference")
    except ValueError:
        ref = None
    if not sep or not env_id or ref is None or not all(map(_finite, (ref.low, ref.high))):
        raise argparse.ArgumentTypeError(f"expected ENV_ID=SCORE or ENV_ID=LOW:HIGH, got {text!r}")
    if ref.high == ref.low:
        raise argparse.ArgumentTypeError(f"{text!r}: LOW and HIGH must differ")
    return env_id, ref


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    # Ctrl-C, SIGTERM and SIGHUP end the command by an exception, so that what it was
    # writing is removed on the way out (SIGTERM's default would end it on the spot)
    signals.startup()
    try:
        _report(args)
    except signals.EarlyStop as e:
        print(f"{PROG}: stopped by {signals.name(e.signum)}; no report was written",
              file=sys.stderr)
        sys.exit(128 + e.signum)


def _report(args: argparse.Namespace) -> None:
    try:
        run_dirs = discover(args.inputs)
        out = output_dir(args.out, args.inputs, args.force)
        runs, skipped = load(run_dirs)
        references = dict(args.reference)
        unknown = sorted(set(references) - {r.env_id for r in runs})
        if unknown:
            raise UserError(f"--reference names {', '.join(unknown)}, which no run trains on "
                            f"(tasks: {', '.join(sorted({r.env_id for r in runs}))})")
        _require()
        check_output_dir(out)
    except UserError as e:
        print(f"{PROG}: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"{PROG}: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)
    try:
        with staged(out, args.force) as folder:
            outcome = build(runs, folder, Settings(args.last, args.reps, references), skipped,
                            args.inputs)
    except UserError as e:
        print(f"{PROG}: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        kept = f"{out} is as it was" if out.is_dir() else "nothing was left behind"
        print(f"{PROG}: error: could not write the report in {out}: {e.strerror or e}; "
              f"{kept} (free space there, or pass --out DIR to write it elsewhere)",
              file=sys.stderr)
        sys.exit(1)
    groups = [g for gs in outcome.tasks.values() for g in gs]
    used = sum(len(g.usable) for g in groups)
    print(f"{PROG}: {used} run{'' if used == 1 else 's'} in {len(groups)} group"
          f"{'' if len(groups) == 1 else 's'} on {len(outcome.tasks)} task"
          f"{'' if len(outcome.tasks) == 1 else 's'}" + (f" ({len(skipped)} skipped)"
                                                         if skipped else ""))
    for task, task_groups in outcome.tasks.items():
        print(f"  {task}: " + "; ".join(
            f"{g.name} ({len(g.usable)} seed{'' if len(g.usable) == 1 else 's'}: "
            f"{', '.join(show(r.seed) for r in g.usable)}"
            f"{', no interval' if len(g.usable) == 1 else ''})" for g in task_groups))
    figures = sum(f.suffix == ".png" for f in outcome.files)
    print(f"report: {out / 'report.html'} (and report.md, runs.csv, {figures} figure"
          f"{'' if figures == 1 else 's'} as PNG and SVG)")
    for warning in outcome.warnings:  # last, where they are seen
        _warn(warning)


def discover(inputs: Sequence[Path]) -> list[Path]:
    """Every run directory under the inputs, once each; an input that does not exist or
    holds no run is an error."""
    found: dict[Path, Path] = {}
    for path in inputs:
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if not path.is_dir():
            raise UserError(f"{path} is not a directory (give a run or sweep directory)")
        runs = find_runs(path)
        if not runs:
            raise UserError(f"no runs under {path} (a run directory holds .hydra/config.yaml "
                            "and epochs.jsonl)")
        for run in runs:
            found.setdefault(run.resolve(), run)
    return list(found.values())


def load(run_dirs: Sequence[Path]) -> tuple[list[Run], list[str]]:
    """Read the runs; a damaged one is skipped with a warning. Nothing usable is an error."""
    runs, skipped = [], []
    for path in run_dirs:
        try:
            runs.append(load_run(path, warn=_warn))
        except DamagedRun as e:
            _warn(f"skipping {path}: {e}")
            skipped.append(f"`{path}`: {e}")
    if not any(r.usable for r in runs):
        failed = sum(r.status == "failed" for r in runs)
        raise UserError(f"no usable runs: of {len(run_dirs)} run directories, {len(skipped)} "
                        f"cannot be read and {failed} failed")
    return runs, skipped


def output_dir(out: Path | None, inputs: Sequence[Path], force: bool) -> Path:
    """``--out``, else ``report/`` in the inputs' common directory, else (not writable there)
    ``./rltrain-report-<time>``. A directory that holds anything is used only with --force.
    Nothing is created yet (:func:`make_output_dir`)."""
    if out is None:
        common = Path(os.path.commonpath([p.resolve() for p in inputs]))
        out = common / "report"
        if not _writable(out):
            fallback = Path.cwd() / f"rltrain-report-{datetime.datetime.now():%Y%m%d-%H%M%S}"
            _warn(f"cannot write {out}; writing the report to {fallback}")
            out = fallback
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out} is not empty (an earlier report?); pass --force to "
                        "replace its report files, or --out DIR")
    return out


def check_output_dir(out: Path) -> None:
    """Refuse, before any work, an output directory the report could not be moved into."""
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"cannot write in {out}")


@contextlib.contextmanager
def staged(out: Path, force: bool) -> Iterator[Path]:
    """A fresh directory to write the report in, in the file system ``out`` is in (inside
    ``out`` if it exists, else beside it); when the block ends, its files take their places
    in ``out`` (with ``force``, an earlier report's files that the new one lacks are
    removed, and only those). On any other way out of the block the directory goes, with the
    folders made for it, and ``out`` is as it was."""
    made = _missing_parents(out)
    inside = out.is_dir()
    folder = (out / f".report.partial-{os.getpid()}" if inside else
              out.with_name(f".{out.name}.partial-{os.getpid()}"))
    try:  # one block from the folder's making on: a signal just after mkdir removes it too
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(folder, ignore_errors=True)  # a crashed earlier attempt of this pid
            folder.mkdir()
        except OSError as e:
            raise UserError(f"cannot create {folder.parent if inside else out}: "
                            f"{e.strerror or e}") from None
        yield folder
        _publish(folder, out, force, inside)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        _remove_empty(made)
        raise


def _publish(folder: Path, out: Path, force: bool, inside: bool) -> None:
    """Move the finished report from ``folder`` into ``out``: one rename of the folder when
    ``out`` did not exist, else file by file (renames in one file system, which need no
    room); signals are held meanwhile, so that no mix of two reports is left."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        _move(folder, out, force, inside)
        signals.quiet()  # written: a signal held until now no longer stops anything
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _move(folder: Path, out: Path, force: bool, inside: bool) -> None:
    if not inside:
        folder.rename(out)
        return
    new = {p.name for p in folder.iterdir()}
    if force:
        for pattern in OWN_FILES:
            for file in out.glob(pattern):
                if file.name not in new:
                    file.unlink()
    for name in sorted(new):
        os.replace(folder / name, out / name)
    folder.rmdir()


def _missing_parents(out: Path) -> list[Path]:
    """The folders above ``out`` that do not exist yet, deepest first."""
    missing = []
    for parent in out.parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; a folder that holds anything stays
        with contextlib.suppress(OSError):
            folder.rmdir()


def _writable(path: Path) -> bool:
    """Whether ``path`` is, or could be created as, a directory we can write in."""
    while not path.exists():
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _require() -> None:
    for module in ("rliable.library", "matplotlib"):
        try:
            importlib.import_module(module)
        except ImportError as e:
            name = (e.name or module).split(".")[0]
            raise UserError(f"rltrain-report needs {name}, which is not installed or does not "
                            "import; install the 'report' extra: pip install -e \".[report]\" "
                            "(in the rltrain repository)") from None
        except Exception as e:  # noqa: BLE001 - installed but broken: say what, not a traceback
            # Seen: rliable pins arch<8, and arch 7 fails to import under pandas 3
            # ("deprecate_kwarg() missing 1 required positional argument").
            raise UserError(f"{module} is installed but fails to import ({type(e).__name__}: {e}); "
                            "the 'report' extra pins versions that work together: "
                            "pip install -e \".[report]\" (in the rltrain repository)") from None


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)
