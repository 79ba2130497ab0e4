"""Shared test helpers: run the real `rltrain` entry point in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RLTRAIN = Path(sys.executable).parent / "rltrain"


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    """Run ``rltrain ARGS`` as a user would; no terminal, so no live progress bar."""
    full_env = dict(os.environ)
    full_env.pop("HYDRA_FULL_ERROR", None)
    full_env.update(env or {})
    return subprocess.run([str(RLTRAIN), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def cli(tmp_path: Path):
    """``cli(*args)`` runs rltrain with ``tmp_path`` as working directory."""

    def call(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=tmp_path, **kwargs)

    return call
