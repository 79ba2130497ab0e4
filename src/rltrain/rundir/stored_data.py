"""What a run stored, read back as plain data, bounded: ``.hydra/config.yaml``,
``overrides.yaml``, ``hydra.yaml``, and the config inside a checkpoint.

A run directory may come from another machine or person (DESIGN.md, "Files are data, not
code"), and YAML lets a few hundred bytes stand for a billion values: an anchor (``&a``) names
a list, an alias (``*a``) repeats it, ten aliases to a list of ten aliases to ... (the
"billion laughs"). PyYAML builds such a document cheaply, each repeated part shared once in
memory; what comes after does not: ``OmegaConf.create``, flattening a config for the report,
printing it, each copy every repetition until memory runs out. A merge key (``<<: *a``) does
the same inside PyYAML itself, which copies the merged pairs into each mapping.

So every reader of a stored config goes through :func:`read_yaml` (and a checkpoint's config,
unpickled, through :func:`check_plain`), which refuses, naming the file and the field or line:

- a file that is not a regular file, larger than :data:`MAX_BYTES`, or not UTF-8;
- more than :data:`MAX_VALUES` values, or nesting deeper than :data:`MAX_DEPTH`, counted while
  the document is parsed (PyYAML's composer recurses per level and would end in a
  RecursionError; its scanner's look-ahead over open brackets costs the square of their
  number);
- a merge key, and an integer of more than :data:`MAX_INT_DIGITS` digits (Python refuses to
  convert one of over 4,300, with a ValueError from deep inside PyYAML);
- more than :data:`MAX_VALUES` values once every alias is expanded: the walk counts each
  repetition and stops at the bound, so it costs no more than the bound however much the
  document would expand to;
- anything but plain data: mappings with string keys, lists, strings, numbers, booleans and
  null.

``OmegaConf.save`` writes nothing else, and no alias at all (it dumps a fresh container for
every node, and PyYAML aliases only a container it meets twice), so a config rltrain wrote is
never refused: it holds a few hundred values four or five levels deep. Values are read as
``OmegaConf.load`` reads them (with its loader: ``1e-3`` is a float, a date a string, a key
given twice an error), so that a config means here what it meant when OmegaConf wrote it.

A run's own JSON files are read through here too, bounded the same way: ``summary.json`` by
:func:`read_json` and each line of ``epochs.jsonl`` by :func:`json_lines`, at most
:data:`MAX_RECORD_BYTES` each (rltrain writes records of 1 or 2 KB). A line of a gigabyte is
not read whole: its first bytes are, and the rest is skipped without being held, so a resume,
a sweep's status or a report costs the same memory whatever a file holds.

Imports only :mod:`rltrain.config.schemas` (for ConfigError).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rltrain.config.schemas import ConfigError

#: a stored config is a few KB (hydra.yaml, the largest, about 4 KB)
MAX_BYTES = 2**20
#: values (mappings, lists, keys and scalars), every alias expanded; a config has ~150 and
#: hydra.yaml ~300. PyYAML (pure Python, as OmegaConf loads) parses about 10,000 a second on a
#: busy core, so the bound is also what a hostile file can cost in time
MAX_VALUES = 10_000
#: levels of nesting; a config has 4 or 5
MAX_DEPTH = 64
#: digits of an integer (a seed is below 2**32; Python converts at most 4,300)
MAX_INT_DIGITS = 100
#: a summary.json or one line of epochs.jsonl (rltrain writes 1 or 2 KB; a resumed run's
#: summary grows by a line per resume)
MAX_RECORD_BYTES = 2**20
_PLAIN = (str, int, float, bool, type(None))
_MERGE = "tag:yaml.org,2002:merge"


class StoredDataError(ConfigError):
    """A stored file that cannot be read, or is not plain data within the bounds. ``str()``:
    ``PATH cannot be read: PROBLEM`` or ``PATH is damaged (PROBLEM)``."""

    def __init__(self, what: str | Path, problem: str, *, readable: bool = True) -> None:
        #: the message without the file's name: ``is damaged (PROBLEM)``, ``cannot be read: ..``
        self.verdict = f"is damaged ({problem})" if readable else f"cannot be read: {problem}"
        super().__init__(f"{what} {self.verdict}")
        #: what is wrong, alone
        self.problem = problem
        #: whether the bytes could be read (else: not a file, too large, not UTF-8)
        self.readable = readable


def read_yaml(path: Path) -> Any:
    """The plain data in the YAML file ``path`` (None for an empty one), within the bounds;
    raises :class:`StoredDataError` naming the file, the problem and the field or line."""
    text = _read_text(path)
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    except _Refused as e:
        raise StoredDataError(path, str(e)) from None
    except Exception as e:  # noqa: BLE001 - any error of the YAML parser on foreign bytes
        raise StoredDataError(path, _yaml_problem(e)) from None
    finally:
        loader.dispose()
    check_plain(data, path)
    return data


def check_plain(data: Any, what: str | Path) -> None:
    """Refuse ``data`` unless it is plain data (mappings with string keys, lists, strings,
    numbers, booleans, null) of at most :data:`MAX_VALUES` values, each repetition of a
    shared part counted, and :data:`MAX_DEPTH` levels; ``what`` names it in the message.

    Visits at most MAX_VALUES values, so data that shares parts (YAML aliases, a pickle's
    memo) costs no more than the bound to check, however much it would expand to; a cycle is
    refused by its depth."""
    count = 0
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, field, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise StoredDataError(what, f"it expands to more than {MAX_VALUES:,} values, parts "
                                  "of it repeated by YAML aliases or shared references, a "
                                  f"'billion laughs'?; {_WRITES}")
        if depth > MAX_DEPTH:
            raise StoredDataError(what, f"{_name(field)} is nested more than {MAX_DEPTH} levels "
                                  f"deep, or refers to itself; {_WRITES}")
        if isinstance(value, dict):
            children = []
            for key, item in value.items():
                if not isinstance(key, str):
                    raise StoredDataError(what, f"{_name(field)} has the key {_short(key)} "
                                          f"({_a(key)}); rltrain writes string keys only")
                children.append((item, f"{field}.{key}" if field else key, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend((item, f"{field}[{i}]", depth + 1)
                         for i, item in reversed(list(enumerate(value))))
        elif not isinstance(value, _PLAIN):
            raise StoredDataError(what, f"{_name(field)} is {_a(value)} ({_short(value)}); "
                                  "rltrain writes plain data only: mappings, lists, strings, "
                                  "numbers, booleans and null")


#: what a config rltrain wrote looks like, for the messages
_WRITES = "a config rltrain writes holds a few hundred values, 4 or 5 levels deep, no aliases"


def _name(field: str, limit: int = 80) -> str:
    if len(field) > limit:
        field = field[: limit // 2 - 2] + " ... " + field[-(limit // 2 - 3):]
    return field or "the top level"


def _a(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes, refused unless it is a regular file (O_NONBLOCK: a
    FIFO at the name would block the open forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise StoredDataError(path, e.strerror or str(e), readable=False) from None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise StoredDataError(path, "not a regular file", readable=False)
    return f


def _read_bytes(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the regular file ``path`` (one more than allowed tells
    the caller it is too large)."""
    with _open_regular(path) as f:
        try:
            return f.read(limit + 1)
        except OSError as e:
            raise StoredDataError(path, e.strerror or str(e), readable=False) from None


