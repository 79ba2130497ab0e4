"""What this process learns of its Hydra command while Hydra runs it (:data:`STATE`).

Hydra builds the callback and the sweeper from the config itself, so they cannot be handed
an object: they report here, and the CLI reads it once Hydra returns (one Hydra command per
process). Imports nothing of rltrain's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SweepState:
    """What this process learns of its Hydra command, through :func:`judge` and
    :class:`rltrain.sweeps.callback.HydraCallback`."""

    #: the sweep directory, in the sweep's main process
    directory: Path | None = None
    #: set by a sweeper that judges the sweep itself (the Optuna sweeper: a study with failed
    #: trials still succeeds when one completed; 2: the sweep could not start); None: the
    #: sweep fails when any job failed
    outcome: int | None = None
    #: whether a single run's directory existed before Hydra made it: one the user made is
    #: never removed, even when a refused run leaves it empty
    run_dir_existed: bool = False
    #: the directories above a single run's that did not exist before it (``outputs/``...)
    made: list[Path] = field(default_factory=list)
    #: the command as the user typed it (``rltrain`` and its arguments), for the line that
    #: says how to finish an unfinished sweep
    command: list[str] | None = None
    #: when the sweep started (time.time()), in its main process
    started: float | None = None


STATE = SweepState()


def judge(code: int) -> None:
    """A sweeper's verdict on the whole sweep: the exit code of the command."""
    STATE.outcome = code
