"""Who owns a run directory, and what it holds.

One process owns a run directory at a time: it holds an exclusive ``flock`` on
``.rltrain.lock`` inside it. The kernel drops the lock when the process ends, however
it ends (SIGKILL included), so a crashed run never leaves the directory stuck.

A directory *holds a run* when it has a checkpoint or at least one epoch record:
something a user would lose. A new run refuses such a directory before writing
anything, so the run it protects stays byte-for-byte as it was (Hydra's own
snapshot of the config is turned off, ``hydra.output_subdir: null``; rltrain writes
``.hydra/`` itself once the run is accepted). A directory left by an attempt that
failed before its first checkpoint holds nothing of value: a new run replaces it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shlex
import shutil
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rltrain.common.errors import TrainingError
from rltrain.process import signals
from rltrain.process.streams import clip_long_words
from rltrain.rundir.files import link_target, links_among, replacing, write_new
from rltrain.rundir.stored_data import read_json

LOCK = ".rltrain.lock"
#: the run's identity (:func:`new_identity`), written when it starts
IDENTITY = "run.json"
#: what rltrain writes into a run directory (and may remove when it replaces a failed attempt)
OWN = (".hydra", IDENTITY, "epochs.jsonl", "summary.json", "tb", "checkpoints", "best",
       "final", "rltrain.log", "eval.json", ".epochs.jsonl.tmp", ".summary.json.tmp",
       "summary.json.tmp", f".{IDENTITY}.tmp")


class RunDirError(Exception):
    """A run directory that cannot be used; the message says why and what to do."""


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


def holds_run(run_dir: Path) -> list[str]:
    """What makes ``run_dir`` a run that must not be overwritten (empty: nothing): a
    checkpoint (it can be resumed), or a summary of a run that completed. An attempt that
    failed, was killed, or was stopped at once (a second signal) before its first checkpoint
    can be neither resumed nor trusted; a new run replaces what it left, saying so
    (:func:`failed_attempt_note`)."""
    found = []
    ckpts = run_dir / "checkpoints"
    saved = ckpts.is_dir() and any(p.suffix == ".pt" and not p.name.startswith(".")
                                   for p in ckpts.iterdir())
    if saved:
        found.append("checkpoints")
    status = read_summary(run_dir).get("status", "completed")
    unfinished = status in ("failed", "not started") or (status == "interrupted" and not saved)
    if (run_dir / "summary.json").is_file() and not unfinished:
        found.append("summary.json")
    return found


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json as a dict ({} when missing, unreadable or larger than any summary
    rltrain writes: :func:`rltrain.rundir.stored_data.read_json`)."""
    try:
        summary = read_json(run_dir / "summary.json")
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def leftovers(run_dir: Path) -> list[str]:
    """rltrain's files from an attempt that left no run behind (failed before its first
    checkpoint and epoch record)."""
    if not run_dir.is_dir():
        return []
    return sorted(name for name in OWN if (run_dir / name).exists())


def remove_leftovers(run_dir: Path, names: list[str] | None = None) -> None:
    """Remove rltrain's files from a failed attempt (``names``: only these ones)."""
    for name in leftovers(run_dir) if names is None else names:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def reopen_logs(run_dir: Path) -> None:
    """Close the log file handlers writing into ``run_dir`` (a removed rltrain.log): each
    opens its file afresh at its next message, rather than writing to the deleted one."""
    for handler in logging.getLogger().handlers:
        if (isinstance(handler, logging.FileHandler)
                and Path(handler.baseFilename).parent == run_dir.resolve()):
            handler.close()


def failed_attempt_note(run_dir: Path, found: list[str] | None = None) -> str | None:
    """A note for replacing a failed attempt's leftovers (``found``, default: all of them),
    or None if there are none."""
    found = leftovers(run_dir) if found is None else found
    if not found:
        return None
    summary = read_summary(run_dir)
    status, error = summary.get("status"), summary.get("error")
    why = (f"; it did not start: {error}" if status == "not started" and error else
           "; it was stopped at once, before its first checkpoint" if status == "interrupted"
           else f"; it failed: {error}" if error else "")
    return (f"replacing what an attempt without a checkpoint left in {run_dir} "
            f"({', '.join(found)}{why})")


def ensure_dir(run_dir: Path, what: str = "hydra.run.dir") -> bool:
    """Create ``run_dir`` (and parents), or raise RunDirError saying why it cannot be.
    Returns whether it was there already."""
    try:
        existed = run_dir.exists()
        if existed and not run_dir.is_dir():
            raise RunDirError(f"{what}={run_dir} is a file, not a directory; choose a directory")
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(clip_long_words(f"cannot create {what}={run_dir}: {_why_not(e)}")
                          ) from None
    return existed


def _why_not(e: OSError) -> str:
    """Why a directory cannot be made, and what would do."""
    if e.errno == errno.ENAMETOOLONG:
        longest = max((len(os.fsencode(p)) for p in Path(str(e.filename or "")).parts),
                      default=0)
        which = (f"a name in it has {longest:,} bytes, and a name may have at most 255"
                 if longest > 255 else "the whole path is longer than the system allows")
        return f"{_strerror(e)} ({which}); choose a shorter path"
    return f"{_strerror(e)}; choose a writable location"


