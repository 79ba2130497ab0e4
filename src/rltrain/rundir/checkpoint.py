"""Checkpoints: atomic saving, rotation, and loading that never executes code.

Files are written to a temporary name in the same folder, fsynced, then renamed,
so a crash never leaves a half-written file under the final name. ``last.pt`` is
a hard link to the newest numbered checkpoint (no second write). Loading uses
``torch.load(..., weights_only=True)``: tensors and plain Python data only; a
file crafted to run code when unpickled is refused.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from rltrain.common.errors import NonFiniteError
from rltrain.rundir.files import open_new_bytes

FORMAT = "rltrain-checkpoint"
#: 3: env state as tagged plain data with what could not be captured; test step counter
#: 4: the trainer's state holds its storage (the replay buffer, its filled part only, each
#:    observation once; the sampler's stream); version 3 files are read and upgraded
VERSION = 4
#: the versions this rltrain reads
READS = (3, 4)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


class _Writer(io.RawIOBase):
    """The file torch.save writes to, keeping the OSError of a failed write: torch turns it
    into a RuntimeError that no longer says "No space left on device"."""

    def __init__(self, file: io.BufferedWriter) -> None:
        super().__init__()
        self.file = file
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.file.flush()


def atomic_save(obj: Any, path: Path) -> None:
    """Write to a temporary file, fsync, rename. If anything fails on the way (a full disk,
    a second Ctrl-C), the temporary file is removed and ``path`` is left as it was.

    :raises OSError: the file system's own error (a full disk raises ENOSPC, not torch's
        RuntimeError around it).
    """
    # the folder itself only (best/, checkpoints/): a run directory that was removed is not
    # made again, half, by the next save
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    writer = None
    try:
        with open_new_bytes(tmp) as f:
            writer = _Writer(f)
            # torch.save takes any object with write() and flush(), as its docstring says, but
            # annotates IO[bytes], which an io.RawIOBase is not (torch 2.x typing bug)
            torch.save(obj, writer)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if writer is not None and writer.error is not None and not isinstance(e, OSError):
            raise writer.error from None
        raise


def save_policy(directory: Path, state_dict: dict[str, Any], meta: dict[str, Any]) -> Path:
    """The policy weights alone (plus what is needed to rebuild the network), loadable with
    ``torch.load(path, weights_only=True)``."""
    path = directory / "policy.pt"
    # clones: the parameters are views into the optimiser's flat buffer, and saving a view
    # would write the whole buffer (the critic's weights too)
    state_dict = {k: v.clone() for k, v in state_dict.items()}
    bad = [k for k, v in state_dict.items() if v.is_floating_point() and not v.isfinite().all()]
    if bad:
        raise NonFiniteError(f"refusing to save a policy with non-finite weights ({bad[0]})")
    atomic_save({"state_dict": state_dict, "meta": meta}, path)
    return path


def _read(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain data, nothing that runs code.
    Refused in one line naming the file: objects whose loading would import and call code
    (torch's own advice to load them unsafely is not repeated), and anything torch cannot read
    (a truncated file, another format: torch raises many kinds of error for those)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        needs = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if needs is None and not zipfile.is_zipfile(path):
            raise CheckpointError(f"{path} is truncated or corrupt (not a file torch.save "
                                  f"wrote: {path.stat().st_size:,} bytes)") from None
        what = f" ({needs.group(1)})" if needs else ""
        raise CheckpointError(f"{path} holds objects other than tensors and plain data{what}; "
                              "refusing to load it (it could run code)") from None
    except Exception as e:  # noqa: BLE001 - whatever torch makes of a damaged file
        first = (str(e).strip().splitlines() or ["no detail"])[0]
        raise CheckpointError(f"{path} is truncated or corrupt ({path.stat().st_size:,} bytes; "
                              f"{type(e).__name__}: {first[:200]})") from None


def load_policy(path: Path) -> dict[str, Any]:
    """Read what :func:`save_policy` wrote: ``{"state_dict": ..., "meta": ...}``; raises
    CheckpointError naming the file."""
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist")
    obj = _read(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not an rltrain policy file (no state_dict)")
    return obj


def save_checkpoint(directory: Path, state: dict[str, Any], name: str, keep: int) -> Path:
    """Write ``directory/name`` and point ``last.pt`` at it; keep the newest ``keep``
    numbered files (``last.pt`` is always kept)."""
    path = directory / name
    atomic_save({"format": FORMAT, "version": VERSION, **state}, path)
    last = directory / "last.pt"
    tmp = directory / ".last.pt.link"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # no hard links on this file system: a second write
        atomic_save({"format": FORMAT, "version": VERSION, **state}, tmp)
    os.replace(tmp, last)
    numbered = sorted(p for p in directory.glob("ckpt_*.pt"))
    for old in numbered[: max(len(numbered) - max(keep, 1), 0)]:
        old.unlink()
    return last


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load and validate one checkpoint file; raises CheckpointError naming it."""
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist")
    state = _read(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an rltrain checkpoint")
    if state.get("version") not in READS:
        raise CheckpointError(f"{path} has checkpoint version {state.get('version')}, "
                              f"this rltrain reads versions {', '.join(map(str, READS))}")
    return upgraded(state)


def upgraded(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint in this version's layout. Version 3 kept the replay buffer (with its
    sampling stream) and an offline run's sampling stream at the top level; version 4 keeps
    them in the trainer's state, as its kind's storage (the buffer itself converts its own
    older format when loaded)."""
    if state["version"] == 3:
        state = dict(state)
        buffer, buffer_rng = state.pop("buffer", None), state.pop("buffer_rng", None)
        rng = buffer.get("rng") if isinstance(buffer, dict) else buffer_rng
        sampler = None if rng is None else {"rng": rng}
        trainer = (state.get("config") or {}).get("trainer", {}).get("name")
        storage = ({"buffer": buffer, "sampler": sampler} if trainer == "offpolicy" else
                   {"sampler": sampler} if trainer == "offline" else None)
        state["trainer"] = {**state["trainer"], "storage": storage}
        state["version"] = VERSION
    return state


def load_latest(directory: Path) -> tuple[dict[str, Any], Path, list[str]]:
    """Load ``last.pt``, or if it is unusable the newest good numbered checkpoint.

    Returns the state, the file used, and the problems met on the way.
    """
    problems: list[str] = []
    candidates = [directory / "last.pt", *sorted(directory.glob("ckpt_*.pt"), reverse=True)]
    for path in candidates:
        try:
            return load_checkpoint(path), path, problems
        except CheckpointError as e:
            problems.append(str(e))
    raise CheckpointError("no usable checkpoint in " + str(directory) + ": " + "; ".join(
        problems))
