"""The trust boundary: files from elsewhere run no code without the user's consent.

A run's config can make rltrain import modules and call callables: ``env.imports``, the module
of a ``module:Env-v0`` id, and ``env.wrappers`` other than gymnasium's and rltrain's own. A
command the user types is consent to what it names. A config read from a file (a run
directory's ``.hydra/config.yaml``, the config inside a checkpoint) is not: it may have come
from another machine or person, or been edited since. So:

- when rltrain composes a run from the user's command, it records here what that config would
  run, its **code surface** (every module it imports and every callable it calls, with their
  arguments), keyed by the SHA-256 of that surface;
- when it reads a config from a file, it checks that config's surface: empty (plain gymnasium
  ids, gymnasium's and rltrain's own wrappers), or recorded here, or the user consents
  (``--trust``; ``trust=true`` for a run's dataset), in which case it is recorded from then
  on. Anything else is refused before anything is imported, naming each module and callable.

The record is one line per surface in ``$RLTRAIN_STATE_DIR/trusted`` (default
``$XDG_STATE_HOME/rltrain``, else ``~/.local/state/rltrain``), written without following links.
It does not protect against: code the user consented to (a package they installed, a module
on their path), a surface identical to one they ran here (the same imports and wrapper
arguments run the same code), or someone who can write the record itself (the user's own
account).

Imports only :mod:`rltrain.config.schemas` (for ConfigError) and
:mod:`rltrain.common.moved` (rltrain's own modules by their former paths too).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rltrain.common.moved import current_name
from rltrain.config.schemas import ConfigError, split_id, wrapper_entry

#: the file of recorded surfaces, in the state directory
RECORD = "trusted"
#: the modules whose code needs no consent: gymnasium's own, and rltrain's wrappers (whose
#: import registers MinAtar's ids, naming its entry point without importing it)
OWN = ("gymnasium", "rltrain.envs.wrappers")


class UntrustedError(ConfigError):
    """A config or dataset from elsewhere would run code; the message names it and the way to
    allow it."""


def state_dir() -> Path:
    """Where rltrain keeps what it records about this machine's runs."""
    explicit = os.environ.get("RLTRAIN_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rltrain"


def _own(module: str) -> bool:
    module = current_name(module)  # a former path of rltrain's own
    return any(module == m or module.startswith(m + ".") for m in OWN)


def env_surface(env: Mapping[str, Any] | Any) -> list[str]:
    """What an env config would import and call beyond gymnasium, one readable item each:
    ``import mypkg.envs (env.imports)``, ``call pydoc.pipepager(cmd='touch x')
    (env.wrappers[0])``. Read from plain data only (nothing is imported to find it)."""
    env = env if isinstance(env, Mapping) else {}
    items = []
    imports = env.get("imports") or []
    for i, module in enumerate(imports if isinstance(imports, Sequence)
                               and not isinstance(imports, str) else [imports]):
        if not _own(str(module)):
            items.append(f"import {module} (env.imports[{i}])")
    env_id = env.get("id")
    if isinstance(env_id, str):
        module = split_id(env_id)[0]
        if module is not None and not _own(module):
            items.append(f"import {module} (env.id={env_id})")
    wrappers = env.get("wrappers") or []
    if not isinstance(wrappers, Sequence) or isinstance(wrappers, str):
        wrappers = [wrappers]
    for i, entry in enumerate(wrappers):
        # an entry of no known shape is the settings' to refuse; here it is named whole
        name, kwargs = wrapper_entry(entry) or (entry, {})
        if isinstance(name, str) and ("." not in name or _own(name.rpartition(".")[0])):
            continue  # a bare name is gymnasium's own wrapper
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items(), key=str))
        items.append(f"call {name}({args}) (env.wrappers[{i}])")
    return items


def surface_key(items: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(sorted(items)).encode()).hexdigest()


def _recorded() -> set[str]:
    path = state_dir() / RECORD
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return set()
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        return {line.split(" ", 1)[0] for line in f if line.strip()}


def is_recorded(items: Sequence[str]) -> bool:
    return not items or surface_key(items) in _recorded()


def record(items: Sequence[str], source: str) -> None:
    """Record a surface as consented to (once). A record that cannot be written (a read-only
    home, a link where the file should be) is skipped: the run goes on, and a later read of
    its files asks for consent again."""
    if not items or is_recorded(items):
        return
    directory = state_dir()
    line = (f"{surface_key(items)} {datetime.datetime.now().isoformat(timespec='seconds')} "
            f"{json.dumps(source)}\n")
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(directory / RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                     0o600)
    except OSError:
        return
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line)


def check(items: Sequence[str], source: str, *, consent: bool, allow: str) -> None:
    """Let ``items`` (what ``source`` would run) through if there is nothing to run, it is
    recorded here, or the user consents (then it is recorded); else UntrustedError naming
    each item and ``allow``, the flag or setting that gives consent."""
    if is_recorded(items):
        return
    if consent:
        record(items, source)
        return
    listed = "; ".join(items)
    raise UntrustedError(
        f"{source} would run code that was not set up by a command on this machine: {listed}. "
        f"Run it only if you trust where it came from: {allow}")
