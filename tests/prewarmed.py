"""Start rltrain's console scripts in the tests from a pre-warmed interpreter.

Most of a CLI run's start-up is importing torch (about 2.3 s of 3.5 s on a 2-core machine),
and the suite starts some 450 CLI processes. This module keeps, per test process, one
interpreter that has imported the heavy third-party libraries (torch, numpy, gymnasium,
Hydra, OmegaConf) and nothing of rltrain; each CLI run is a process forked from it, which
then takes the test's arguments, environment, working directory and standard streams and
calls the console script's entry point, as ``bin/rltrain`` would. It is a real process of
its own (its own pid, signals, files and exit status); rltrain's own modules are imported
in it afresh. What differs from a fresh interpreter: those libraries were imported before
the run's environment was set (a run whose ``PYTHON*`` variables differ, or that gets a
terminal, a ``preexec_fn`` or extra fds, is started the ordinary way instead).

``subprocess.Popen`` (and so ``subprocess.run``) is patched, for the test process only, to
start a program of this environment's ``bin/`` named ``rltrain*`` this way. Set
``RLTRAIN_TEST_FRESH_PROCESSES=1`` to start every one the ordinary way (the suite passes
both ways); a test that passes it in one run's ``env`` starts that run the ordinary way (a
test of what happens while torch is being imported).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import inspect
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
#: the variables read as an interpreter starts: a run that sets them otherwise starts fresh
_STARTUP_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
                 "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS",
                 "PYTHONDEVMODE", "PYTHONOPTIMIZE", "PYTHONFAULTHANDLER", "PYTHONHASHSEED",
                 "PYTHONDONTWRITEBYTECODE", "PYTHONMALLOC", "PYTHONTRACEMALLOC",
                 "PYTHONPROFILEIMPORTTIME", "PYTHONINSPECT", "LC_ALL", "LC_CTYPE", "LANG",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


# --------------------------------------------------------------------------- the server
def _send_fds(conn: socket.socket, data: bytes, fds: list[int]) -> None:
    conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def _recv_fds(conn: socket.socket) -> tuple[bytes, list[int]]:
    data, ancdata, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * 4))
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _exit_as_python_does(code: Any) -> None:
    """End the child as the interpreter ends after ``sys.exit(code)``: non-daemon threads
    joined, atexit handlers run, the standard streams flushed."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                status = status or 120
        os._exit(status)


def _child(request: dict, fds: list[int]) -> None:
    """In the forked process: become the console script the request names, and run it."""
    try:
        if request["new_session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                    signal.SIGUSR2, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        program = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(program)  # a script's own folder, as for bin/rltrain
        from importlib.metadata import entry_points

        (entry,) = entry_points(group="console_scripts", name=os.path.basename(program))
        main = entry.load()
    except BaseException:  # noqa: BLE001 - the set-up failed: say so as Python would
        traceback.print_exc()
        os._exit(1)
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # Python ends an uncaught Ctrl-C by the signal
        os._exit(130)
    except BaseException:  # noqa: BLE001 - an uncaught error: its traceback, exit 1
        traceback.print_exc()
        code = 1
    _exit_as_python_does(code)


def _reap(pid: int, conn: socket.socket) -> None:
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):  # the test process is gone
        conn.sendall(json.dumps({"status": status}).encode() + b"\n")
    conn.close()


def _exit_with_the_test_process() -> None:
    while os.read(0, 4096):  # the raw fd: no lock of sys.stdin is held across the fork
        pass
    os._exit(0)