def _read_text(path: Path) -> str:
    """The file's text, refused unless it is a regular file of at most MAX_BYTES of UTF-8."""
    data = _read_bytes(path, MAX_BYTES)
    if len(data) > MAX_BYTES:
        raise StoredDataError(path, f"larger than {MAX_BYTES // 2**20} MiB, where a config "
                              "rltrain writes is a few KB", readable=False)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoredDataError(path, str(e), readable=False) from None


class _Refused(Exception):
    """Raised inside the loader; read_yaml names the file."""


def _deeper_than(mark: Any) -> _Refused:
    return _Refused(f"nested more than {MAX_DEPTH} levels deep at line {mark.line + 1}; "
                    f"{_WRITES}")


_LOADER: Any = None


def _loader_class() -> Any:
    """OmegaConf's YAML loader (what ``OmegaConf.load`` reads with), bounded. Made on first
    use: omegaconf is imported here, not at the top, so that a command's --help does not pay
    for it."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    from omegaconf._utils import get_yaml_loader  # OmegaConf.load's own loader

    class BoundedLoader(get_yaml_loader()):  # type: ignore[misc]
        depth = 0
        nodes = 0

        def fetch_flow_collection_start(self, token_class: Any) -> None:
            # before the composer sees a node, the scanner looks ahead to the end of every
            # open '[' or '{', and over each of them per token: the square of their number
            if self.flow_level >= MAX_DEPTH:
                raise _deeper_than(self.get_mark())
            super().fetch_flow_collection_start(token_class)

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            self.nodes += 1
            try:
                if self.nodes > MAX_VALUES:
                    raise _Refused(f"it holds more than {MAX_VALUES:,} values; {_WRITES}")
                if self.depth > MAX_DEPTH:
                    raise _deeper_than(self.peek_event().start_mark)
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            if node.tag == _MERGE:
                raise _Refused(f"the YAML merge key '<<' at line {node.start_mark.line + 1}, "
                               "which rltrain never writes")
            return node

        def construct_yaml_int(self, node: Any) -> Any:
            digits = sum(c.isdigit() for c in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise _Refused(f"an integer of {digits:,} digits at line "
                               f"{node.start_mark.line + 1}; rltrain writes none this long")
            return super().construct_yaml_int(node)

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    _LOADER = BoundedLoader
    return _LOADER


def _yaml_problem(e: BaseException) -> str:
    """A parser's error in one line: its problem and line (PyYAML's text spans several)."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem:
        return f"{problem}, line {mark.line + 1}" if mark is not None else str(problem)
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


