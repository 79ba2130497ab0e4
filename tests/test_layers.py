"""The layers are a contract: imports point down only (``.importlinter``, checked by
import-linter's ``lint-imports``), and a contract that could not fail would prove nothing, so a
deliberate upward import in a copy of the package must break it, naming the chain."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(src: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_imports_point_down_only():
    res = lint(ROOT / "src")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 kept, 0 broken" in res.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """config.py (the ground floor) importing the CLI, in a copy of the package."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "rltrain", copy / "rltrain",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = copy / "rltrain" / "config.py"
    config.write_text(config.read_text() + "\n\ndef _upward() -> None:\n"
                      "    import rltrain.cli  # noqa: F401\n")
    res = lint(copy, cwd=tmp_path)
    assert res.returncode != 0
    assert "BROKEN" in res.stdout and "rltrain.config -> rltrain.cli" in res.stdout, res.stdout
