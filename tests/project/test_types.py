"""Types are part of the suite: mypy over the package, with the settings in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_clean():
    # [tool.mypy] names the files (src/rltrain, src/hydra_plugins) and the strictness
    res = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
