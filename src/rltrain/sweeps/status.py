"""What a sweep job records for the sweep's list when it has no run of its own.

* A job that did not train (failed before training, or not started because the sweep was
  stopped) writes a ``summary.json`` saying so (:func:`write_status`).
* A job refused because its directory is another run's must not write there: it adds a
  line to the sweep's ledger of refused jobs instead (:func:`refuse`), a file whose path the
  sweep's main process sets in :data:`REFUSED_ENV` (:func:`open_refusals`) and its workers
  inherit; the list reads it once at the end (:func:`refusals`).

Imports nothing of the package; of rltrain, only :mod:`rltrain.rundir.files`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from rltrain.rundir.files import open_append, write_new

#: where a sweep's jobs record the jobs they refused (the path, set by the sweep's main process
#: and inherited by its workers): a refused job's directory, and its summary.json, are another
#: run's, so the sweep's report learns of the refusal from this file
REFUSED_ENV = "RLTRAIN_SWEEP_REFUSED"


def write_status(job_dir: Path, status: str, error: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
    """A ``summary.json`` for a job that did not train (failed before training, or not
    started): the sweep's report reads it; a later run may reuse the directory."""
    summary = {"status": status, "error": error, "interrupted": False, "run_dir": str(job_dir),
               **(extra or {})}
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        write_new(job_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    except OSError:
        pass


def open_refusals(sweep_dir: Path) -> None:
    """As the sweep starts, in its main process: a ledger of its own in ``sweep_dir``, one
    per sweep command (two sweeps into one directory each count their own refusals)."""
    ledger = sweep_dir / f".rltrain-refused-{socket.gethostname()}-{os.getpid()}.jsonl"
    ledger.unlink(missing_ok=True)
    os.environ[REFUSED_ENV] = str(ledger)


def refuse(job_dir: Path, message: str, *, lasting: bool = False) -> None:
    """Record that this sweep did not run a job because its directory is another run's
    (``lasting``: the same command would be refused again) or in use by another process
    (another sweep into the same ``hydra.sweep.dir``)."""
    ledger = os.environ.get(REFUSED_ENV)
    if not ledger:
        return
    with contextlib.suppress(OSError), open_append(ledger) as f:
        f.write(json.dumps({"job": str(job_dir), "error": message, "lasting": lasting}) + "\n")


def refusals() -> dict[Path, tuple[str, bool]]:
    """The jobs this sweep refused (:func:`refuse`), each with its message and whether the
    refusal lasts, read once: the file is removed."""
    ledger = os.environ.get(REFUSED_ENV)
    if not ledger:
        return {}
    found: dict[Path, tuple[str, bool]] = {}
    with contextlib.suppress(OSError):
        for line in Path(ledger).read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                found[Path(record["job"])] = (str(record["error"]),
                                              record.get("lasting") is True)
    with contextlib.suppress(OSError):
        Path(ledger).unlink()
    return found
