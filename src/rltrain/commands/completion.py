"""Tab completion without torch: the config schemas Hydra's completion composes with, kept as
plain data between calls.

Completing ``rltrain algo.<TAB>`` composes the config, and the config's YAML files extend the
schemas registered in Hydra's ConfigStore (``schema/algo/ppo`` ...). Those schemas live next
to the algorithms, trainers and loggers that define them, so registering them imports torch:
1.0 s of the 1.3 s a completion took on the 2-core VM. Completion needs only their keys and
defaults, so the first completion writes them, as JSON, to a cache file
(``$XDG_CACHE_HOME/rltrain``, else ``~/.cache/rltrain``) named after a fingerprint of the
installed rltrain (its version and each module's size and modification time) and of Python's
version; later completions register those plain values instead of the dataclasses, and import
neither torch nor the algorithms. Any change to rltrain's source gives another fingerprint, so
a stale cache is never read. A cache that cannot be written or read costs only the speed: the
completion then imports the schemas as a run does.

A run never reads this cache: it registers the typed schemas (rltrain.assembly.registered_schemas),
which check every value. The cache is JSON, read as data.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import rltrain
from rltrain.rundir.files import open_new


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rltrain"


def fingerprint() -> str:
    """What the schemas depend on: rltrain's version, its modules' sizes and modification
    times, and Python's version."""
    root = Path(rltrain.__file__).parent
    h = hashlib.sha256(f"{rltrain.__version__} {sys.version}".encode())
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        h.update(f"{path.relative_to(root)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def cache_path() -> Path:
    return _cache_dir() / f"schemas-{fingerprint()}.json"


def cached() -> dict[str, Any] | None:
    """The schemas' keys and defaults by ConfigStore path, as a completion before wrote them
    for this rltrain; None when there is no such file or it cannot be read."""
    path = cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()) \
        else None


def write(snapshot: dict[str, Any]) -> None:
    """Keep ``snapshot`` for the next completion: written to a temporary file (never through a
    link) and renamed into place; a failure only leaves the cache missing."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open_new(tmp) as f:
            json.dump(snapshot, f)
        os.replace(tmp, path)
    except OSError:
        pass


def register(snapshot: dict[str, Any]) -> None:
    """Store each schema's plain values in Hydra's ConfigStore under its path (what
    :func:`rltrain.assembly.registered_schemas.register_configs` stores as dataclasses)."""
    from rltrain.config.schemas import store_schemas

    store_schemas(snapshot)
