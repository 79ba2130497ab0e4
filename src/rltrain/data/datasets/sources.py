"""A dataset named by the user (``dataset=SPEC``, ``--merge SPEC``): an rltrain file or a
Minari dataset in local storage (``minari:ID``). :func:`load_dataset` reads either, checked;
:func:`dataset_fingerprint` is the hash that identifies its contents, which an offline run
records so that a changed dataset is refused at resume.

Imports: :mod:`rltrain.config.schemas`, and of this package :mod:`~rltrain.data.datasets.dataset`,
:mod:`~rltrain.data.datasets.files` and :mod:`~rltrain.data.datasets.minari`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import Dataset
from rltrain.data.datasets.files import load_file
from rltrain.data.datasets.minari import MINARI_PREFIX, load_minari, minari_dir


def load_dataset(spec: str, *, consent: bool = False) -> Dataset:
    """A dataset from an rltrain file (``.h5``, ``.hdf5``, ``.npz``) or a Minari dataset in
    local storage (``minari:ID``; ``MINARI_DATASETS_PATH`` chooses the storage). A Minari
    dataset whose env Minari would build from its recorded spec, with code other than
    gymnasium's, is refused unless ``consent`` (``trust=true``; :mod:`rltrain.rundir.trust`).

    :raises ConfigError: one line naming the file or id and what would be right.
    """
    spec = str(spec)
    if spec.startswith(MINARI_PREFIX):
        return load_minari(spec[len(MINARI_PREFIX):], spec, consent)
    return load_file(spec)


def dataset_fingerprint(spec: str) -> dict[str, Any]:
    """What identifies a dataset's contents: ``{"spec", "path", "sha256"}``. The hash is
    of the file's bytes, or for ``minari:ID`` of the dataset folder's files (relative path
    and bytes, in sorted order); both are read in chunks."""
    spec = str(spec)
    h = hashlib.sha256()
    if spec.startswith(MINARI_PREFIX):
        path = minari_dir(spec[len(MINARI_PREFIX):], spec).resolve()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(file.relative_to(path).as_posix().encode() + b"\0")
            _hash_file(file, h)
    else:
        path = Path(spec).resolve()
        if not path.is_file():
            raise ConfigError(f"dataset {spec} does not exist")
        _hash_file(path, h)
    return {"spec": spec, "path": str(path), "sha256": h.hexdigest()}


def _hash_file(path: Path, h: Any, chunk: int = 1 << 20) -> None:
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
