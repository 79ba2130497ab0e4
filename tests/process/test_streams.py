"""The process's standard streams and its exit (rltrain.process.streams), on real pipes and devices:
output is dropped once the reader of a pipe has gone, any other write error still surfaces,
and the fast exit runs what a normal exit runs first. (A whole run piped into ``head -1`` is
tests/assembly/test_faults.py's.)"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rltrain.process.streams import PipeSafe, clip_long_words, guard_streams


@contextlib.contextmanager
def text_stream(fd: int, *, buffered: bool) -> Iterator[io.TextIOWrapper]:
    """A text stream writing to ``fd`` (buffered: errors meet the flush; unbuffered: the
    write), closed at the end whatever the closing raises."""
    raw = open(fd, "wb", buffering=0)  # noqa: SIM115 - closed below
    stream = io.TextIOWrapper(io.BufferedWriter(raw) if buffered else raw,
                              write_through=not buffered)
    try:
        yield stream
    finally:
        with contextlib.suppress(OSError):
            stream.close()
        with contextlib.suppress(OSError):
            raw.close()


def orphaned_pipe(*, buffered: bool) -> contextlib.AbstractContextManager[io.TextIOWrapper]:
    """A text stream writing into a pipe whose reading end is already closed (the reader of
    ``rltrain ... | head -1`` has exited). Unbuffered, a write meets EPIPE at once; buffered,
    the flush does."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    return text_stream(write_fd, buffered=buffered)


def test_the_pipe_is_really_broken():
    """The premise: writing to it raises EPIPE (Python ignores SIGPIPE)."""
    with orphaned_pipe(buffered=False) as stream, pytest.raises(BrokenPipeError):
        stream.write("x")


def test_output_is_dropped_once_the_reader_is_gone():
    with orphaned_pipe(buffered=False) as stream:
        safe = PipeSafe(stream)
        assert not safe.isatty()
        assert safe.write("epoch 1\n") == len("epoch 1\n")  # as if written: nothing raised
        assert safe.write("epoch 2\n") == len("epoch 2\n")
        safe.flush()
        assert safe.fileno() == stream.fileno() and safe.encoding == stream.encoding


def test_a_broken_pipe_met_by_the_flush_is_dropped_too():
    with orphaned_pipe(buffered=True) as stream:
        safe = PipeSafe(stream)
        assert safe.write("held in the buffer\n") == len("held in the buffer\n")
        safe.flush()  # EPIPE here
        assert safe.write("and after\n") == len("and after\n")
        safe.flush()


def hung_up_terminal(*, buffered: bool) -> contextlib.AbstractContextManager[io.TextIOWrapper]:
    """A text stream on a terminal that was closed: a pseudo-terminal whose other end is gone,
    where every write fails with EIO (what a run's output meets after SIGHUP)."""
    master, slave = os.openpty()
    os.close(master)
    return text_stream(slave, buffered=buffered)


@pytest.mark.parametrize("buffered", [False, True])
def test_output_to_a_closed_terminal_is_dropped(buffered):
    with hung_up_terminal(buffered=buffered) as stream:
        with pytest.raises(OSError) as e:  # the premise: EIO
            stream.write("x")
            stream.flush()
        assert e.value.errno == errno.EIO
        safe = PipeSafe(stream)
        assert safe.write("rltrain: SIGHUP received\n") == len("rltrain: SIGHUP received\n")
        safe.flush()
        assert safe.write("resume with: ...\n") == len("resume with: ...\n")
        safe.flush()


@contextlib.contextmanager
def full_device(*, buffered: bool) -> Iterator[io.TextIOWrapper]:
    """A text stream on ``/dev/full``, where every write fails with ENOSPC (a full disk)."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    raw = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 - closed below
    stream = io.TextIOWrapper(io.BufferedWriter(raw) if buffered else raw,
                              write_through=not buffered)
    try:
        yield stream
    finally:
        with contextlib.suppress(OSError):
            stream.close()
        raw.close()


def test_other_write_errors_are_raised():
    """A full disk is not a reader that went away: the error surfaces, every time."""
    with full_device(buffered=False) as stream:
        safe = PipeSafe(stream)
        for text in ("x", "y"):
            with pytest.raises(OSError) as e:
                safe.write(text)
            assert e.value.errno == errno.ENOSPC
    with full_device(buffered=True) as stream:
        safe = PipeSafe(stream)
        safe.write("held in the buffer")
        with pytest.raises(OSError) as e:
            safe.flush()
        assert e.value.errno == errno.ENOSPC


def test_a_working_stream_is_written_through():
    target = io.StringIO()
    safe = PipeSafe(target)
    assert safe.write("hello\n") == 6
    safe.flush()
    assert target.getvalue() == "hello\n" and safe.getvalue() == "hello\n"  # passed through


def test_guard_streams_wraps_each_stream_once(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    guard_streams()
    first = sys.stdout
    guard_streams()
    assert isinstance(sys.stdout, PipeSafe) and sys.stdout is first
    assert isinstance(sys.stderr, PipeSafe)
    print("through", file=sys.stderr)
    assert err.getvalue() == "through\n"


FAST_EXIT = """
import atexit, logging, sys
from rltrain.process.streams import fast_exit

logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
atexit.register(lambda: print("atexit ran", end=""))
logging.getLogger("rltrain").info("logged before the exit")
sys.stdout.write("buffered, ")
fast_exit(3)
"""


def test_fast_exit_runs_what_a_normal_exit_runs_then_exits_with_the_code(tmp_path):
    log = tmp_path / "run.log"
    res = subprocess.run([sys.executable, "-c", FAST_EXIT, str(log)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert res.stdout == "buffered, atexit ran"
    assert "logged before the exit" in log.read_text()


def test_long_words_in_a_message_are_clipped():
    value = "9" * 100_000
    message = clip_long_words(f"algo.lr='{value}' is not valid: give a number")
    # the word is algo.lr='999...9' (100,010 characters): its first 100, its length, its last 20
    assert message.startswith("algo.lr='" + "9" * 91 + "...[100,010 characters]...")
    assert message.endswith("...[100,010 characters]..." + "9" * 19 + "' is not valid: give a "
                            "number")
    assert len(message) < 200
    ordinary = "unknown key algo.lrr; did you mean algo.lr? (/a/path/of/ordinary/length)"
    assert clip_long_words(ordinary) == ordinary


def test_an_error_echoing_a_huge_value_stays_short(tmp_path):
    """The CLI, resume and each companion tool print one short line for a 100,000-character
    value (a path that long is refused by the system: named, not a traceback)."""
    huge = "A" * 100_000
    for argv in (["rltrain", f"env.id={huge}"], ["rltrain", "resume=/nowhere", f"seed={huge}"],
                 ["rltrain", f"resume=/{huge}"], ["rltrain-eval", f"/{huge}"],
                 ["rltrain-export", f"/{huge}"], ["rltrain-report", f"/{huge}"],
                 ["rltrain-collect", f"/{huge}", "--episodes", "1", "--out", "x.h5"]):
        res = subprocess.run([str(Path(sys.executable).parent / argv[0]), *argv[1:]],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stderr[:300]
        assert "characters]..." in res.stderr and len(res.stderr) < 1200, res.stderr[:300]
        assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