# --------------------------------------------------------------------------- a run's JSON files
def read_json(path: Path) -> Any:
    """The JSON value in ``path`` (a run's ``summary.json``), read only if it is a regular
    file of at most :data:`MAX_RECORD_BYTES`; raises :class:`StoredDataError` (a ValueError)
    naming the file and the problem."""
    data = _read_bytes(path, MAX_RECORD_BYTES)
    if len(data) > MAX_RECORD_BYTES:
        raise StoredDataError(path, f"larger than {MAX_RECORD_BYTES // 2**20} MiB, where "
                              "rltrain writes a few KB", readable=False)
    value, problem = _parse_json(data)
    if problem is not None:
        raise StoredDataError(path, problem)
    return value


@dataclass(frozen=True)
class JsonLine:
    """One line of a JSON-lines file (``epochs.jsonl``), as :func:`json_lines` read it."""

    #: counted from 1, blank lines included
    number: int
    #: the parsed JSON value (None when there is a problem, or the line says ``null``)
    value: Any
    #: what is wrong with the line (not JSON, too long, nested too deeply), else None
    problem: str | None
    #: the file's last line without its newline: a write cut short (a kill, a full disk)
    torn: bool
    #: longer than the bound: its bytes were skipped, not read
    too_long: bool = False

    def where(self, path: Path | str) -> str:
        """``NAME line N``, for messages."""
        return f"{Path(path).name} line {self.number}"


def json_lines(path: Path, limit: int = MAX_RECORD_BYTES) -> Iterator[JsonLine]:
    """Each non-blank line of ``path`` parsed as JSON, one at a time: never more than
    ``limit`` bytes of a line are held, a longer line's problem says so (its bytes skipped
    unread into memory). Raises :class:`StoredDataError` if ``path`` is not a regular file or
    cannot be read."""
    with _open_regular(path) as f:
        number = 0
        while True:
            try:
                line = f.readline(limit + 1)
            except OSError as e:
                raise StoredDataError(path, e.strerror or str(e), readable=False) from None
            if not line:
                return
            number += 1
            if len(line) > limit:
                torn = not _skip_line(f, line)
                yield JsonLine(number, None, f"longer than {_size(limit)}, where a record "
                               "rltrain writes is about 1 KB", torn, too_long=True)
                continue
            if not line.strip():
                continue
            value, problem = _parse_json(line)
            yield JsonLine(number, value, problem, not line.endswith(b"\n"))


def _skip_line(f: IO[bytes], start: bytes) -> bool:
    """Read past the rest of the line ``start`` began, a chunk at a time (nothing kept);
    whether it ended with a newline."""
    chunk = start
    while chunk and not chunk.endswith(b"\n"):
        chunk = f.readline(2**20)
    return chunk.endswith(b"\n")


def _parse_json(data: bytes) -> tuple[Any, str | None]:
    """(value, None), or (None, what is wrong)."""
    try:
        return json.loads(data), None
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        return None, f"not JSON ({str(e).splitlines()[0][:80]})"


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"
