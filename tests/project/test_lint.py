"""Lint is part of the suite: ruff over the package, tests and scripts."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean():
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "scripts"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
