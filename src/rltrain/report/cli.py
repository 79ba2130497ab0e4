"""``rltrain-report``: arguments, inputs, the output directory, the console summary."""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rltrain.evaluate import ArgumentParser, UserError, positive_int
from rltrain.report.compose import Settings, build
from rltrain.report.runs import DamagedRun, Run, find_runs, load_run, show
from rltrain.report.stats import Reference
from rltrain.streams import clip_long_words, os_error_text

PROG = "rltrain-report"
#: the files a report writes (``--force`` removes these, and only these, first)
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
        make_output_dir(out, args.force)
    except UserError as e:
        print(f"{PROG}: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"{PROG}: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)
    try:
        outcome = build(runs, out, Settings(args.last, args.reps, references), skipped,
                        args.inputs)
    except OSError as e:
        print(f"{PROG}: error: could not write the report in {out}: {e.strerror or e}",
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
            f"{', '.join(show(r.seed) for r in g.usable)})" for g in task_groups))
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


def make_output_dir(out: Path, force: bool) -> None:
    """Create ``out``; with ``force``, remove an earlier report's files from it (only those)."""
    if force and out.is_dir():
        for pattern in OWN_FILES:
            for file in out.glob(pattern):
                file.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK):
        raise UserError(f"cannot write in {out}")


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
