"""Dataset files: rltrain's own ``.h5``/``.hdf5`` and ``.npz``, written atomically and read back.

The format: one array per field of :data:`~rltrain.data.datasets.dataset.ARRAYS` (obs and
next_obs replaced by :data:`~rltrain.data.datasets.frames.FRAME_ARRAYS` where they are
chained frame stacks), one more per declared field under its name (``Dataset.fields``, listed
in the meta's ``fields``), and the meta record as a JSON string: in HDF5 (h5py) one HDF5
dataset per array, gzip for the large ones, the meta as an attribute; in ``.npz`` (numpy) the
meta as an entry. :func:`save_dataset` writes a file atomically, refusing before a byte is
written one that cannot fit; :func:`load_file` reads one back, checked
(:func:`~rltrain.data.datasets.validation.validated`). Every problem a user can fix raises
:class:`rltrain.config.schemas.ConfigError` with one line that names the file.

A reader takes rltrain's arrays and the declared fields the meta lists, by name; any other
array in a file is not read, as files have always been read (refusing one would refuse files
that load today). Training reaches only what is read, and the file's SHA-256 (the run's
record of its dataset) covers every byte anyway.

Imports: numpy, :mod:`rltrain.config.schemas`, :mod:`rltrain.rundir.files`, and of this package
:mod:`~rltrain.data.datasets.dataset`, :mod:`~rltrain.data.datasets.frames` and
:mod:`~rltrain.data.datasets.validation`; h5py (0.18 s) only where an HDF5 file is read or
written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import threading
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import ARRAYS, FORMAT, Dataset
from rltrain.data.datasets.frames import FRAME_ARRAYS, chain_frames, unchain_frames
from rltrain.data.datasets.validation import first_line, validated
from rltrain.rundir.files import open_new_bytes

#: the file suffixes rltrain reads and writes
SUFFIXES = (".h5", ".hdf5", ".npz")


# --------------------------------------------------------------------------- writing
def _suffix(path: Path, verb: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        shown = f"suffix {path.suffix!r}" if path.suffix else "no suffix"
        raise ConfigError(f"{path}: cannot {verb} a dataset with {shown}; use .h5, .hdf5 "
                          "(HDF5) or .npz (numpy)")
    return suffix


def save_dataset(ds: Dataset, path: Path | str) -> Path:
    """Write ``ds`` to ``path`` (.h5/.hdf5 or .npz) atomically: a temporary file in the same
    folder, renamed over ``path`` once complete, so that an old file there stays whole until
    then and an interrupted or failed write leaves nothing behind.

    An HDF5 file is made in memory first (h5py's core driver) and then written as plain
    bytes: the HDF5 library meets no full disk (its failed writes surface as errors at
    garbage collection, and a segmentation fault followed), and a signal during its work
    (which it may swallow) is held until it is done (:func:`_signals_held`).

    :raises ConfigError: an unknown suffix. OSError: the file system's own error; for a full
        disk (ENOSPC) its message says how much the file needs and how much is free.
    """
    path = Path(path)
    suffix = _suffix(path, "write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    meta = json.dumps(ds.meta, allow_nan=False)
    arrays = file_arrays(ds)
    if suffix == ".npz":
        # np.savez stores the arrays as they are: their bytes, headers and the zip directory
        size = sum(a.nbytes for a in arrays.values()) + len(meta.encode()) + 512 * len(arrays)

        def write(f: BinaryIO) -> None:
            np.savez(f, **arrays, meta=np.array(meta))  # a file object: no second ".npz"
    else:
        image = _hdf5_image(arrays, meta)
        size = len(image)

        def write(f: BinaryIO) -> None:
            f.write(image)
    _check_room(path, size)
    try:
        with open_new_bytes(tmp) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            raise _no_room(path, size) from None
        raise
    return path


#: a full disk, and a quota reached
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def encoded_size(ds: Dataset, suffix: str) -> int:
    """Bytes the file of ``ds`` takes as :func:`save_dataset` writes it (``suffix``: .npz,
    .h5 or .hdf5), compressed as it would be: for an estimate of what a whole collection
    will need from a part of it (rltrain-collect)."""
    meta = json.dumps(ds.meta, allow_nan=False)
    arrays = file_arrays(ds)
    if suffix.lower() == ".npz":
        return sum(a.nbytes for a in arrays.values()) + len(meta.encode()) + 512 * len(arrays)
    return len(_hdf5_image(arrays, meta))


def file_arrays(ds: Dataset) -> dict[str, Any]:
    """The arrays a file of ``ds`` holds: :data:`ARRAYS`, with obs and next_obs replaced by
    :data:`FRAME_ARRAYS` where they are chained frame stacks, then its declared fields."""
    arrays: dict[str, Any] = {name: getattr(ds, name) for name in ARRAYS}
    chained = chain_frames(ds.obs, ds.next_obs, ds.dones)
    if chained is not None:
        del arrays["obs"], arrays["next_obs"]
        arrays.update(zip(FRAME_ARRAYS, chained, strict=True))
    arrays.update(ds.fields)
    return arrays


def _hdf5_image(arrays: Mapping[str, np.ndarray], meta: str) -> bytes:
    """The bytes of rltrain's HDF5 file of these arrays, made in memory."""
    import h5py

    # backing_store=False: the name is only a label, nothing is written there
    with _signals_held(), h5py.File("rltrain-dataset.h5", "w", driver="core",
                                    backing_store=False) as f:
        f.attrs["format"] = FORMAT
        f.attrs["meta"] = meta
        for name, a in arrays.items():
            big = a.size > 1024
            f.create_dataset(name, data=a, track_times=False,
                             compression="gzip" if big else None,
                             compression_opts=4 if big else None, shuffle=big)
        f.flush()
        image: bytes = f.id.get_file_image()
    return image


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs, then take the first one that
    came as it would have been taken (Ctrl-C: KeyboardInterrupt). In the main thread only
    (elsewhere, signals go to the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    before = {s: signal.signal(s, lambda signum, _: came.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if came:
            signal.raise_signal(came[0])


def free_bytes(folder: Path) -> int | None:
    """Bytes this process may still write in ``folder``'s file system (None: not known)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail  # root may use the reserve
    return blocks * st.f_frsize


def _check_room(path: Path, size: int) -> None:
    """Refuse, before writing a byte, a file that cannot fit where it goes."""
    free = free_bytes(path.parent)
    if free is not None and size > free:
        raise _no_room(path, size)


def _no_room(path: Path, size: int) -> OSError:
    """ENOSPC for ``path``, saying what was short: bytes, or room for one more file."""
    free = free_bytes(path.parent)
    why = f"the dataset needs {size_text(size)}"
    if free is not None and free < size:
        why += f", and {size_text(free)} is free there"
    else:
        with contextlib.suppress(OSError):
            if os.statvfs(path.parent).f_ffree == 0:
                why = "the file system there holds as many files as it can"
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({why})", str(path))


def size_text(n: int) -> str:
    """A size for people: ``812 bytes``, ``1.3 MB``."""
    size: float = n  # the int itself while it is counted in bytes (no ".0")
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return str(size)


# --------------------------------------------------------------------------- reading
def load_file(spec: str) -> Dataset:
    """A dataset from an rltrain file (``.h5``, ``.hdf5``, ``.npz``), checked.

    :raises ConfigError: one line naming the file and what would be right.
    """
    path = Path(spec)
    _check_regular_file(path, spec)
    arrays, meta_text = _read_file(path, spec)
    return validated(arrays, _parsed_meta(meta_text, spec), spec)


def _check_regular_file(path: Path, spec: str) -> None:
    """Refuse a path that is missing, unreadable, or no regular file (a directory, a FIFO)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"dataset {spec} does not exist; pass an .h5, .hdf5 or .npz file "
                          "written by rltrain-collect, or minari:ID") from None
    except OSError as e:
        raise ConfigError(f"dataset {spec} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ConfigError(f"dataset {spec} is {what}; pass an .h5, .hdf5 or .npz file "
                          "written by rltrain-collect, or minari:ID")


def _parsed_meta(meta_text: str | None, spec: str) -> dict[str, Any]:
    """The meta record of a file: a JSON object."""
    if meta_text is None:
        raise ConfigError(f"dataset {spec} has no meta record (env, spaces); it was not "
                          "written by rltrain-collect")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"dataset {spec} has a damaged meta record (not JSON: {e})") from None
    except RecursionError:
        raise ConfigError(f"dataset {spec} has a damaged meta record (JSON nested too deep "
                          "to read)") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"dataset {spec} has a damaged meta record (not a JSON object)")
    return meta


def _read_file(path: Path, spec: str) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays and the meta JSON of an rltrain dataset file."""
    suffix = _suffix(path, "read")
    arrays, meta = _read_npz(path, spec) if suffix == ".npz" else _read_hdf5(path, spec)
    if all(name in arrays for name in FRAME_ARRAYS) and not {"obs", "next_obs"} & set(arrays):
        unchain_frames(arrays, spec)
    missing = [name for name in ARRAYS if name not in arrays]
    if len(missing) == len(ARRAYS):
        raise ConfigError(f"{spec} is not an rltrain dataset (it has none of the arrays "
                          f"{', '.join(ARRAYS)}); make one with rltrain-collect")
    if missing:
        raise ConfigError(f"dataset {spec} has no {' or '.join(missing)} array; an rltrain "
                          f"dataset holds {', '.join(ARRAYS)}")
    return arrays, meta


def _listed(meta: str | None) -> tuple[str, ...]:
    """The arrays a file is read for: rltrain's, and the declared fields its meta lists
    (their names only, which must be identifiers: an HDF5 name with a "/" would be a path;
    the list itself is checked with the arrays, :func:`validated`)."""
    try:
        listed = json.loads(meta)["fields"] if meta is not None else []
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        listed = []
    names = [d.get("name") for d in listed if isinstance(d, dict)] \
        if isinstance(listed, list) else []
    extra = (n for n in names if isinstance(n, str) and n.isidentifier())
    return tuple(dict.fromkeys((*ARRAYS, *FRAME_ARRAYS, *extra)))


def _read_npz(path: Path, spec: str) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays of an ``.npz`` file that rltrain knows or its meta lists, and its meta
    entry (None: none)."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            meta = str(z["meta"][()]) if "meta" in names else None
            for name in _listed(meta):
                if name in names:
                    arrays[name] = z[name]
    except MemoryError:
        raise ConfigError(f"dataset {spec} declares arrays larger than the memory "
                          "available; it cannot be loaded here") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
        raise ConfigError(f"dataset {spec} is not a readable .npz file (damaged or "
                          f"truncated?): {first_line(e)}") from None
    return arrays, meta


def _read_hdf5(path: Path, spec: str) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays of an HDF5 file that rltrain knows or its meta lists (each stored in the
    file itself), and its meta attribute as text (None: none)."""
    import h5py

    arrays: dict[str, np.ndarray] = {}
    try:
        with h5py.File(path, "r") as f:
            meta = _text(f.attrs.get("meta"))
            for name in _listed(meta):
                if name not in f:
                    continue
                _check_stored_here(f, name, spec)
                if isinstance(f[name], h5py.Dataset):
                    arrays[name] = f[name][()]
    except ConfigError:
        raise
    except MemoryError:
        raise ConfigError(f"dataset {spec} declares arrays larger than the memory "
                          "available; it cannot be loaded here") from None
    except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:
        raise ConfigError(f"dataset {spec} is not a readable HDF5 file (damaged or "
                          f"truncated?): {first_line(e)}") from None
    return arrays, meta


def _text(meta: Any) -> str | None:
    """An HDF5 meta attribute as text (None: none)."""
    if isinstance(meta, bytes):
        return meta.decode("utf-8", "replace")
    return meta if meta is None or isinstance(meta, str) else str(meta)


def _check_stored_here(f: Any, name: str, spec: str) -> None:
    """Every byte training reads must be in the file itself, so that its SHA-256 covers it:
    an array that is a link (to another file or place) or keeps its data in other files
    (external storage, a virtual dataset) is refused."""
    import h5py

    link = f.get(name, getlink=True)
    if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
        where = f"{link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink) \
            else link.path
        raise ConfigError(f"dataset {spec}: its {name} array is a link to {where}; rltrain reads "
                          "only data stored in the dataset file itself (its SHA-256 must cover "
                          "what training reads): write the arrays into the file")
    node = f[name]
    if isinstance(node, h5py.Dataset) and (node.external or node.is_virtual):
        what = "external storage" if node.external else "a virtual dataset"
        raise ConfigError(f"dataset {spec}: its {name} array uses {what}, keeping its data "
                          "in other files; rltrain reads only data stored in the dataset file "
                          "itself (its SHA-256 must cover what training reads)")
