"""Atomic saving of checkpoints and policy weights.

Files are written to a temporary name in the same folder, fsynced, then renamed,
so a crash never leaves a half-written file under the final name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_policy(directory: Path, state_dict: dict[str, Any], meta: dict[str, Any]) -> Path:
    """The policy weights alone (plus what is needed to rebuild the network), loadable with
    ``torch.load(path, weights_only=True)``."""
    path = directory / "policy.pt"
    atomic_save({"state_dict": state_dict, "meta": meta}, path)
    return path
