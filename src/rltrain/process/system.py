"""Facts about the machine and the code a run uses: memory available for a new allocation,
versions, the command, and the git commits of rltrain's source and the working directory.
Ground floor: imports no other rltrain module."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import rltrain


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux: MemAvailable), if known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def size_text(n: float) -> str:
    """Bytes for a message: ``1.4 GB``, ``96.0 MB``, ``2.1 TB``."""
    if n >= 1e12:
        return f"{n / 1e12:,.1f} TB"
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _git(cwd: Path) -> dict[str, Any] | None:
    """The commit of the git checkout holding ``cwd``, and whether it has local changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                                text=True, timeout=5)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def system_info(command: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """Versions, the command (a sweep job: its own overrides), and the git commits of
    rltrain's source and of the working directory, when they are git checkouts."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "rltrain": rltrain.__version__,
        "command": command,
    }
    if overrides is not None:
        info["overrides"] = list(overrides)
    source = Path(rltrain.__file__).resolve().parents[2]
    git = {}
    if (found := _git(source)) is not None:
        git["rltrain"] = found
    cwd = _git(Path.cwd())
    if cwd is not None and cwd != git.get("rltrain"):
        git["cwd"] = {"path": os.getcwd(), **cwd}
    if git:
        info["git"] = git
    return info