def serve(path: str) -> None:
    """Import the heavy libraries, then fork a child for each request on the socket."""
    import gymnasium  # noqa: F401
    import hydra  # noqa: F401
    import hydra.core.override_parser.overrides_parser  # noqa: F401
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import torch  # noqa: F401

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    # the test process holds our stdin: when it ends, so do we
    threading.Thread(target=_exit_with_the_test_process, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        data, fds = _recv_fds(conn)
        while chunk := conn.recv(1 << 16):  # the rest of a long request, up to the client's EOF
            data += chunk
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        threading.Thread(target=_reap, args=(pid, conn), daemon=True).start()


# --------------------------------------------------------------------------- the client
class _Channel:
    """The connection for one child: its pid, then its wait status, one JSON line each."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buf = b""

    def line(self, block: bool = True) -> dict | None:
        while b"\n" not in self.buf:
            if not block and not select.select([self.conn], [], [], 0)[0]:
                return None
            chunk = self.conn.recv(4096)
            if not chunk:
                raise RuntimeError("the pre-warmed interpreter ended")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


class _Server:
    """The pre-warmed interpreter of this test process, started when first needed."""

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="rltrain-prewarmed-")
        self.path = os.path.join(self.dir, "socket")
        self.proc = subprocess.Popen([sys.executable, __file__, self.path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd=self.dir, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the pre-warmed interpreter did not start")

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int],
              new_session: bool) -> tuple[int, _Channel]:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        request = {"argv": argv, "env": env, "cwd": cwd, "new_session": new_session}
        _send_fds(conn, json.dumps(request).encode(), fds)
        conn.shutdown(socket.SHUT_WR)  # the request ends here; the replies still come back
        channel = _Channel(conn)
        reply = channel.line()
        assert reply is not None
        return reply["pid"], channel


#: one pre-warmed interpreter per set of start-up variables this test process has asked for
#: (the suite uses two: runs with the tests folder on PYTHONPATH, and runs that inherit the
#: environment as it is)
_SERVERS: dict[tuple[tuple[str, str], ...], _Server] = {}
_SERVER_LOCK = threading.Lock()
#: the most interpreters one test process keeps (each holds torch in memory)
_MAX_SERVERS = 3
_ORIGINAL_EXECUTE = subprocess.Popen._execute_child  # type: ignore[attr-defined]
_ORIGINAL_TRY_WAIT = subprocess.Popen._try_wait  # type: ignore[attr-defined]
_ORIGINAL_POLL = subprocess.Popen._internal_poll  # type: ignore[attr-defined]
_EXECUTE_SIGNATURE = inspect.signature(_ORIGINAL_EXECUTE)


def _server(env: dict[str, str]) -> _Server | None:
    key = tuple(sorted((k, env[k]) for k in _STARTUP_VARS if k in env))
    with _SERVER_LOCK:
        if key not in _SERVERS:
            if len(_SERVERS) >= _MAX_SERVERS:
                return None
            _SERVERS[key] = _Server(env)
        return _SERVERS[key]


def _wanted(call: inspect.BoundArguments) -> bool:
    a = call.arguments
    args = a["args"]
    if a["shell"] or a["executable"] is not None or not isinstance(args, (list, tuple)):
        return False
    program = Path(os.fspath(args[0]))
    if program.parent != BIN or not program.name.startswith("rltrain"):
        return False
    given = a["env"] if a["env"] is not None else os.environ
    if given.get("RLTRAIN_TEST_FRESH_PROCESSES", "") not in ("", "0"):  # this run only
        return False
    if a["preexec_fn"] is not None or a["pass_fds"]:
        return False
    if any(a.get(k) not in (None, -1) for k in ("gid", "uid", "umask", "process_group")):
        return False
    return not a.get("gids")


def _execute_child(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
    call = _EXECUTE_SIGNATURE.bind(self, *args, **kwargs)
    a = call.arguments
    fds = [a["p2cread"] if a["p2cread"] != -1 else 0,
           a["c2pwrite"] if a["c2pwrite"] != -1 else 1,
           a["errwrite"] if a["errwrite"] != -1 else 2]
    # no env given: the child inherits this process's environment, as it is now
    given = a["env"] if a["env"] is not None else os.environ
    server = _server(dict(given)) if _wanted(call) else None
    if server is None or any(os.isatty(fd) for fd in fds):
        return _ORIGINAL_EXECUTE(self, *args, **kwargs)
    argv = [os.fspath(x) for x in a["args"]]
    env = {os.fsdecode(k): os.fsdecode(v) for k, v in given.items()}
    pid, channel = server.spawn(argv, env, os.fspath(a["cwd"] or os.getcwd()), fds,
                                bool(a["start_new_session"]))
    self.pid = pid
    self._child_created = True  # type: ignore[attr-defined]
    self._prewarmed = channel  # type: ignore[attr-defined]
    self._close_pipe_fds(a["p2cread"], a["p2cwrite"], a["c2pread"],  # type: ignore[attr-defined]
                         a["c2pwrite"], a["errread"], a["errwrite"])
    return None


def _try_wait(self: subprocess.Popen, wait_flags: int) -> tuple[int, int]:
    channel = getattr(self, "_prewarmed", None)
    if channel is None:
        return _ORIGINAL_TRY_WAIT(self, wait_flags)
    reply = channel.line(block=not wait_flags & os.WNOHANG)
    if reply is None:
        return 0, 0
    channel.conn.close()
    return self.pid, reply["status"]


def _internal_poll(self: subprocess.Popen, _deadstate: Any = None, **kwargs: Any) -> Any:
    if getattr(self, "_prewarmed", None) is None:
        return _ORIGINAL_POLL(self, _deadstate=_deadstate, **kwargs)
    if self.returncode is None:
        pid, status = _try_wait(self, os.WNOHANG)
        if pid == self.pid:
            self._handle_exitstatus(status)  # type: ignore[attr-defined]
    return self.returncode


def install() -> None:
    """Start this test process's ``rltrain*`` programs from the pre-warmed interpreter."""
    if os.environ.get("RLTRAIN_TEST_FRESH_PROCESSES", "") not in ("", "0"):
        return
    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]
    subprocess.Popen._try_wait = _try_wait  # type: ignore[attr-defined]
    subprocess.Popen._internal_poll = _internal_poll  # type: ignore[attr-defined]


if __name__ == "__main__":
    serve(sys.argv[1])