class RunDirLock:
    """An exclusive, crash-safe claim on a run directory (see the module docstring)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; RunDirError if another process holds it, or if the directory has
        symbolic links where rltrain writes (it would write through them)."""
        links = links_among([self.run_dir / name for name in (LOCK, *OWN)])
        if links:
            shown = ", ".join(f"{p.relative_to(self.run_dir)} -> {link_target(p)}" for p in links)
            raise RunDirError(f"{self.run_dir} has symbolic links where rltrain writes ({shown}); "
                              "rltrain never writes through a link: remove them, or put the "
                              "files themselves there")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise RunDirError(f"{self.run_dir} is not writable ({_strerror(e)}); a run needs "
                              "to write there: choose another location or fix its "
                              "permissions") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirError(
                f"{self.run_dir} is in use by another rltrain process{holder}; one run owns a "
                "directory at a time: wait for it to end, or choose another directory"
            ) from None
        except OSError:
            pass  # a file system without locks (some network mounts): run unguarded
        self._fd = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:
            pass  # the lock holds without the note

    def in_place(self) -> bool:
        """Whether the lock file this process holds is still the one at its path (False once
        the run directory was removed or replaced)."""
        if self._fd is None:
            return False
        try:
            held, there = os.fstat(self._fd), os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return held.st_nlink > 0 and (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f" (pid {info['pid']} on {info['host']}, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def locked_by_other(run_dir: Path) -> bool:
    """Whether another process holds ``run_dir``'s lock right now."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def lock_holder_pid(run_dir: Path) -> int | None:
    """The pid written in a held lock, if another process holds it."""
    if not locked_by_other(run_dir):
        return None
    try:
        return int(read_json(run_dir / LOCK)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_if_empty(run_dir: Path, made: Sequence[Path] = ()) -> None:
    """Drop a run directory that holds nothing but the lock (an error before the run was
    accepted), and ``outputs/<algo>-<env>/`` if that was its only run, and the directories
    in ``made`` (those this command created above it: ``outputs/`` itself), each only if
    empty. Never the working directory or one above it."""
    if not run_dir.is_dir():
        return
    here = Path.cwd().resolve()
    if run_dir.resolve() == here or run_dir.resolve() in here.parents:
        (run_dir / LOCK).unlink(missing_ok=True)
        return
    names = {p.name for p in run_dir.iterdir()}
    if names <= {LOCK}:
        shutil.rmtree(run_dir, ignore_errors=True)
        parent = run_dir.parent
        if parent.parent.name == "outputs":
            with contextlib.suppress(OSError):
                parent.rmdir()  # only if empty
        for above in sorted(made, key=lambda p: len(p.parts), reverse=True):
            if above.resolve() == here or above.resolve() in here.parents:
                break
            with contextlib.suppress(OSError):
                above.rmdir()  # only if empty


def write_hydra_snapshot(run_dir: Path, cfg: Any, hydra_cfg: Any, overrides: list[str]) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, as Hydra writes them,
    but only once the run has been accepted."""
    out = run_dir / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config.yaml")
    if hydra_cfg is not None:
        OmegaConf.save(hydra_cfg, out / "hydra.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), out / "overrides.yaml")


@contextlib.contextmanager
def claim(run_dir: Path, remove_empty: bool = True, made: Sequence[Path] = ()
          ) -> Iterator[RunDirLock]:
    """Own a new run's directory for the run's lifetime.

    Refuses a directory that holds a run *before* writing anything into it (so a refused
    run changes nothing there), then takes the lock and checks again (two runs started
    together: the second finds the first's lock). A directory holding nothing but the lock
    when the claim ends (an error before the run was accepted) is removed if
    ``remove_empty`` (it was made for this run), else only the lock file; so are the empty
    directories in ``made`` (made above it for this run: a refused first run leaves no
    ``outputs/``).
    """
    ensure_dir(run_dir)
    _refuse_run(run_dir)
    lock = RunDirLock(run_dir)
    lock.acquire()

    def tidy() -> None:
        # a directory removed during the run, or another one made in its place, is not this
        # run's to tidy up (an empty one made by the user would be removed)
        mine = lock.in_place()
        lock.release()
        if not mine:
            pass
        elif remove_empty:
            remove_if_empty(run_dir, made)
        elif {p.name for p in run_dir.iterdir()} == {LOCK}:
            (run_dir / LOCK).unlink(missing_ok=True)

    # a signal that ends the process while the run is built (rltrain.process.signals.building)
    forget = signals.at_hard_stop(tidy)
    try:
        _refuse_run(run_dir)
        yield lock
    finally:
        forget()
        tidy()


def resume_command(run_dir: Path | str, *extra: str) -> str:
    """The command that resumes ``run_dir``, quoted for a POSIX shell so that it works when
    pasted (a directory with spaces or quotes in its name): ``rltrain resume=DIR``."""
    return "rltrain " + shlex.join([f"resume={run_dir}", *extra])


def next_step(run_dir: Path | str) -> str:
    """The one line a finished run ends with: what to do with it next."""
    where = shlex.quote(str(run_dir))
    return (f"next: rltrain-eval {where} to test the best policy (--video to watch it); "
            "rltrain-export and rltrain-report take the same directory")


def _refuse_run(run_dir: Path) -> None:
    used = holds_run(run_dir)
    if used:
        raise RunDirError(
            f"{run_dir} already holds a run ({', '.join(used)}); choose a new hydra.run.dir so "
            f"nothing is overwritten, or continue it with: {resume_command(run_dir)}")


# --------------------------------------------------------------------------- a removed run dir
class RunDirRemoved(TrainingError):
    """The run directory was removed (or another put in its place) while the run trained:
    everything the run had written went with it, and nothing more can be kept."""

    def __init__(self, run_dir: Path, epoch: int) -> None:
        super().__init__(
            f"the run directory {run_dir} was removed during epoch {epoch}: nothing of this run "
            "is left on disk (its checkpoints, records, summary and logs went with it), so it "
            "cannot be resumed; start it again")


class RunDirWatch:
    """Notices that a run directory is removed while the run writes into it.

    Files already open in a removed directory take writes without an error (they go to
    unlinked files), and ``mkdir -p`` would silently make a new, half directory at the old
    path. So the directory as it was when the run began is held open (its inode cannot be
    reused while it is) and compared with what the path names now."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._fd: int | None = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        st = os.fstat(self._fd)
        self._id = (st.st_dev, st.st_ino)

    def removed(self) -> bool:
        """Whether the directory was removed, or the path now names another one."""
        if self._fd is None:
            return False
        try:
            if os.fstat(self._fd).st_nlink == 0:
                return True
            st = os.stat(self.run_dir)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self._id

    def check(self, epoch: int) -> None:
        """Raise RunDirRemoved if the directory was removed (``epoch``: the one in flight)."""
        if self.removed():
            raise RunDirRemoved(self.run_dir, epoch)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --------------------------------------------------------------------------- a run's identity
#: the fields of an identity that say which run it is without its id (for messages, and for
#: checkpoints and directories written before runs had ids)
IDENTITY_FIELDS = ("algo", "env", "seed")


def new_identity(algo: str, env: str, seed: int, run_dir: Path) -> dict[str, Any]:
    """A new run's identity: a random id (two runs never share one, whatever their configs),
    what it trains, and where it was made. Every checkpoint, saved policy and epoch record of
    the run carries it (the records its id alone), so that resume, eval, export and report
    can tell the directory's own files from another run's copied in."""
    return {"id": uuid.uuid4().hex[:16], "algo": algo, "env": env, "seed": seed,
            "made": time.strftime("%Y-%m-%d %H:%M:%S"), "dir": str(run_dir)}


def config_identity(config: Any) -> dict[str, Any] | None:
    """What a run config says of its run's identity (no id: a config does not know it), or
    None when it is not a config of rltrain's."""
    try:
        return {"algo": str(config["algo"]["name"]), "env": str(config["env"]["id"]),
                "seed": config["seed"]}
    except (KeyError, TypeError):
        return None


def write_identity(run_dir: Path, identity: dict[str, Any]) -> None:
    with replacing(run_dir / IDENTITY) as tmp:
        write_new(tmp, json.dumps(identity, indent=2) + "\n")


def read_identity(run_dir: Path) -> dict[str, Any] | None:
    """The directory's own identity: ``run.json`` (None when there is none: a run made before
    runs had ids, or no run); RunDirError when it is there but not one."""
    path = run_dir / IDENTITY
    if not path.exists() and not path.is_symlink():
        return None
    try:
        identity = read_json(path)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path} cannot be read as a run's identity ({e}); it is how "
                          "rltrain tells this run's files from another's") from None
    if not (isinstance(identity, dict) and isinstance(identity.get("id"), str)
            and all(key in identity for key in IDENTITY_FIELDS)):
        raise RunDirError(f"{path} is not a run's identity (it needs id, "
                          f"{', '.join(IDENTITY_FIELDS)}); it is how rltrain tells this run's "
                          "files from another's")
    return identity


def same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two identities are one run's: their ids when both have one, else what both say
    they train (the best a file written before runs had ids allows: an old saved policy
    records no seed)."""
    if isinstance(a.get("id"), str) and isinstance(b.get("id"), str):
        return bool(a["id"] == b["id"])
    return all(a[key] == b[key] for key in IDENTITY_FIELDS if key in a and key in b)


def describe_identity(identity: dict[str, Any]) -> str:
    """``ppo on CartPole-v1, seed 0, run 4f3a9c0d1e2b5a67 made in /runs/a``."""
    what = f"{identity.get('algo')} on {identity.get('env')}"
    if "seed" in identity:
        what += f", seed {identity['seed']}"
    if isinstance(identity.get("id"), str):
        what += f", run {identity['id']}"
        if isinstance(identity.get("dir"), str):
            what += f" made in {identity['dir']}"
    return what
