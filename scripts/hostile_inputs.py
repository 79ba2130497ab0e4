"""Hostile inputs: run the real rltrain CLI on inputs a user can get wrong, and judge the answers.

The project's rule: every way a user can get the input wrong ends in a short error naming what
was wrong and what would be right, with nothing lost and no traceback; exit 0 means the result
is right. Each case below runs ``rltrain`` or a companion tool (``rltrain-eval``, ``-export``,
``-collect``, ``-report``) in a subprocess (no mocks), in its own fresh temporary working
directory, and declares what it expects:

  error      refused: non-zero exit, no "Traceback", at most 12 lines on stderr, and every
             ``must_mention`` string in stderr (case-insensitive; a tuple means any one of them).
             Verdict "clear" if so, else "UNCLEAR: why", "TRACEBACK" or "EXIT 0" (the worst: an
             input that must be refused gave a silent, wrong answer).
  ok         exit 0 and no traceback: verdict "ok", else "TRACEBACK" or "FAILED: exit N".
  either     a clear error or ok (the case records which).

A ``strict`` case (issue 20's) is clear only with exit 2 and one line on stderr besides
warnings.
  interrupt  exit with the given code (130 SIGINT, 143 SIGTERM) and stderr mentions "resume".

A case may have a ``check(tmpdir, result)`` that returns a description of what went wrong
(records missing, an existing run damaged, weights overwritten); it becomes "WRONG: ..." and
takes precedence over every other verdict but TIMEOUT (the run got past ``--timeout``). A
case whose file must not run code (issue 20's trust boundary) is "WRONG: code ran" when the
marker file that code creates exists. Runs that train use ``experiment=smoke`` (2 epochs of
512 env steps) unless the case needs more. A finished smoke run and a random CartPole dataset
that several cases need are made once per invocation and copied (``cp -a``) into each case's
directory. Each case's processes keep rltrain's trust record (``$RLTRAIN_STATE_DIR``) and
Minari's datasets in the case's directory, so a copied run comes from elsewhere and nothing
touches the user's home; a case that could grow memory without bound runs under ``prlimit``.

The report is a Markdown table on stdout, then the number of cases whose output holds
"Traceback", of hangs (TIMEOUT) and of code run without consent, and the count per verdict;
progress goes to stderr. ``--keep`` keeps each case's directory, with the case's whole output
in ``_stdout.txt`` and ``_stderr.txt``. The script always exits 0 (it is a report) unless it
crashes itself.

To judge another version of rltrain with the same virtualenv, put its ``src`` first on
PYTHONPATH (``PYTHONPATH=/tmp/old/src``): the cases' processes inherit it, and rltrain finds its
``conf/`` next to the package.

Usage (from the repository root; the rltrain executables are found next to the interpreter):

    .venv/bin/python scripts/hostile_inputs.py [--jobs 2] [--timeout 120]
        [--only SUBSTRING] [--list] [--markdown PATH] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

BIN = Path(sys.executable).parent
#: the repository's tests/, whose env packages some cases name (``space_envs:ID``)
TESTS = Path(__file__).resolve().parents[1] / "tests"
PROGRAMS = ("rltrain", "rltrain-eval", "rltrain-export", "rltrain-collect", "rltrain-report")
SMOKE = "experiment=smoke"
MAX_STDERR_LINES = 12
FIRST_LINE_CHARS = 110
SNAPSHOT = "_snapshot.json"
#: address space a case under :func:`limited` may use (rltrain-eval and -report need ~1.5 GB)
MEMORY_LIMIT = 3 * 2**30
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

Expect = Literal["error", "ok", "either", "interrupt"]
#: a string stderr must contain; a tuple: any one of them
Mention = str | tuple[str, ...]
#: verdict kinds, in the order the summary counts them
KINDS = ("clear", "ok", "UNCLEAR", "TRACEBACK", "EXIT 0", "WRONG", "FAILED", "TIMEOUT", "SETUP")


class SetupError(Exception):
    """A case could not be prepared (e.g. the shared finished run failed to train)."""


@dataclass
class Result:
    """What one case's process(es) did."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    #: for runners that start several processes: what the table shows instead
    display_command: str | None = None
    display_exit: str | None = None
    #: output of companion processes: only scanned for tracebacks
    other_output: str = ""
    #: free-form facts a runner records for its check
    extra: dict[str, object] = field(default_factory=dict)


Setup = Callable[[Path], list[str]]
Check = Callable[[Path, Result], str | None]
Runner = Callable[[Path, list[str], float], Result]


@dataclass(frozen=True)
class SendSignal:
    """Send ``signum`` ``delay`` seconds after start (or after ``after_file``, relative to the
    case directory, exists and is non-empty). ``group``: to the whole process group, as a
    terminal's Ctrl-C does; else to the process alone, as ``kill`` does."""

    signum: int
    delay: float
    after_file: str | None = None
    group: bool = False

    def describe(self) -> str:
        when = f"once {self.after_file} is written" if self.after_file else "after start"
        delay = f"{self.delay:g} s " if self.delay or not self.after_file else ""
        return f"{signal.Signals(self.signum).name} {delay}{when}"


@dataclass
class Case:
    name: str
    #: the command (program name first), or a setup(tmpdir) that prepares files and returns it
    argv: list[str] | Setup
    expect: Expect = "error"
    must_mention: tuple[Mention, ...] = ()
    check: Check | None = None
    send: SendSignal | None = None
    #: the exit code an "interrupt" case expects
    exit_code: int | None = None
    #: replaces the single-process runner (pipes, concurrent processes)
    runner: Runner | None = None
    #: a refusal must be exit 2 and one line on stderr (warnings aside): issue 20's rule
    strict: bool = False
    section: str = ""


@dataclass(frozen=True)
class Verdict:
    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


@dataclass
class Row:
    number: int
    case: Case
    result: Result | None
    verdict: Verdict
    #: the case's working directory (shown as relative paths in the report)
    tmp: Path | None = None


# --------------------------------------------------------------------------- processes
def resolve(argv: Sequence[str]) -> list[str]:
    """The program name first in argv -> the executable next to this interpreter; after
    ``prlimit OPTIONS --`` (a memory limit, see :func:`limited`), the program after ``--``."""
    head, *rest = argv
    if head == "prlimit":
        split = argv.index("--") + 1
        return [*argv[:split], *resolve(argv[split:])]
    return [str(BIN / head) if head in PROGRAMS else head, *rest]


def limited(argv: Sequence[str]) -> list[str]:
    """``argv`` under ``prlimit --as=`` :data:`MEMORY_LIMIT`: a case that could grow memory
    without bound (a YAML bomb, a size declared beyond memory) meets MemoryError, not the
    machine's OOM killer."""
    return ["prlimit", f"--as={MEMORY_LIMIT}", "--", *argv]


def child_env(tmp: Path) -> dict[str, str]:
    """The environment of a case's processes. What rltrain records about this machine
    (``$RLTRAIN_STATE_DIR``, the trust record) and Minari's local datasets are the case's own,
    under ``tmp``: every run copied into a case comes "from elsewhere", and nothing is read
    from or written to the user's home."""
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)  # would turn every error into a traceback
    env["COLUMNS"] = "200"
    env["RLTRAIN_STATE_DIR"] = str(tmp / "_state")
    env["MINARI_DATASETS_PATH"] = str(tmp / "_minari")
    # the test suite's env packages (space_envs: spaces of any size), after whatever is there
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(TESTS)) if p)
    return env


def spawn(tmp: Path, argv: Sequence[str], stdout: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(resolve(argv), cwd=tmp, env=child_env(tmp), stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=subprocess.PIPE, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group this script started for ``proc`` (its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def decode(data: bytes | None) -> str:
    return ANSI.sub("", (data or b"").decode("utf-8", errors="replace"))


def finish(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes, bool]:
    """Wait for ``proc`` (stdout/stderr collected); kill its group past ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return out or b"", err or b"", False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return out or b"", err or b"", True


def signal_later(proc: subprocess.Popen[bytes], tmp: Path, send: SendSignal) -> threading.Thread:
    def fire() -> None:
        if send.after_file:
            target = tmp / send.after_file
            while proc.poll() is None and not (target.is_file() and target.stat().st_size > 0):
                time.sleep(0.01)
        time.sleep(send.delay)
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if send.group:
                os.killpg(proc.pid, send.signum)
            else:
                os.kill(proc.pid, send.signum)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


def run_process(tmp: Path, argv: list[str], timeout: float,
                send: SendSignal | None = None) -> Result:
    start = time.monotonic()
    proc = spawn(tmp, argv)
    if send is not None:
        signal_later(proc, tmp, send)
    out, err, timed_out = finish(proc, timeout)
    result = Result(argv, proc.returncode, decode(out), decode(err), time.monotonic() - start,
                    timed_out)
    if send is not None:
        result.display_command = f"{shlex.join(argv)}  ({send.describe()})"
    return result


def first_line_then_close(tmp: Path, argv: list[str], timeout: float) -> Result:
    """``argv | head -1``: read stdout's first line, then close the pipe."""
    start = time.monotonic()
    proc = spawn(tmp, argv)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        kill_group(proc)

    watchdog = threading.Timer(timeout, expire)  # readline() itself has no timeout
    watchdog.start()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        running = proc.poll() is None
        proc.stdout.close()
        proc.stdout = None  # communicate() now collects stderr alone
        _, err, timed_out = finish(proc, max(1.0, timeout - (time.monotonic() - start)))
    finally:
        watchdog.cancel()
    result = Result(argv, proc.returncode, decode(first), decode(err), time.monotonic() - start,
                    timed_out or expired.is_set())
    result.display_command = f"{shlex.join(argv)} | head -1"
    result.extra["closed_while_running"] = running
    return result


def run_together(tmp: Path, argv: list[str], timeout: float) -> Result:
    """Two runs started at once; ``argv`` is both commands joined by "&"."""
    split = argv.index("&")
    commands = [argv[:split], argv[split + 1:]]
    start = time.monotonic()
    procs = [spawn(tmp, command) for command in commands]
    outputs = [finish(p, max(1.0, timeout - (time.monotonic() - start))) for p in procs]
    codes = [p.returncode for p in procs]
    # the table shows the process that should have been refused: the one that did not exit 0
    loser = next((i for i, code in enumerate(codes) if code != 0), 1)
    winner = 1 - loser
    return Result(
        argv, codes[loser], decode(outputs[loser][0]), decode(outputs[loser][1]),
        time.monotonic() - start, any(o[2] for o in outputs),
        display_command=" & ".join(shlex.join(c) for c in commands),
        display_exit=", ".join(str(c) for c in codes),
        other_output=decode(outputs[winner][0]) + decode(outputs[winner][1]),
        extra={"codes": codes})


# --------------------------------------------------------------------------- shared fixtures
class Fixtures:
    """What several cases need, made once per invocation (on first use) and copied per case:
    a finished smoke run, and a dataset of random CartPole episodes."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self._lock = threading.Lock()  # guards _locks; each product has its own
        self._locks: dict[str, threading.Lock] = {}
        self._made: dict[str, tuple[Path | None, str | None]] = {}

    def finished_run(self) -> Path:
        return self._once("smoke", ["rltrain", SMOKE, "hydra.run.dir=smoke"], "summary.json")

    def other_run(self, name: str, *overrides: str) -> Path:
        """Another finished smoke run (``rltrain experiment=smoke OVERRIDES``), made once."""
        return self._once(name, ["rltrain", SMOKE, *overrides, f"hydra.run.dir={name}"],
                          "summary.json")

    def random_dataset(self) -> Path:
        """20 random CartPole-v1 episodes (a few hundred transitions: more than a smoke
        offline run's batch), collected by the rltrain under test."""
        return self._once("c.h5", ["rltrain-collect", "--random", "--env", "CartPole-v1",
                                   "--episodes", "20", "--out", "c.h5"], "")

    def _once(self, name: str, argv: list[str], inside: str) -> Path:
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._made:
                self._made[name] = self._make(name, argv, inside)
            made, error = self._made[name]
            if error is not None:
                raise SetupError(error)
            assert made is not None
            return made

    def _make(self, name: str, argv: list[str], inside: str) -> tuple[Path | None, str | None]:
        """Run ``argv`` in the fixtures' folder; it must exit 0 and write ``name`` (holding
        ``inside``, if given)."""
        assert self.root is not None, "Fixtures.root is set in main()"
        home = self.root / "fixtures"
        home.mkdir(parents=True, exist_ok=True)
        what = f"the shared {shlex.join(argv)}"
        try:
            proc = subprocess.run(resolve(argv), cwd=home, env=child_env(home),
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
        except subprocess.TimeoutExpired:
            return None, f"{what} did not finish within 600 s"
        made = home / name
        if proc.returncode != 0 or not (made / inside if inside else made).exists():
            tail = decode(proc.stderr).strip().splitlines()[-1:] or ["(no stderr)"]
            return None, f"{what} failed (exit {proc.returncode}): {tail[0]}"
        return made, None


FIXTURES = Fixtures()


def copy_run(tmp: Path, name: str = "R") -> Path:
    """A copy of the finished smoke run at ``tmp/name`` (hard links kept, as ``cp -a`` does)."""
    target = tmp / name
    subprocess.run(["cp", "-a", str(FIXTURES.finished_run()), str(target)], check=True)
    return target


# --------------------------------------------------------------------------- checks
def digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def snapshot(tmp: Path, *paths: str) -> None:
    """Record the bytes of ``paths`` (relative to tmp) for :func:`unchanged`."""
    (tmp / SNAPSHOT).write_text(json.dumps({p: digest(tmp / p) for p in paths}))


def unchanged(message: str) -> Check:
    """WRONG: ``message`` if a file recorded by :func:`snapshot` changed or vanished."""

    def check(tmp: Path, result: Result) -> str | None:
        saved: dict[str, str | None] = json.loads((tmp / SNAPSHOT).read_text())
        changed = [path for path, value in saved.items() if digest(tmp / path) != value]
        return f"{message} ({', '.join(changed)} changed)" if changed else None

    return check


def read_records(path: Path) -> tuple[list[int], str | None]:
    """Epoch numbers in an epochs.jsonl, or what is wrong with it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        return [], f"cannot read {path.name}: {e.strerror}"
    epochs = []
    for number, line in enumerate(lines, 1):
        try:
            epochs.append(int(json.loads(line)["epoch"]))
        except (ValueError, KeyError, TypeError):
            return epochs, f"{path.name} line {number} is not a JSON epoch record: {line[:40]!r}"
    return epochs, None


def records_are(run: str, count: int) -> Check:
    """After exit 0: ``run/epochs.jsonl`` holds valid records of epochs 1..count, no gap."""

    def check(tmp: Path, result: Result) -> str | None:
        if result.returncode != 0:
            return None  # nothing was promised; the verdict says how it failed
        epochs, problem = read_records(tmp / run / "epochs.jsonl")
        if problem:
            return problem
        if epochs != list(range(1, count + 1)):
            return f"epochs.jsonl holds epochs {epochs}, expected 1..{count}"
        return None

    return check


def summary_says(run: str, interrupted: bool, message: str) -> Check:
    def check(tmp: Path, result: Result) -> str | None:
        try:
            summary = json.loads((tmp / run / "summary.json").read_text())
        except (OSError, ValueError):
            return f"{message} (no readable {run}/summary.json)"
        if summary.get("interrupted") is not interrupted:
            return f"{message} (summary.json: interrupted={summary.get('interrupted')})"
        return None

    return check


def all_of(*checks: Check) -> Check:
    def check(tmp: Path, result: Result) -> str | None:
        for each in checks:
            problem = each(tmp, result)
            if problem:
                return problem
        return None

    return check


# --------------------------------------------------------------------------- declaring cases
def refused(overrides: str, *mention: Mention, check: Check | None = None) -> Case:
    """``rltrain OVERRIDES experiment=smoke`` must be refused, naming ``mention``."""
    argv = ["rltrain", *overrides.split()]
    if not any(arg.startswith("experiment=") for arg in argv):
        argv.append(SMOKE)
    return Case(overrides, argv, "error", mention, check)


def trains(overrides: str, epochs: int = 2, expect: Expect = "ok", *mention: Mention) -> Case:
    """``rltrain OVERRIDES experiment=smoke hydra.run.dir=run`` must train ``epochs`` epochs."""
    argv = ["rltrain", *overrides.split()]
    if not any(arg.startswith("experiment=") for arg in argv):
        argv.append(SMOKE)
    argv.append("hydra.run.dir=run")
    return Case(overrides, argv, expect, mention, records_are("run", epochs))


def on_run(name: str, *args: str, expect: Expect = "error", mention: Sequence[Mention] = (),
           check: Check | None = None, prepare: Callable[[Path], None] | None = None,
           keep: Sequence[str] = ()) -> Case:
    """A command on a copy ``R`` of the finished smoke run; ``prepare(R)`` alters it first;
    ``keep`` (paths under R) must come out byte-for-byte unchanged."""

    def setup(tmp: Path) -> list[str]:
        run = copy_run(tmp)
        if prepare is not None:
            prepare(run)
        snapshot(tmp, *(f"R/{path}" for path in keep))
        return list(args)

    checks = [c for c in (check, unchanged("damaged the existing run") if keep else None) if c]
    return Case(name, setup, expect, tuple(mention), all_of(*checks) if checks else None)


# --------------------------------------------------------------------------- the cases
def control_cases() -> list[Case]:
    """Inputs that are right: the script's own sanity check."""
    return [
        trains("experiment=smoke"),
        on_run("eval a finished run", "rltrain-eval", "R", expect="ok"),
        on_run("export a finished run", "rltrain-export", "R", "--out", "policy.onnx",
               expect="ok"),
        on_run("resume extends a finished run", "rltrain", "resume=R", "trainer.max_epochs=3",
               expect="ok", check=records_are("R", 3)),
    ]


def config_cases() -> list[Case]:
    """Keys, values and groups on the command line."""
    lr = ("algo.lr", "lr=", "'lr'")
    return [
        refused("trainer.max_epoch=1", "max_epoch"),
        refused("+trainer.max_epoch=1", "max_epoch"),
        refused("+seeed=1", "seeed", "seed"),
        refused("+algo.lrr=1", "lrr"),
        # env.wrappers is a real key: "+" on it, or the unknown wrapper x, must be refused
        refused("+env.wrappers=[x]", "wrapper"),
        refused("+algo._target_=os.system", "_target_"),
        refused("sead=3", "sead", "seed"),
        refused("algo=ppp", "ppp", "ppo"),
        refused("env=nope", "nope", "cartpole"),
        refused("trainer.batch_size=abc", "batch_size"),
        refused("trainer.max_epochs=0", "max_epochs"),
        refused("trainer.max_epochs=-3", "max_epochs"),
        refused("trainer.max_epochs=1.5", "max_epochs"),
        refused("trainer.stop_score=high", "stop_score"),
        refused("env=gym", "env.id"),
        refused("env=gym env.id=NoSuchEnv-v0", "NoSuchEnv-v0"),
        refused("env=gym env.id=nomodule_xyz:Foo-v0", "nomodule_xyz"),
        refused("algo=dqn env=gym env.id=Pendulum-v1", "dqn", "Pendulum-v1"),
        refused("env.num_train_envs=0", "num_train_envs"),
        refused("env.num_test_envs=-1", "num_test_envs"),
        refused("env.vectorization=threads", "vectorization", "async"),
        refused("algo.activation=gelu", "activation", "tanh"),
        refused("algo.hidden_sizes=[0]", "hidden_sizes"),
        trains("algo.hidden_sizes=[]", 2, "either", "hidden_sizes"),
        refused("algo.gamma=1.5", "gamma"),
        refused("algo.lr=nan", lr),
        refused("algo.lr=inf", lr),
        refused("algo.lr=-1", lr),
        refused("algo.clip_ratio=nan", "clip_ratio"),
        refused("algo.ent_coef=inf", "ent_coef"),
        refused("algo=dqn trainer.batch_size=500 buffer.size=100", "batch_size", "buffer.size"),
        refused("algo=dqn trainer.random_warmup_env_steps=10000000", "random_warmup_env_steps"),
        refused("buffer.size=0", "buffer.size"),
        refused("algo=dqn buffer.size=100000000000", "buffer.size"),
        refused("algo=dqn algo.n_step=3 buffer.on_device=true", "buffer.on_device", "n_step"),
        refused("algo=sac env=pendulum buffer.on_device=maybe", "buffer.on_device"),
        refused("algo=dqn buffer.on_device=true buffer.size=100000000000", "buffer.size"),
        refused("seed=-1", "seed"),
        refused("seed=99999999999", "seed"),
        refused("seed=abc", "seed"),
        refused("device=gpu", "gpu", "cuda"),
        refused("device=mps", "mps"),
        refused("device=meta", "meta"),
        refused("device=cuda", "cuda"),  # this machine has no GPU
        refused("device=cuda:7", "cuda:7"),
        refused("torch_threads=0", "torch_threads"),
        refused("trainer.max_epochs=abc", "trainer.max_epochs", "integer"),
        # continuous control
        refused("algo=sac env=cartpole", "sac", "CartPole-v1", "algo=dqn"),
        refused("algo=sac env=pendulum algo.lr=1e-3", "algo.lr", "actor_lr"),
        refused("algo=sac env=pendulum algo.noise_beta=nan", "noise_beta"),
        refused("algo=sac env=pendulum algo.noise_beta=7", "noise_beta", "[0, 2]"),
        refused("algo=td3 env=pendulum algo.policy_delay=0", "policy_delay"),
        refused("algo=td3 env=pendulum algo.target_noise_clip=-0.1", "target_noise_clip"),
        refused("algo=sac env=pendulum env.normalize.obs=maybe", "env.normalize.obs",
                "true or false"),
        refused("algo=sac env=pendulum env.normalize.clip_obs=0", "clip_obs"),
        refused("algo=ddpg env=pendulum algo.exploration_noise=-1", "exploration_noise"),
        # record what happens: Pendulum multiplies g, so the string may train and crash
        trains("env=gym env.id=Pendulum-v1 +env.kwargs.g=abc", 2, "either",
               ("env.kwargs.g", "kwargs")),
        trains("env=gym env.id=Pendulum-v1 env.kwargs.g=9.81 experiment=smoke"),
    ]


def output_cases() -> list[Case]:
    """Where a run or a sweep writes."""
    def a_file(tmp: Path) -> None:
        (tmp / "afile").write_text("not a directory\n")

    def under_file(tmp: Path) -> list[str]:
        a_file(tmp)
        return ["rltrain", SMOKE, "hydra.run.dir=afile/run"]

    def is_file(tmp: Path) -> list[str]:
        a_file(tmp)
        return ["rltrain", SMOKE, "hydra.run.dir=afile"]

    def sweep_into_file(tmp: Path) -> list[str]:
        a_file(tmp)
        return ["rltrain", "--multirun", SMOKE, "seed=0,1", "hydra.sweep.dir=afile"]

    return [
        Case("run dir under a regular file", under_file, must_mention=("afile",)),
        Case("run dir is a regular file", is_file, must_mention=("afile",)),
        refused("hydra.run.dir=/proc/rltrain_x", "/proc/rltrain_x"),
        on_run("run dir holds a finished run", "rltrain", SMOKE, "seed=1", "hydra.run.dir=R",
               mention=["already"], keep=[".hydra/config.yaml", "epochs.jsonl"]),
        Case("sweep dir is a regular file", sweep_into_file, must_mention=("afile",)),
    ]


def config_dir_cases() -> list[Case]:
    """A user's own config tree (--config-dir)."""
    def bad_experiment(text: str) -> Setup:
        def setup(tmp: Path) -> list[str]:
            (tmp / "D" / "experiment").mkdir(parents=True)
            (tmp / "D" / "experiment" / "bad.yaml").write_text(text)
            return ["rltrain", "--config-dir", "D", "experiment=bad"]

        return setup

    tab = "# @package _global_\ntrainer:\n\tmax_epochs: 2\n"
    unclosed = "# @package _global_\ntrainer: {max_epochs: [2\n"
    return [
        Case("config dir: TAB-indented yaml", bad_experiment(tab), must_mention=("bad.yaml",)),
        Case("config dir: unclosed bracket", bad_experiment(unclosed),
             must_mention=("bad.yaml",)),
        Case("config dir does not exist", ["rltrain", "--config-dir", "/nonexistent", SMOKE],
             must_mention=("/nonexistent",)),
    ]


def resume_cases() -> list[Case]:
    """resume=RUN_DIR on missing, finished, damaged and foreign directories."""
    records = ["epochs.jsonl", "checkpoints/last.pt", "summary.json"]

    def not_a_run(tmp: Path) -> list[str]:
        (tmp / "notarun").mkdir()
        (tmp / "notarun" / "notes.txt").write_text("hello\n")
        return ["rltrain", "resume=notarun"]

    def truncate_checkpoints(run: Path) -> None:
        for path in (run / "checkpoints").glob("*.pt"):
            with open(path, "r+b") as f:
                f.truncate(100)

    def tear_last_record(run: Path) -> None:
        last = (run / "epochs.jsonl").read_bytes().splitlines()[-1]
        with open(run / "epochs.jsonl", "ab") as f:
            f.write(last[: len(last) // 2])

    def says_so(tmp: Path, result: Result) -> str | None:
        said = (result.stdout + result.stderr).lower()
        if result.returncode == 0 and not any(w in said for w in ("max_epochs", "nothing",
                                                                  "already")):
            return "exit 0 without saying that there was nothing to do"
        return None

    return [
        Case("resume=/nonexistent", ["rltrain", "resume=/nonexistent"],
             must_mention=("/nonexistent",)),
        on_run("resume with algo.lr=0.1", "rltrain", "resume=R", "algo.lr=0.1",
               mention=["algo.lr"], keep=records),
        on_run("resume with max_epochs=abc", "rltrain", "resume=R", "trainer.max_epochs=abc",
               mention=["max_epochs"], keep=records),
        on_run("resume a 2-epoch run to max_epochs=1", "rltrain", "resume=R",
               "trainer.max_epochs=1", expect="either", mention=["max_epochs"], check=says_so,
               keep=["epochs.jsonl"]),
        Case("resume a dir that is not a run", not_a_run, must_mention=("notarun",)),
        on_run("resume: all checkpoints truncated", "rltrain", "resume=R",
               "trainer.max_epochs=3", mention=["checkpoint"], prepare=truncate_checkpoints,
               keep=["epochs.jsonl"]),
        on_run("resume: torn last line in epochs.jsonl", "rltrain", "resume=R",
               "trainer.max_epochs=4", expect="ok", prepare=tear_last_record,
               check=records_are("R", 4)),
    ]


def eval_export_cases() -> list[Case]:
    """rltrain-eval and rltrain-export arguments and damaged run directories."""
    def drop_best(run: Path) -> None:
        shutil.rmtree(run / "best")

    def break_config(run: Path) -> None:
        (run / ".hydra" / "config.yaml").write_text("algo: [unclosed\n")

    def export_into(tmp: Path) -> list[str]:
        copy_run(tmp)
        (tmp / "somedir").mkdir()
        return ["rltrain-export", "R", "--out", "somedir"]

    return [
        Case("eval /nonexistent", ["rltrain-eval", "/nonexistent"],
             must_mention=("/nonexistent",)),
        on_run("eval --episodes 0", "rltrain-eval", "R", "--episodes", "0",
               mention=["episodes"]),
        on_run("eval --episodes abc", "rltrain-eval", "R", "--episodes", "abc",
               mention=["episodes"]),
        on_run("eval --weights nope", "rltrain-eval", "R", "--weights", "nope",
               mention=["weights"]),
        on_run("eval --seed -1", "rltrain-eval", "R", "--seed", "-1", mention=["seed"]),
        on_run("eval --seed 99999999999", "rltrain-eval", "R", "--seed", "99999999999",
               mention=["seed"]),
        on_run("eval: .hydra/config.yaml broken", "rltrain-eval", "R",
               mention=["config.yaml"], prepare=break_config),
        on_run("eval: best/ removed", "rltrain-eval", "R", mention=["best"],
               prepare=drop_best),
        on_run("export --out onto best/policy.pt", "rltrain-export", "R", "--out",
               "R/best/policy.pt", mention=["policy.pt"],
               check=unchanged("overwrote weights"), keep=["best/policy.pt"]),
        on_run("export --out /proc/x.onnx", "rltrain-export", "R", "--out", "/proc/x.onnx",
               mention=["/proc/x.onnx"]),
        Case("export --out an existing directory", export_into, must_mention=("somedir",)),
    ]


def signal_cases() -> list[Case]:
    """SIGINT, SIGTERM, a closed stdout, --version."""
    long_run = ["rltrain", SMOKE, "trainer.max_epochs=300", "trainer.epoch_num_steps=2048",
                "hydra.run.dir=run"]
    during = "run/epochs.jsonl"
    interrupted = summary_says("run", True, "no interrupted run left behind")

    def version(tmp: Path, result: Result) -> str | None:
        return None if "rltrain" in result.stdout.lower() else "prints Hydra's version"

    return [
        Case("Ctrl-C 0.5 s after start", ["rltrain", SMOKE, "hydra.run.dir=run"],
             send=SendSignal(signal.SIGINT, 0.5, group=True)),
        Case("SIGTERM 0.5 s after start", ["rltrain", SMOKE, "hydra.run.dir=run"],
             send=SendSignal(signal.SIGTERM, 0.5)),
        Case("Ctrl-C during training", long_run, "interrupt", check=interrupted,
             send=SendSignal(signal.SIGINT, 0.0, after_file=during, group=True), exit_code=130),
        Case("SIGTERM during training", long_run, "interrupt", check=interrupted,
             send=SendSignal(signal.SIGTERM, 0.0, after_file=during), exit_code=143),
        Case("stdout closed after the first line", ["rltrain", SMOKE, "hydra.run.dir=run"],
             "ok", check=summary_says("run", False, "closed pipe killed training"),
             runner=first_line_then_close),
        Case("rltrain --version", ["rltrain", "--version"], "ok", check=version),
    ]


def concurrency_cases() -> list[Case]:
    """Two processes, one run directory."""
    def run(seed: int) -> list[str]:
        return ["rltrain", SMOKE, "trainer.max_epochs=3", "trainer.epoch_num_steps=4096",
                "hydra.run.dir=shared_run", f"seed={seed}"]

    def once_each(tmp: Path, result: Result) -> str | None:
        epochs, problem = read_records(tmp / "shared_run" / "epochs.jsonl")
        if problem:
            return f"interleaved ({problem})"
        if epochs != [1, 2, 3]:
            return f"interleaved (epochs {epochs})"
        return None

    return [Case("two runs into one dir at once", [*run(0), "&", *run(1)],
                 must_mention=("shared_run",), check=once_each, runner=run_together)]


def sweep_cases() -> list[Case]:
    """--multirun with one bad job."""
    def job_one_ran(tmp: Path, result: Result) -> str | None:
        return None if (tmp / "S" / "env.num_train_envs=8_job1" / "summary.json").is_file() else (
            "one bad job ended the sweep")

    return [Case("sweep with one bad job",
                 ["rltrain", "--multirun", SMOKE, "env.num_train_envs=0,8", "hydra.sweep.dir=S"],
                 must_mention=("num_train_envs",), check=job_one_ran)]


def offline_cases() -> list[Case]:
    """Offline runs and rltrain-collect: datasets that are missing, damaged, of another env,
    or given to the wrong kind of algorithm."""
    def random_data(env_id: str, name: str) -> list[str]:
        return ["rltrain-collect", "--random", "--env", env_id, "--episodes", "3", "--out", name]

    def with_data(env_id: str, name: str, *argv: str) -> Setup:
        def setup(tmp: Path) -> list[str]:
            subprocess.run([str(BIN / "rltrain-collect"), *random_data(env_id, name)[1:]],
                           cwd=tmp, check=True, capture_output=True)
            return list(argv)
        return setup

    def damaged(tmp: Path) -> list[str]:
        (tmp / "bad.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
        return ["rltrain", SMOKE, "algo=bc", "dataset=bad.h5", "hydra.run.dir=run"]

    return [
        Case("offline algo without dataset=", ["rltrain", SMOKE, "algo=bc"],
             must_mention=("dataset=",)),
        Case("dataset= a missing file", ["rltrain", SMOKE, "algo=bc", "dataset=none.h5"],
             must_mention=("none.h5",)),
        Case("dataset= a damaged HDF5 file", damaged, must_mention=("bad.h5",)),
        Case("dataset of another env", with_data(
            "Pendulum-v1", "p.h5", "rltrain", SMOKE, "algo=bc", "dataset=p.h5",
            "hydra.run.dir=run"), must_mention=("Pendulum", "CartPole")),
        Case("online algo given dataset=", with_data(
            "CartPole-v1", "c.h5", "rltrain", SMOKE, "algo=dqn", "dataset=c.h5",
            "hydra.run.dir=run"), must_mention=("offline",)),
        Case("offline algo on the off-policy trainer", with_data(
            "CartPole-v1", "c.h5", "rltrain", SMOKE, "algo=bc", "dataset=c.h5",
            "trainer=offpolicy"), must_mention=("trainer=offpolicy", "offline")),
        Case("offline batch larger than the dataset", with_data(
            "CartPole-v1", "c.h5", "rltrain", SMOKE, "algo=bc", "dataset=c.h5",
            "trainer.batch_size=100000"), must_mention=("batch_size", "dataset")),
        Case("collect --merge of two envs", lambda tmp: [
            *with_data("CartPole-v1", "c.h5")(tmp), *with_data("Pendulum-v1", "p.h5")(tmp),
            "rltrain-collect", "--merge", "c.h5", "p.h5", "--out", "m.h5"],
            must_mention=("p.h5", "c.h5")),
        Case("collect --noise -1", ["rltrain-collect", "--random", "--env", "CartPole-v1",
                                    "--episodes", "2", "--noise", "-1", "--out", "x.h5"],
             must_mention=("--noise",)),
        Case("dataset=minari:unknown", ["rltrain", SMOKE, "algo=bc", "dataset=minari:no/pe-v0"],
             must_mention=("no/pe-v0",)),
        Case("collect --episodes 0", ["rltrain-collect", "--random", "--env", "CartPole-v1",
                                      "--episodes", "0", "--out", "x.h5"],
             must_mention=("episodes",)),
        Case("collect --out x.txt", ["rltrain-collect", "--random", "--env", "CartPole-v1",
                                     "--episodes", "2", "--out", "x.txt"],
             must_mention=(".txt",)),
        Case("collect from /nonexistent", ["rltrain-collect", "/nonexistent", "--episodes", "2",
                                           "--out", "x.h5"], must_mention=("/nonexistent",)),
    ]


# --------------------------------------------------------------------------- issue 20
# The cases of issue 20 (safe with what comes from elsewhere, sound under every fault, a console
# that tells the truth), each reproduced as the issue wrote it on 19279d5.

#: what the hostile wrapper's shell command creates in the case directory
MARKER = "PWNED"
#: the WRONG verdict of a case whose file ran code without consent (counted in the summary)
CODE_RAN = "code ran"


def hostile_wrapper(tmp: Path) -> dict[str, str]:
    """The env.wrappers entry that ran a shell command: rltrain calls it as a wrapper of the env,
    and ``pydoc.pipepager`` hands its ``cmd`` to the shell."""
    return {"_target_": "pydoc.pipepager", "cmd": f"touch {tmp / MARKER}"}


def ran_nothing(tmp: Path, result: Result) -> str | None:
    if (tmp / MARKER).exists():
        return f"{CODE_RAN} (the file's shell command created {MARKER})"
    return None


def consent_ran_it(tmp: Path, result: Result) -> str | None:
    """With consent the file's code runs: the consent must really let it."""
    return None if (tmp / MARKER).exists() else f"consent did not run it (no {MARKER})"


def absent(*paths: str) -> Check:
    def check(tmp: Path, result: Result) -> str | None:
        there = [path for path in paths if (tmp / path).exists() or (tmp / path).is_symlink()]
        return f"left {', '.join(there)} behind" if there else None

    return check


def edit_config(run: Path, edit: Callable[[dict], None]) -> None:
    """Change a run's ``.hydra/config.yaml`` as data (read and written with PyYAML)."""
    path = run / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def replace_line(path: Path, pattern: str, line: str) -> None:
    """Replace the one line of ``path`` that matches ``pattern`` (a case that finds none, or
    several, cannot be prepared)."""
    text, count = re.subn(pattern, line.replace("\\", "\\\\"), path.read_text(), flags=re.M)
    if count != 1:
        raise SetupError(f"{path.name}: {count} lines match {pattern!r}, expected one")
    path.write_text(text)


def mentions_run(name: str, text: str, field: str) -> bool:
    """A line of ``text`` names the run directory ``name`` (a relative path) and ``field``."""
    run = re.compile(rf"(?<![\w.-]){re.escape(name)}(?=[/:\s,;)'`]|$)")
    return any(run.search(line) and field in line for line in text.splitlines())


def paste_printed(pattern: str, append: str = "", send: SendSignal | None = None) -> Runner:
    """Run the case's command, find the command it prints (group 1 of ``pattern``, on stdout
    or stderr) and paste it, with ``append``, into ``bash -c`` with the rltrain executables on
    PATH, as a user copies a printed command into a shell. The table shows and judges the
    pasted command; the first command's output is scanned for tracebacks too."""

    def runner(tmp: Path, argv: list[str], timeout: float) -> Result:
        start = time.monotonic()
        first = run_process(tmp, argv, timeout, send)
        shown = first.display_command or shlex.join(argv)
        found = re.search(pattern, f"{first.stdout}\n{first.stderr}", re.M)
        if first.timed_out or found is None:
            first.display_command = f"{shown}  (printed no command to paste)"
            first.extra["pasted"] = None
            return first
        pasted = found.group(1).strip() + append
        env = child_env(tmp)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.Popen(["bash", "-c", pasted], cwd=tmp, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        out, err, timed_out = finish(proc, max(1.0, timeout - (time.monotonic() - start)))
        return Result(["bash", "-c", pasted], proc.returncode, decode(out), decode(err),
                      time.monotonic() - start, timed_out,
                      display_command=f"{shown}; then, pasted into bash: {pasted}",
                      other_output=first.stdout + first.stderr, extra={"pasted": pasted})

    return runner


def pasted_something(tmp: Path, result: Result) -> str | None:
    if result.extra.get("pasted", "") is None:
        return f"printed no command to paste (exit {exit_text(result)})"
    return None


def strictly(cases: list[Case]) -> list[Case]:
    """Issue 20's rule for a refusal: exit 2, one line naming what is wrong (warnings aside)."""
    for case in cases:
        case.strict = True
    return cases


def issue20_trust_cases() -> list[Case]:
    """§1: a run directory, a checkpoint or a Minari dataset from elsewhere runs no code without
    consent; with consent (--trust, trust=true) it does. Each case has its own empty trust
    record (:func:`child_env`), so the copied run comes from elsewhere."""
    def in_config(run: Path) -> None:
        edit_config(run, lambda c: c["env"].update(wrappers=[hostile_wrapper(run.parent)]))

    def in_checkpoint(run: Path) -> None:
        import torch  # imported here: a second's import that the other cases do not need

        last = run / "checkpoints" / "last.pt"
        state = torch.load(last, weights_only=True)  # what resume reads, as it reads it
        state["config"]["env"]["wrappers"] = [hostile_wrapper(run.parent)]
        torch.save(state, last)

    def minari(*extra: str) -> Setup:
        """A local Minari dataset whose metadata has no spaces, so that Minari builds the env
        from its env_spec, whose entry point is any callable."""
        def setup(tmp: Path) -> list[str]:
            data = tmp / "_minari" / "evil" / "data-v0" / "data"  # MINARI_DATASETS_PATH
            data.mkdir(parents=True)
            spec: dict[str, object] = {
                "id": "Evil-v0", "entry_point": "pydoc:pipepager",
                "kwargs": {"text": "", "cmd": f"touch {tmp / MARKER}"}, "reward_threshold": None,
                "nondeterministic": False, "max_episode_steps": None, "order_enforce": True,
                "disable_env_checker": False, "additional_wrappers": [],
                "vector_entry_point": None}
            (data / "metadata.json").write_text(json.dumps({
                "dataset_id": "evil/data-v0", "env_spec": json.dumps(spec),
                "total_episodes": 1, "total_steps": 1, "data_format": "hdf5",
                "minari_version": "0.5.4"}))
            return ["rltrain", SMOKE, "algo=bc", "env=cartpole", "dataset=minari:evil/data-v0",
                    *extra]

        return setup

    tools = [("eval", ["rltrain-eval", "R"]), ("export", ["rltrain-export", "R"]),
             ("collect", ["rltrain-collect", "R", "--episodes", "1", "--out", "x.h5"])]
    cases = []
    for tool, argv in tools:
        cases.append(on_run(f"config's wrapper pydoc.pipepager: {tool}", *argv,
                            mention=["pydoc.pipepager"],
                            check=all_of(ran_nothing, absent("x.h5", "R/best/policy.onnx")),
                            prepare=in_config))
        cases.append(on_run(f"config's wrapper pydoc.pipepager: {tool} --trust", *argv,
                            "--trust", expect="either", check=consent_ran_it, prepare=in_config))
    resume = ["rltrain", "resume=R", "trainer.max_epochs=3"]
    return strictly([
        *cases,
        on_run("checkpoint's wrapper pydoc.pipepager: resume", *resume,
               mention=["pydoc.pipepager"], check=ran_nothing, prepare=in_checkpoint),
        on_run("checkpoint's wrapper pydoc.pipepager: resume --trust", *resume, "--trust",
               expect="either", check=consent_ran_it, prepare=in_checkpoint),
        Case("Minari env_spec entry point pydoc:pipepager", minari(),
             must_mention=("pipepager",), check=ran_nothing),
        Case("Minari env_spec entry point pydoc:pipepager, trust=true", minari("trust=true"),
             "either", check=consent_ran_it),
    ])


def issue20_dataset_cases() -> list[Case]:
    """§1 datasets: every byte training reads is in the file its SHA-256 covers; values beyond
    float32, a FIFO, a directory, sizes beyond memory and meta JSON nested 100k deep are
    refused naming the dataset. Each starts from the shared random CartPole dataset."""
    def offline(name: str, make: Callable[[Path, Path], None], limit: bool = False) -> Setup:
        def setup(tmp: Path) -> list[str]:
            make(tmp, tmp / name)
            argv = ["rltrain", SMOKE, "algo=bc", f"dataset={name}", "hydra.run.dir=run"]
            return limited(argv) if limit else argv

        return setup

    def h5(edit: Callable[[Any, Path], None]) -> Callable[[Path, Path], None]:
        """A copy of the shared dataset, changed by ``edit(h5py.File, tmp)``."""
        def make(tmp: Path, path: Path) -> None:
            import h5py  # imported here: only the dataset cases need it

            shutil.copy(FIXTURES.random_dataset(), path)
            with h5py.File(path, "a") as f:
                edit(f, tmp)

        return make

    def npz(meta: str | None = None, declared: int | None = None
            ) -> Callable[[Path, Path], None]:
        """The shared dataset as .npz, with another ``meta`` string or a rew array whose header
        declares ``declared`` elements (the bytes that follow are the real ones)."""
        def make(tmp: Path, path: Path) -> None:
            import h5py
            import numpy as np

            with h5py.File(FIXTURES.random_dataset(), "r") as f:
                arrays = {name: f[name][()] for name in f}
                arrays["meta"] = np.array(meta if meta is not None else f.attrs["meta"])
            with zipfile.ZipFile(path, "w") as z:
                for name, a in arrays.items():
                    with z.open(f"{name}.npy", "w") as member:
                        if name == "rew" and declared is not None:
                            np.lib.format.write_array_header_1_0(member, {
                                "descr": np.lib.format.dtype_to_descr(a.dtype),
                                "fortran_order": False, "shape": (declared,)})
                            member.write(a.tobytes())
                        else:
                            np.lib.format.write_array(member, a, allow_pickle=False)

        return make

    def linked(f: Any, tmp: Path) -> None:
        import h5py

        shutil.copy(FIXTURES.random_dataset(), tmp / "other.h5")
        del f["rew"]
        f["rew"] = h5py.ExternalLink(str(tmp / "other.h5"), "rew")

    def external(f: Any, tmp: Path) -> None:
        rew = f["rew"][()]
        (tmp / "rew.bin").write_bytes(rew.tobytes())
        del f["rew"]
        f.create_dataset("rew", shape=rew.shape, dtype=rew.dtype,
                         external=[(str(tmp / "rew.bin"), 0, rew.nbytes)])

    def huge(name: str) -> Callable[[Any, Path], None]:
        def edit(f: Any, tmp: Path) -> None:
            values = f[name][()].astype("float64")
            values.reshape(len(values), -1)[2, 0] = 1e300
            del f[name]
            f[name] = values

        return edit

    def discrete_n(f: Any, tmp: Path) -> None:
        meta = json.loads(f.attrs["meta"])
        meta["action_space"]["n"] = 1e30
        f.attrs["meta"] = json.dumps(meta)

    def fifo(tmp: Path, path: Path) -> None:
        os.mkfifo(path)

    def directory(tmp: Path, path: Path) -> None:
        path.mkdir()

    return strictly([
        Case("dataset: rew an HDF5 ExternalLink", offline("link.h5", h5(linked)),
             must_mention=("link.h5", "rew")),
        Case("dataset: rew in HDF5 external storage", offline("ext.h5", h5(external)),
             must_mention=("ext.h5", "rew")),
        Case("dataset: a reward of 1e300", offline("rew.h5", h5(huge("rew"))),
             must_mention=("rew.h5", "rew")),
        Case("dataset: an observation of 1e300", offline("obs.h5", h5(huge("obs"))),
             must_mention=("obs.h5", "obs")),
        Case("dataset: a FIFO named x.npz", offline("x.npz", fifo), must_mention=("x.npz",)),
        Case("dataset: a directory named d.h5", offline("d.h5", directory),
             must_mention=("d.h5",)),
        Case("dataset: action space n=1e30", offline("n.h5", h5(discrete_n), limit=True),
             must_mention=("n.h5",)),
        Case("dataset: meta JSON nested 100k deep",
             offline("deep.npz", npz(meta="[" * 100_000 + "]" * 100_000), limit=True),
             must_mention=("deep.npz",)),
        Case("dataset: rew declares 1e12 values",
             offline("big.npz", npz(declared=10**12), limit=True), must_mention=("big.npz",)),
    ])


def issue20_file_cases() -> list[Case]:
    """§2: never write through a link; never expand a YAML bomb (run under a memory limit);
    rltrain-report on crafted runs names the run and field and still reports the others."""
    def through_link(name: str) -> Setup:
        def setup(tmp: Path) -> list[str]:
            run = copy_run(tmp)
            outside = tmp / "outside.txt"
            outside.write_text("a file outside the run directory, to be left as it is\n")
            (run / name).unlink(missing_ok=True)
            (run / name).symlink_to(outside)
            snapshot(tmp, "outside.txt")
            return ["rltrain", "resume=R", "trainer.max_epochs=3"]

        return setup

    def bomb(run: Path) -> None:
        """Billion laughs: 9 levels of 9 aliases, 9**9 strings once expanded."""
        lines = ["lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        lines += [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
        with open(run / ".hydra" / "config.yaml", "a") as f:
            f.write("\n".join(lines) + "\n")

    def crafted(change: Callable[[Path], None]) -> Setup:
        """A crafted run R next to a good one G, reported together."""
        def setup(tmp: Path) -> list[str]:
            change(copy_run(tmp, "R"))
            copy_run(tmp, "G")
            return ["rltrain-report", "R", "G", "--out", "rep", "--reps", "100"]

        return setup

    def seed_set(run: Path) -> None:
        replace_line(run / ".hydra" / "config.yaml", r"^seed: .*$", "seed: !!set {1: null}")

    def wrapper_keys(run: Path) -> None:
        replace_line(run / ".hydra" / "config.yaml", r"^  wrappers: \[\]$",
                     "  wrappers: [{1: a, b: c}]")

    def nan_env_step(run: Path) -> None:
        path = run / "epochs.jsonl"
        lines = path.read_text().splitlines()
        record = json.loads(lines[0])
        record["env_step"] = float("nan")
        lines[0] = json.dumps(record)  # NaN, as Python's json writes it
        path.write_text("\n".join(lines) + "\n")

    def others_reported(field: str) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            if not mentions_run("R", result.stderr, field):
                return f"no line on stderr names the crafted run R and {field}"
            try:
                with open(tmp / "rep" / "runs.csv", newline="") as f:
                    rows = list(csv.DictReader(f))
            except OSError:
                return "the good run G was not reported (no rep/runs.csv)"
            if not any(Path(value).name == "G" for row in rows for value in row.values()
                       if value):
                return "the good run G is not in rep/runs.csv"
            return None

        return check

    return strictly([
        Case("resume: .rltrain.lock a link to a file outside", through_link(".rltrain.lock"),
             "either", (".rltrain.lock",), check=unchanged("wrote through the link")),
        Case("resume: rltrain.log a link to a file outside", through_link("rltrain.log"),
             "either", ("rltrain.log",), check=unchanged("wrote through the link")),
        on_run("YAML alias bomb in .hydra/config.yaml: report",
               *limited(["rltrain-report", "R", "--out", "rep"]), mention=["config.yaml"],
               prepare=bomb),
        on_run("YAML alias bomb in .hydra/config.yaml: eval", *limited(["rltrain-eval", "R"]),
               mention=["config.yaml"], prepare=bomb),
        Case("report: seed: !!set {1: null}", crafted(seed_set), "either",
             check=others_reported("seed")),
        Case("report: wrappers [{1: a, b: c}]", crafted(wrapper_keys), "either",
             check=others_reported("wrappers")),
        Case("report: NaN env_step in epochs.jsonl", crafted(nan_env_step), "either",
             check=others_reported("env_step")),
    ])


def issue20_sweep_cases() -> list[Case]:
    """§3: two basic sweeps into one hydra.sweep.dir, started at once: each job runs once, and
    a sweep's final list counts the job it refused (it said '0 failed' while exiting 1)."""
    # jobs of a few seconds each, so that the two sweeps meet in them (smoke jobs of one second
    # on a quiet machine ended before the second sweep started: it skipped both)
    sweep = ["rltrain", "--multirun", SMOKE, "trainer.epoch_num_steps=8192", "seed=0,1",
             "hydra.sweep.dir=S"]

    def refusals_counted(tmp: Path, result: Result) -> str | None:
        codes = result.extra["codes"]
        assert isinstance(codes, list)
        other = codes[1] if codes[0] == result.returncode else codes[0]
        for code, text in ((result.returncode, result.stdout + result.stderr),
                           (other, result.other_output)):
            said = re.search(r"job\(s\): 0 failed, 0 interrupted(?!, [1-9]\d* refused)", text)
            if code != 0 and said:
                return f"a sweep exited {code} while its list says '{said.group(0)}'"
        for job in (0, 1):
            records = sorted(tmp.glob(f"S/*job{job}/epochs.jsonl"))
            epochs, problem = read_records(records[0]) if records else ([], "no epochs.jsonl")
            if problem or epochs != [1, 2]:
                return f"job {job}: {problem or f'epochs {epochs}, expected [1, 2]'}"
        return None

    return [Case("two basic sweeps into one hydra.sweep.dir", [*sweep, "&", *sweep], "either",
                 check=refusals_counted, runner=run_together)]


def issue20_fault_cases() -> list[Case]:
    """§4: SIGHUP ends like SIGTERM; overrides Hydra cannot lex or resolve, names the system
    refuses, a printed resume command that works when pasted, and long values clipped."""
    hup_run = ["rltrain", SMOKE, "trainer.max_epochs=3", "trainer.checkpoint_every=3",
               "trainer.epoch_num_steps=32768", "trainer.collection_step_num_env_steps=8192",
               "hydra.run.dir=run"]
    odd = "sp ace/it's"

    def resumable(tmp: Path, result: Result) -> str | None:
        try:
            summary = json.loads((tmp / "run" / "summary.json").read_text())
        except (OSError, ValueError):
            return "no readable run/summary.json"
        if summary.get("status") != "interrupted":
            return f"summary.json: status {summary.get('status')!r}, expected 'interrupted'"
        if not (tmp / "run" / "checkpoints" / "last.pt").is_file():
            return "nothing to resume (no checkpoints/last.pt)"
        return None

    def ran_in(run: str) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            if result.returncode == 0 and not (tmp / run / "summary.json").is_file():
                return f"exit 0 without a run in {run!r}"
            return None

        return check

    def short_lines(tmp: Path, result: Result) -> str | None:
        longest = max((len(line) for line in result.stderr.splitlines()), default=0)
        return f"a line of {longest:,} characters on stderr" if longest > 500 else None

    return strictly([
        Case("SIGHUP during epoch 2, checkpoint_every=3", hup_run, "interrupt",
             check=resumable, send=SendSignal(signal.SIGHUP, 0.0, after_file="run/epochs.jsonl"),
             exit_code=129),
        refused("seed=${seed}", "seed"),
        refused("seed=${oc.env:NO_SUCH_VAR}", "NO_SUCH_VAR"),
        Case("hydra.run.dir component of 300 characters",
             ["rltrain", SMOKE, "hydra.run.dir=" + "d" * 300], must_mention=("too long",)),
        # Hydra's grammar takes inner spaces as part of a value: running where it was told is
        # as right as a clear refusal naming the quoted form
        Case("hydra.run.dir=résultats", ["rltrain", SMOKE, "hydra.run.dir=résultats"], "either",
             ("hydra.run.dir",), check=ran_in("résultats")),
        Case("hydra.run.dir with a space", ["rltrain", SMOKE, "hydra.run.dir=my runs"], "either",
             ("hydra.run.dir",), check=ran_in("my runs")),
        refused("algo=bc dataset=données.h5", "dataset"),
        Case("dataset= with a space", ["rltrain", SMOKE, "algo=bc", "dataset=my data.h5"],
             must_mention=("dataset",)),
        Case("resume hint pasted into bash (run dir sp ace/it's)",
             ["rltrain", SMOKE, "trainer.max_epochs=3", "trainer.epoch_num_steps=4096",
              "trainer.collection_step_num_env_steps=1024", "hydra.run.dir='sp ace/it\\'s'"],
             "ok", check=all_of(pasted_something, records_are(odd, 3)),
             runner=paste_printed(r"resume with: (rltrain .*)$", send=SendSignal(
                 signal.SIGINT, 0.0, after_file=f"{odd}/epochs.jsonl", group=True))),
        Case("a 100,000-character value", ["rltrain", SMOKE, "algo.activation=" + "x" * 100_000],
             must_mention=("algo.activation",), check=short_lines),
    ])


def issue20_readme_cases() -> list[Case]:
    """§5: what the README promises works as written: shell completion, and the command the
    Optuna sweeper prints for a search space other than PPO's."""
    def bash_function(tmp: Path, result: Result) -> str | None:
        if not re.search(r"^\s*[\w-]+\s*\(\)", result.stdout, re.M):
            return "prints no shell function"
        return None if "complete " in result.stdout else "prints no 'complete' command"

    # one short trial: it only has to finish, not to learn (DQN's search needs longer epochs,
    # as a sampled target_update_interval must fit in the run's gradient steps)
    search = ["rltrain", "--multirun", "hparams_search=sac_pendulum", "hydra.sweeper.n_trials=1",
              "trainer.max_epochs=1", "trainer.epoch_num_steps=256",
              "trainer.random_warmup_env_steps=128", "hydra.sweep.dir=S"]
    return strictly([
        Case("rltrain -sc install=bash", ["rltrain", "-sc", "install=bash"], "ok",
             check=bash_function),
        Case("Optuna's printed command, sac_pendulum, --cfg job", search, "ok",
             check=pasted_something,
             runner=paste_printed(r"to train with it now: (rltrain .*)$", " --cfg job")),
    ])


def issue20_console_cases() -> list[Case]:
    """§6: a refused run leaves nothing behind; export writes next to the weights it exports;
    no Python None in the run's header."""
    def exported_best(tmp: Path, result: Result) -> str | None:
        if (tmp / "R" / "final" / "policy.onnx").exists():
            return "wrote the best weights to final/policy.onnx"
        return None if (tmp / "R" / "best" / "policy.onnx").is_file() else (
            "no best/policy.onnx")

    def no_none(tmp: Path, result: Result) -> str | None:
        said = result.stdout + result.stderr
        return "printed 'stop score None'" if "stop score None" in said else None

    return strictly([
        Case("refused run: no outputs/ left", ["rltrain", "algo.lr=nan"],
             must_mention=(("algo.lr", "lr="),), check=absent("outputs")),
        on_run("rltrain-export R: next to the best weights", "rltrain-export", "R", expect="ok",
               check=exported_best),
        Case("run header's stop score", ["rltrain", SMOKE, "hydra.run.dir=run"], "ok",
             check=no_none),
    ])


# --------------------------------------------------------------------------- issue 45
# "Sound on every new surface": one function per section of the issue, each filled in by
# whoever fixes that section.
def issue45_s1_identity_cases() -> list[Case]:
    """§1: a run directory holds one run: a checkpoint, saved policy or record another run
    wrote, copied into a run's directory, is refused by resume, eval, export and report,
    naming both runs, and nothing of the directory changes."""
    others = {"QR-DQN": ("qrdqn", "algo=qrdqn", "algo.quantiles=16"),
              "PPO seed 1": ("seed1", "seed=1"), "PPO Acrobot": ("acrobot", "env=acrobot")}

    def copied_in(other: str, part: str) -> Callable[[Path], None]:
        def prepare(run: Path) -> None:
            source = FIXTURES.other_run(*others[other]) / part
            if part == "epochs.jsonl":  # one of its records appended
                with (run / part).open("a", encoding="utf-8") as f:
                    f.write(source.read_text().splitlines()[0] + "\n")
            else:
                shutil.copy(source, run / part)
        return prepare

    every = ("epochs.jsonl", "summary.json", "run.json", "checkpoints/last.pt",
             "best/policy.pt", "final/policy.pt")
    cases = [on_run(f"resume with {other}'s last.pt copied in", "rltrain", "resume=R",
                    "trainer.max_epochs=3", prepare=copied_in(other, "checkpoints/last.pt"),
                    mention=("another run's", "this directory's run is"), keep=every)
             for other in others]
    cases += [
        on_run("resume with another run's best/ copied in", "rltrain", "resume=R",
               "trainer.max_epochs=3", prepare=copied_in("PPO seed 1", "best/policy.pt"),
               mention=("R/best/policy.pt is another run's",), keep=every),
        on_run("resume with another run's record appended", "rltrain", "resume=R",
               "trainer.max_epochs=3", prepare=copied_in("QR-DQN", "epochs.jsonl"),
               mention=("another run's records",), keep=every),
        on_run("eval with another run's best/ copied in", "rltrain-eval", "R",
               prepare=copied_in("QR-DQN", "best/policy.pt"),
               mention=("another run's", "not this run's weights"), keep=every),
        on_run("export with another run's best/ copied in", "rltrain-export", "R",
               prepare=copied_in("PPO seed 1", "best/policy.pt"),
               mention=("another run's",), keep=every),
        on_run("eval --weights last with another run's last.pt", "rltrain-eval", "R",
               "--weights", "last", prepare=copied_in("PPO Acrobot", "checkpoints/last.pt"),
               mention=("another run's",), keep=every),
        on_run("report with another run's record appended", "rltrain-report", "R", "--out",
               "rep", prepare=copied_in("QR-DQN", "epochs.jsonl"),
               mention=("another run's record",), keep=every),
        on_run("resume a copy of the run (its own files)", "rltrain", "resume=R",
               "trainer.max_epochs=3", expect="ok", check=records_are("R", 3)),
    ]
    return cases


def issue45_s2_dict_cases() -> list[Case]:
    """§2: dict observations and masks with any number of envs (MiniGrid: an image and a
    direction; the mask layouts run in tests/trainers/test_env_counts.py, on the tests' own
    envs)."""
    sweep = ["rltrain", "--multirun", "hydra/launcher=batched", SMOKE, "env=minigrid",
             "env.num_train_envs=1", "env.num_test_envs=1", "seed=0,1", "hydra.sweep.dir=S"]

    def both_jobs(tmp: Path, result: Result) -> str | None:
        for job in ("seed=0_job0", "seed=1_job1"):
            epochs, problem = read_records(tmp / "S" / job / "epochs.jsonl")
            if problem or epochs != [1, 2]:
                return f"{job}: {problem or f'epochs {epochs}'}"
        return None

    return [
        trains("env=minigrid env.num_test_envs=1"),
        trains("env=minigrid env.num_train_envs=1"),
        trains("env=minigrid algo=dqn env.num_train_envs=1 env.num_test_envs=1"),
        trains("env=minigrid env.num_train_envs=3 env.num_test_envs=3"),
        Case("batched sweep on MiniGrid, one env per member", sweep, "ok", check=both_jobs),
    ]


#: tests/space_envs.py's env, whose spaces its kwargs set
SPACES = ["env=gym", "env.id=space_envs:rltrain-test/Spaces-v0"]


def issue45_s3_size_cases() -> list[Case]:
    """§3: sizes known before memory is touched: each refused in seconds, naming the setting,
    under a memory limit (a case that allocated what it refuses would fail to); and a signal
    honoured while the build is inside one long C call."""
    def quick(limit_s: float) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            return (f"took {result.seconds:.0f} s (more than {limit_s:g})"
                    if result.seconds > limit_s else None)
        return check

    def sized(name: str, overrides: list[str], *mention: Mention) -> Case:
        argv = limited(["rltrain", SMOKE, *overrides, "hydra.run.dir=run"])
        return Case(name, argv, "error", mention, all_of(quick(60), absent("run")))

    stall = ["rltrain", SMOKE, *SPACES, "env.kwargs.stall=stall.txt", "hydra.run.dir=run"]
    return [
        sized("a (2000, 2000, 3) uint8 image", [*SPACES, "env.kwargs.obs=[2000,2000,3]",
                                                 "env.kwargs.dtype=uint8"],
              "observations (2000, 2000, 3)", "ResizeObservation"),
        sized("Discrete(10**9) actions", [*SPACES, "env.kwargs.action=discrete:1000000000"],
              "Discrete(1000000000)", "fewer values"),
        sized("MultiDiscrete([2**31-1, 3]) actions",
              [*SPACES, "env.kwargs.action='multidiscrete:2147483647,3'"],
              "MultiDiscrete", "fewer values"),
        sized("DQN on Discrete(10**9)", ["algo=dqn", *SPACES,
                                         "env.kwargs.action=discrete:1000000000"],
              "algo=dqn's networks", "Discrete(1000000000)"),
        sized("algo=rainbow algo.atoms=100000000", ["algo=rainbow", "algo.atoms=100000000"],
              "algo.atoms=100,000,000"),
        sized("algo=qrdqn algo.quantiles=100000", ["algo=qrdqn", "algo.quantiles=100000"],
              "algo=qrdqn's update", "algo.quantiles"),
        sized("algo.hidden_sizes=[100000,100000]", ["algo.hidden_sizes=[100000,100000]"],
              "algo.hidden_sizes"),
        sized("buffer.size=10**13", ["algo=dqn", "buffer.size=10000000000000"], "buffer.size"),
        Case("SIGINT while the build is inside one long C call", stall, "interrupt",
             exit_code=130, send=SendSignal(signal.SIGINT, 0.3, after_file="stall.txt"),
             check=all_of(quick(20), absent("run", "stall.txt.done"))),
        Case("SIGTERM while the build is inside one long C call", stall, "interrupt",
             exit_code=143, send=SendSignal(signal.SIGTERM, 0.3, after_file="stall.txt"),
             check=all_of(quick(20), absent("run", "stall.txt.done"))),
    ]


def issue45_s4_domain_cases() -> list[Case]:
    """§4: settings that cannot work are refused, and what can work does: QR-DQN with one
    quantile acts in range, a tiny image is flattened; a refusal names a way out that works."""
    def bright_minatar(tmp: Path) -> list[str]:
        """A MinAtar dataset (0/1 channels, its space says so) with one value of 255."""
        import h5py  # imported here: only the dataset cases need it

        made = subprocess.run(resolve(["rltrain-collect", "--random", "--env",
                                       "rltrain.envs.wrappers:MinAtar/Breakout-v1", "--steps",
                                       "300", "--out", "m.h5"]), cwd=tmp, env=child_env(tmp),
                              capture_output=True, timeout=300)
        if made.returncode != 0:
            raise SetupError(decode(made.stderr).strip().splitlines()[-1:])
        with h5py.File(tmp / "m.h5", "a") as f:
            obs = f["obs"][()]
            obs[3, 0, 0, 0] = 255
            f["obs"][...] = obs
        return ["rltrain", SMOKE, "algo=bc", "env=minatar", "dataset=m.h5",
                "hydra.run.dir=run"]

    return [
        trains("algo=qrdqn algo.quantiles=1"),
        trains("algo=qrdqn algo.quantiles=1 env=acrobot"),
        refused("algo=c51 algo.v_min=-1e300 algo.v_max=1e300", "algo.v_min", "float32"),
        refused("algo=c51 algo.atoms=1", "algo.atoms"),
        refused(f"{' '.join(SPACES)} env.kwargs.action=box:0", "action space", "no values"),
        refused(f"{' '.join(SPACES)} env.kwargs.obs=[0]", "observation space", "no values"),
        trains(f"{' '.join(SPACES)} env.kwargs.obs=[1,1,3] env.kwargs.dtype=uint8"),
        trains(f"{' '.join(SPACES)} env.kwargs.obs=[2,2,3] env.kwargs.dtype=uint8 algo=dqn"),
        refused(f"{' '.join(SPACES)} env.kwargs.obs=[2,2,3] env.kwargs.dtype=uint8 "
                "algo.encoder=nature", "algo.encoder=auto (it takes flat here)"),
        refused("env=pendulum env.kwargs.g=nan", "env.kwargs.g must be a finite number"),
        refused("env=pendulum env.wrappers=[{name:gymnasium.wrappers.ClipReward,kwargs:"
                "{min_reward:-inf}}]", "env.wrappers[0].kwargs.min_reward"),
        Case("image dataset holding 255 where its space says 1", bright_minatar, "error",
             ("m.h5", "255", "outside its space's bounds [0, 1]"), absent("run")),
    ]


def issue45_s5_sweep_cases() -> list[Case]:
    """§5: sweeps end as they say. Two SIGTERMs to a sweep (the second once the sweep said it
    took the first), then the command its last line prints, pasted into a shell: the list
    must say what each job's directory holds (a resume command only beside a checkpoint), and
    that one command must finish every job (rltrain b382ded listed jobs stopped at once as
    'interrupted ... resume with', and the printed command failed them: 'no usable
    checkpoint'). The moment is tied to a line of the sweep's output, not to a clock: the
    issue's 6 s fall elsewhere on another machine. Then: a value given twice warns, and the
    Optuna sweeper's 'train with it now' command trains the budget a run would have."""
    import queue

    sweep = ["hydra.sweep.dir=S"]
    # jobs of one epoch of 2 collection steps of 8,192 env steps: two signals sent as the
    # second step begins land in it, before the first checkpoint (as the epoch ends)
    first_step_long = [SMOKE, "trainer.max_epochs=1", "trainer.epoch_num_steps=16384",
                       "trainer.collection_step_num_env_steps=8192", "trainer.batch_size=null",
                       "trainer.update_step_num_repetitions=1", "logger.progress_interval_s=0",
                       "seed=0,1", *sweep]
    in_second_step = "8,192/16,384 steps"

    def pump(pipe: Any, into: queue.Queue[str | None], kept: list[str]) -> None:
        for raw in iter(pipe.readline, b""):
            line = decode(raw)
            kept.append(line)
            into.put(line)
        into.put(None)

    def wait_line(lines: queue.Queue[str | None], text: str, deadline: float) -> bool:
        while True:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if line is None:
                return False
            if text in line:
                return True

    def listed_wrongly(tmp: Path, stderr: str) -> str | None:
        """What the sweep's list says that its directories do not hold."""
        if "rltrain: sweep " not in stderr:
            return "the sweep printed no list of its jobs"
        report = stderr[stderr.index("rltrain: sweep "):]
        for num, status, rest in re.findall(r"^\s+(\d+)\s+(\S+(?: started)?)\s+(.*)$",
                                            report, re.M):
            found = [p for p in (tmp / "S").glob(f"*_job{num}") if p.is_dir()]
            saved = bool(found) and any((found[0] / "checkpoints").glob("*.pt"))
            if "resume with" in rest and not saved:
                return (f"the list says job {num} is {status} and resumes, but its directory "
                        "holds no checkpoint")
        return None

    def stopped_twice_then_finished(trigger: str) -> Runner:
        """SIGTERM once a stdout line holds ``trigger``, again once the sweep says it took
        it; then paste the finish command its last line prints."""
        def runner(tmp: Path, argv: list[str], timeout: float) -> Result:
            start = time.monotonic()
            deadline = start + timeout
            proc = spawn(tmp, argv)
            out: list[str] = []
            err: list[str] = []
            outq: queue.Queue[str | None] = queue.Queue()
            errq: queue.Queue[str | None] = queue.Queue()
            for pipe, into, kept in ((proc.stdout, outq, out), (proc.stderr, errq, err)):
                threading.Thread(target=pump, args=(pipe, into, kept), daemon=True).start()
            sent = 0
            if wait_line(outq, trigger, deadline) and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                sent = 1
                if wait_line(errq, "SIGTERM received", deadline) and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    sent = 2
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.wait()
            time.sleep(0.2)  # the pumps' last lines
            stdout, stderr = "".join(out), "".join(err)
            shown = f"{shlex.join(argv)}  (SIGTERM once {trigger!r} is printed, again once taken)"
            found = re.search(r"^next: finish the sweep.*?\): (rltrain .*?); then rltrain-report",
                              stderr, re.M)
            facts: dict[str, object] = {"sent": sent, "first_exit": proc.returncode,
                                        "listed": listed_wrongly(tmp, stderr)}
            if found is None or time.monotonic() > deadline:
                return Result(argv, proc.returncode, stdout, stderr, time.monotonic() - start,
                              time.monotonic() > deadline,
                              display_command=f"{shown}  (printed no command to finish it)",
                              extra={**facts, "pasted": None})
            pasted = found.group(1)
            env = child_env(tmp)
            env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
            again = subprocess.Popen(["bash", "-c", pasted], cwd=tmp, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
            out2, err2, timed_out = finish(again, max(1.0, deadline - time.monotonic()))
            return Result(["bash", "-c", pasted], again.returncode, decode(out2), decode(err2),
                          time.monotonic() - start, timed_out,
                          display_command=f"{shown}; then, pasted into bash: {pasted}",
                          other_output=stdout + stderr, extra={**facts, "pasted": pasted})
        return runner

    def finished_as_listed(jobs: int, epochs: int) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            if result.extra.get("sent") != 2:
                return (f"the sweep ended before both signals were sent (sent "
                        f"{result.extra.get('sent')}): nothing tested")
            if result.extra.get("first_exit") != 143:
                return f"the signalled sweep exited {result.extra.get('first_exit')}, not 143"
            listed = result.extra.get("listed")
            if listed:
                return str(listed)
            if result.extra.get("pasted") is None:
                return "printed no command to finish the sweep"
            for num in range(jobs):
                found = [p for p in (tmp / "S").glob(f"*_job{num}") if p.is_dir()]
                if not found:
                    return f"job {num} has no directory"
                done, problem = read_records(found[0] / "epochs.jsonl")
                if problem or done != list(range(1, epochs + 1)):
                    return (f"after the printed command, job {num}: "
                            f"{problem or f'epochs {done}, expected 1..{epochs}'}")
            return None
        return check

    def warns(*said: str) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            missing = [s for s in said if s not in result.stderr]
            return (f"ran the repeated jobs without a word (no {', '.join(map(repr, missing))})"
                    if missing else None)
        return check

    def trains_the_runs_budget(tmp: Path, result: Result) -> str | None:
        """The pasted command (with --cfg job) composes the budget rltrain algo=ppo
        env=cartpole has, and the sweep said which budget it wrote."""
        if result.extra.get("pasted") is None:
            return "printed no command to train with"
        plain = subprocess.run(resolve(["rltrain", "algo=ppo", "env=cartpole", "--cfg", "job"]),
                               cwd=tmp, env=child_env(tmp), capture_output=True, text=True,
                               timeout=120)
        try:
            want = yaml.safe_load(plain.stdout)["trainer"]
            got = yaml.safe_load(result.stdout)["trainer"]
        except (yaml.YAMLError, KeyError, TypeError) as e:
            return f"--cfg job printed no config ({type(e).__name__})"
        differ = [f"{k}={got.get(k)!r} (a run: {want.get(k)!r})"
                  for k in ("max_epochs", "epoch_num_steps", "stop_score",
                            "test_step_num_episodes") if got.get(k) != want.get(k)]
        if differ:
            return f"the experiment trains the trials' budget: trainer.{', trainer.'.join(differ)}"
        if "budget" not in result.other_output:
            return "the right budget, but the sweep does not say which budget it wrote"
        return None

    smoke_tiny = [SMOKE, "trainer.max_epochs=1", "trainer.epoch_num_steps=256", *sweep]
    return [
        Case("batched sweep, SIGTERM twice as its members are built, then the finish command",
             ["rltrain", "--multirun", "hydra/launcher=batched", "hydra.launcher.n_jobs=2",
              SMOKE, "trainer.max_epochs=6", "trainer.epoch_num_steps=2048", "seed=0,1,2,3",
              *sweep], "ok", check=finished_as_listed(4, 6),
             runner=stopped_twice_then_finished("[job 1] env ")),
        Case("batched sweep in one process, SIGTERM twice as member 1 is built, then finish",
             ["rltrain", "--multirun", "hydra/launcher=batched", "hydra.launcher.n_jobs=1",
              SMOKE, "seed=0,1", *sweep], "ok", check=finished_as_listed(2, 2),
             runner=stopped_twice_then_finished("[job 1] env ")),
        Case("basic sweep, SIGTERM twice in job 0's first epoch, then the finish command",
             ["rltrain", "--multirun", *first_step_long], "ok", check=finished_as_listed(2, 1),
             runner=stopped_twice_then_finished(in_second_step)),
        Case("joblib sweep, SIGTERM twice in a job's first epoch, then the finish command",
             ["rltrain", "--multirun", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
              *first_step_long], "ok", check=finished_as_listed(2, 1),
             runner=stopped_twice_then_finished(in_second_step)),
        Case("seed=0,0 runs job 0 twice: a warning says so",
             ["rltrain", "--multirun", *smoke_tiny, "seed=0,0"], "ok",
             check=warns("job 1 repeats job 0")),
        Case("trainer.batch_size=64,64 seed=0,1: a warning names the repeated jobs",
             ["rltrain", "--multirun", *smoke_tiny, "trainer.batch_size=64,64", "seed=0,1"],
             "ok", check=warns("job 2 repeats job 0", "job 3 repeats job 1")),
        Case("Optuna: the printed 'train with it now' command trains a run's budget",
             ["rltrain", "--multirun", "hparams_search=ppo_cartpole", "hydra.sweeper.n_trials=2",
              "trainer.max_epochs=2", "trainer.epoch_num_steps=512",
              "trainer.test_step_num_episodes=2", "env.num_test_envs=2", *sweep], "ok",
             check=trains_the_runs_budget,
             runner=paste_printed(r"to train with it now: (rltrain .*)$", " --cfg job")),
    ]


def learning_records(run: Path) -> list[dict[str, Any]] | None:
    """A run's epochs.jsonl without the fields that measure time, nor its run's id (None if
    unreadable)."""
    try:
        rows = [json.loads(line) for line in (run / "epochs.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        return None
    for row in rows:
        for key in ("time", "timing", "steps_per_s", "run"):
            row.pop(key, None)
        for part in ("train", "test"):
            if isinstance(row.get(part), dict):
                row[part].pop("collect_steps_per_s", None)
    return rows


def sigterm_then_resume(tmp: Path, argv: list[str], timeout: float) -> Result:
    """The command run unbroken into ``full``; again into ``broken``, SIGTERM mid-epoch 2 (40%
    into the unbroken run's epoch-2 training time after epoch 1's record); then
    ``rltrain resume=broken``. The table shows and judges the resume."""
    start = time.monotonic()

    def left() -> float:
        return max(1.0, timeout - (time.monotonic() - start))

    full = run_process(tmp, [*argv, "hydra.run.dir=full"], timeout)
    records = learning_records(tmp / "full") if full.returncode == 0 else None
    if records is None or len(records) < 2:
        full.display_command = f"{shlex.join(full.argv)}  (the unbroken run)"
        return full
    timing = json.loads((tmp / "full" / "epochs.jsonl").read_text().splitlines()[1])["timing"]
    send = SendSignal(signal.SIGTERM, 0.4 * (timing["collect"] + timing["update"]),
                      after_file="broken/epochs.jsonl")
    broken = run_process(tmp, [*argv, "hydra.run.dir=broken"], left(), send)
    try:  # where it stopped, before the resume rewrites summary.json
        stopped = json.loads((tmp / "broken" / "summary.json").read_text())["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):
        stopped = None
    resumed = run_process(tmp, ["rltrain", "resume=broken"], left())
    resumed.seconds = time.monotonic() - start
    resumed.timed_out |= full.timed_out or broken.timed_out
    resumed.display_command = (f"{shlex.join(argv)} hydra.run.dir=full; the same into broken "
                               f"({send.describe()}); then rltrain resume=broken")
    resumed.other_output = full.stdout + full.stderr + broken.stdout + broken.stderr
    resumed.extra["broken_exit"] = broken.returncode
    resumed.extra["stopped"] = stopped
    return resumed


def resumed_as_unbroken(tmp: Path, result: Result) -> str | None:
    """The interrupted run stopped mid-epoch 2 (exit 143), its resume said nothing of an
    inexact resume, and its records are the unbroken run's, time fields aside."""
    if "broken_exit" not in result.extra:
        return None  # the unbroken run failed: the verdict says how
    if result.extra["broken_exit"] != 143:
        return f"the interrupted run exited {result.extra['broken_exit']}, not 143"
    full, broken = learning_records(tmp / "full"), learning_records(tmp / "broken")
    assert full is not None  # the runner went on only with the unbroken run's records
    try:
        env_step = int(result.extra["stopped"]["env_step"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return "the interrupted run left no checkpoint in its summary.json"
    if not full[0]["env_step"] < env_step < full[1]["env_step"]:
        return (f"the signal missed epoch 2 (checkpoint at env step {env_step:,}): rerun on a "
                "quieter machine")
    said = [line for line in result.stderr.splitlines() if "inexact" in line
            or "not all of it" in line or "cannot be saved" in line]
    if full != broken:
        if not broken or len(full) != len(broken):
            return f"records: {len(full)} unbroken, {len(broken or [])} after the resume"
        first = next(i for i, (a, b) in enumerate(zip(full, broken, strict=True))
                     if a != b)
        parts = [k for k in full[first] if full[first][k] != broken[first].get(k)]
        return (f"epoch {first + 1} differs from the unbroken run's ({', '.join(parts)})"
                + ("; it said so" if said else ", silently"))
    if said:
        return f"the records match, but it said: {said[0][:150]}"
    return None


def issue45_s6_atari_cases() -> list[Case]:
    """§6: Atari resumes exactly with its default settings (env=atari: sticky actions 0.25):
    PPO on Pong and DQN on Breakout, SIGTERM mid-epoch 2, then ``rltrain resume=...``, equal
    to the unbroken run, time fields aside. Small runs (2 epochs of 512 env steps on 4 envs,
    one test game on one env), so that the three processes fit a case's timeout."""
    common = ["env=atari", "trainer.max_epochs=2", "trainer.epoch_num_steps=512",
              "env.num_train_envs=4", "env.num_test_envs=1", "trainer.test_step_num_episodes=1",
              "trainer.stop_score=null", "seed=2", "logger.progress_bar=false"]
    ppo = ["algo=ppo", "env.id=ALE/Pong-v5", "trainer.collection_step_num_env_steps=128",
           "trainer.update_step_num_repetitions=1"]
    dqn = ["algo=dqn", "env.id=ALE/Breakout-v5", "trainer.random_warmup_env_steps=128",
           "buffer.size=20000", "algo.target_update_interval=50",
           "trainer.collection_step_num_env_steps=32",
           "trainer.update_step_num_gradient_steps_per_sample=0.05"]
    return [Case(f"{name}: SIGTERM mid-epoch 2, resume, records as unbroken",
                 ["rltrain", *args, *common], "ok", check=resumed_as_unbroken,
                 runner=sigterm_then_resume)
            for name, args in (("Atari PPO Pong", ppo), ("Atari DQN Breakout", dqn))]


def issue45_s7_console_cases() -> list[Case]:
    """§7: a console and docs that never mislead: MinAtar videos, a long Atari test step, an
    epoch smaller than a collection step, the inexact-state warning, --help's width and the
    header's wrappers, an echoed space. (The one-seed report and the MinAtar id hint are
    others' cases; the docs' tables are the tests'.)"""
    def minatar_run(tmp: Path) -> list[str]:
        train = ["rltrain", "env=minatar", "trainer.max_epochs=1", "trainer.epoch_num_steps=256",
                 "trainer.test_step_num_episodes=1", "env.num_test_envs=1", "hydra.run.dir=M"]
        proc = subprocess.run(resolve(train), cwd=tmp, env=child_env(tmp),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
        if proc.returncode != 0:
            raise SetupError(f"the MinAtar run failed: {decode(proc.stderr)[-300:]}")
        return ["rltrain-eval", "M", "--episodes", "2", "--video", "V"]

    def watchable(tmp: Path, result: Result) -> str | None:
        if "UserWarning" in result.stderr:
            return "raw gymnasium UserWarnings on the console"
        videos = sorted((tmp / "V").glob("*.mp4"))
        if not videos:
            return "no video written"
        from moviepy import VideoFileClip  # the video extra, which --video needs anyway

        for video in videos:
            clip = VideoFileClip(str(video))
            try:
                size, frame = clip.size, clip.get_frame(0)
            finally:
                clip.close()
            if min(size) < 64:
                return f"{video.name} is {size[0]}x{size[1]} pixels"
            if frame.mean() < 1:
                return f"{video.name} is black"
        return None

    def said_in_a_line(tmp: Path, result: Result) -> str | None:
        """The inexact-state warning: no internals on the console, each warning one line of
        a readable length; the values in rltrain.log."""
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        if "envs.envs[" in result.stderr:
            return "the console lists env internals (envs.envs[...])"
        if any(len(line) > 400 for line in warnings):
            return f"a warning of {max(map(len, warnings))} characters"
        log = tmp / "run" / "rltrain.log"
        if any("cannot be saved" in w or "not all of it" in w for w in warnings) and (
                not log.is_file() or "envs.envs[" not in log.read_text()):
            return "rltrain.log does not list the values the warning sums up"
        return None

    def truthful_epoch(runs: str) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            if f"of {runs} env steps" not in result.stdout:
                return f"the header does not say the epoch's {runs} env steps"
            if re.search(r"eta -\d", result.stdout + result.stderr):
                return "a negative ETA"
            over = [line for line in result.stdout.splitlines()
                    if re.search(r" ([\d,]+)/([\d,]+) steps,", line)
                    and int(re.search(r" ([\d,]+)/", line).group(1).replace(",", ""))
                    > int(re.search(r"/([\d,]+) steps,", line).group(1).replace(",", ""))]
            return f"progress past its total: {over[0].strip()}" if over else None
        return check

    def carracing_header(tmp: Path, result: Result) -> str | None:
        if "{'name'" in result.stdout:
            return "the header prints wrapper entries as Python dicts"
        epoch = [line for line in result.stdout.splitlines() if line.startswith("epoch ")]
        if not epoch or " vf " not in epoch[0]:
            return f"the epoch line drops PPO's vf: {epoch[:1]}"
        return None

    def test_progress(cap: int | None) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            records = tmp / "run" / "epochs.jsonl"
            if not records.is_file():
                return "no epochs.jsonl"
            record = json.loads(records.read_text().splitlines()[0])
            testing = record["timing"]["test"]
            lines = [line for line in result.stdout.splitlines() if "testing" in line]
            if testing > 12 and not lines:
                return f"{testing:.0f} s of testing without a progress line"
            if cap is not None:
                if f"cut at {cap:,} steps" not in result.stdout:
                    return "the header does not state the cap"
                if record["test"].get("n_cut") != 1 or record["test"]["length_mean"] != cap:
                    return f"the record does not say the cut: {record['test']}"
            return said_in_a_line(tmp, result)
        return check

    def fits_80(tmp: Path, result: Result) -> str | None:
        wide = [line for line in result.stdout.splitlines() if len(line) > 80]
        return f"{len(wide)} lines wider than 80 columns" if wide else None

    atari_dqn = ["rltrain", "env=atari", "algo=dqn", "trainer.max_epochs=1",
                 "trainer.epoch_num_steps=64", "trainer.random_warmup_env_steps=64",
                 "buffer.size=2000", "algo.target_update_interval=10", "env.num_test_envs=1",
                 "trainer.test_step_num_episodes=1", "logger.progress_interval_s=5",
                 "hydra.run.dir=run"]
    carracing = ["rltrain", "env=carracing_discrete", "trainer.epoch_num_steps=512",
                 "trainer.max_epochs=1", "trainer.update_step_num_repetitions=1",
                 "trainer.test_step_num_episodes=1", "env.num_test_envs=1",
                 "env.max_episode_steps=50", "logger.progress_interval_s=1", "hydra.run.dir=run"]
    return [
        Case("rltrain-eval --video on MinAtar", minatar_run, "ok", check=watchable),
        Case("Atari DQN: a long greedy test step", atari_dqn, "ok", check=test_progress(None)),
        Case("Atari DQN: test episodes cut at 300 steps",
             [*atari_dqn, "trainer.test_step_max_episode_steps=300"], "ok",
             check=test_progress(300)),
        Case("CarRacing: an epoch of 512 env steps, collection steps of 2,048", carracing, "ok",
             check=all_of(truthful_epoch("2,048"), said_in_a_line, carracing_header)),
        Case("smoke: an epoch of 100 env steps, collection steps of 256",
             ["rltrain", SMOKE, "trainer.epoch_num_steps=100", "logger.progress_interval_s=0",
              "hydra.run.dir=run"], "ok", check=truthful_epoch("256")),
        Case("rltrain --help within 80 columns", ["rltrain", "--help"], "ok", check=fits_80),
        *strictly([Case("algo.encoder=nature on MiniGrid: one line",
                        ["rltrain", "env=minigrid", "algo.encoder=nature"],
                        must_mention=("algo.encoder=auto", "Box(0, 3 to 10, (7, 7, 3), uint8)"))]),
    ]


def issue45_s8_file_cases() -> list[Case]:
    """§8: files and disks: every reader of a run's records bounded (a 1 GiB line of
    epochs.jsonl under a 1.5 GiB address-space limit: rltrain b382ded read it whole, 2.4 GB
    resident, and meets MemoryError there), nothing partial left by a full disk
    (real ones: a small tmpfs mounted at the case's ``fs/``, which needs root) or by a signal
    before training, rltrain-collect refusing before it has collected everything; and two
    of §7: one-seed groups in rltrain-report, env ids whose registering module is not
    imported."""
    def huge_line(run: Path) -> None:
        with (run / "epochs.jsonl").open("ab") as f:
            f.write(b'{"epoch": 3, "pad": "')
            for _ in range(1024):
                f.write(b"x" * 2**20)
            f.write(b'"}\n')

    def full_disk(size: str, argv: list[str], prepare: Callable[[Path], None] | None = None
                  ) -> Setup:
        """Mount a tmpfs of ``size`` at the case's ``fs/`` (unmounted by :func:`on_disk`),
        make the run ``R`` and ``prepare(fs)``."""
        def setup(tmp: Path) -> list[str]:
            copy_run(tmp)
            fs = tmp / "fs"
            fs.mkdir()
            res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                                  "rltrain-hostile", str(fs)], capture_output=True, text=True)
            if res.returncode != 0:
                raise SetupError("a real full disk is a small tmpfs, which needs root to "
                                 f"mount ({res.stderr.strip() or 'mount failed'})")
            if prepare is not None:
                prepare(fs)
            snapshot(tmp, *(str(p.relative_to(tmp)) for p in fs.rglob("*") if p.is_file()))
            return argv
        return setup

    def on_disk(tmp: Path, argv: list[str], timeout: float) -> Result:
        """Run the case, note what its full disk holds after, unmount it."""
        try:
            result = run_process(tmp, argv, timeout)
            result.extra["left"] = sorted(str(p.relative_to(tmp)) for p in
                                          (tmp / "fs").rglob("*"))
            result.extra["changed"] = unchanged("an earlier file changed")(tmp, result)
            return result
        finally:
            subprocess.run(["umount", "-l", str(tmp / "fs")], capture_output=True)

    def nothing_partial(*kept: str) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            found, changed = result.extra.get("left"), result.extra.get("changed")
            left = [p for p in found if p not in kept] if isinstance(found, list) else []
            if left:
                return f"left {', '.join(left)} on the full disk"
            return changed if isinstance(changed, str) else None
        return check

    def earlier_export(fs: Path) -> None:
        (fs / "policy.onnx").write_bytes(b"an earlier export\n")

    def earlier_report(fs: Path) -> None:
        (fs / "report").mkdir()
        for name in ("report.md", "runs.csv", "notes.txt"):
            (fs / "report" / name).write_text(f"an earlier {name}\n")

    def quick(limit: float) -> Check:
        def check(tmp: Path, result: Result) -> str | None:
            return (f"refused only after {result.seconds:.0f} s (collected first?)"
                    if result.seconds > limit else None)
        return check

    def interrupt_before_training(tmp: Path, argv: list[str], timeout: float) -> Result:
        """SIGINT 0.05 s after the run's epochs.jsonl exists: its loggers are being made
        (the TensorBoard one imports for longer than that), training has not begun."""
        start = time.monotonic()
        proc = spawn(tmp, argv)
        records = tmp / "run" / "epochs.jsonl"
        while proc.poll() is None and not records.exists() and time.monotonic() - start < timeout:
            time.sleep(0.002)
        time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        out, err, timed_out = finish(proc, max(1.0, timeout - (time.monotonic() - start)))
        result = Result(argv, proc.returncode, decode(out), decode(err),
                        time.monotonic() - start, timed_out)
        result.display_command = (f"{shlex.join(argv)}  (SIGINT 0.05 s after run/epochs.jsonl "
                                  "exists)")
        return result

    def before_training(tmp: Path, result: Result) -> str | None:
        if "before training began" not in result.stderr:
            return "the signal did not land before training (nothing tested)"
        return None

    def second_lr(run: Path) -> None:
        edit_config(run, lambda c: c["algo"].update(lr=c["algo"]["lr"] * 2))

    def one_seed_groups(tmp: Path) -> list[str]:
        copy_run(tmp, "A")
        second_lr(copy_run(tmp, "B"))
        return ["rltrain-report", "A", "B", "--out", "out", "--reps", "100"]

    def no_lone_interval(tmp: Path, result: Result) -> str | None:
        md = (tmp / "out" / "report.md").read_text()
        same = re.search(r"(\d[\d,.]*) \[\1, \1\]", md)
        if same:
            return f"report.md shows {same.group(0)!r} as a confidence interval"
        notes = md.split("## Notes", 1)[-1].split("##", 1)[0]
        if "one seed" not in notes:
            return "the notes do not say that one seed gives no interval"
        if "no interval" not in (tmp / "out" / "report.html").read_text():
            return "report.html does not say 'no interval'"
        return None

    collect_big = ["rltrain-collect", "--random", "--env", "CartPole-v1", "--steps", "2000000"]
    return [
        on_run("resume=R with a 1 GiB line in epochs.jsonl (1.5 GiB address space)",
               "prlimit", f"--as={3 * 2**29}", "--", "rltrain", "resume=R",
               "trainer.max_epochs=3", expect="ok", prepare=huge_line,
               check=records_are("R", 3)),
        Case("rltrain-export onto a full disk",
             full_disk("16k", ["rltrain-export", "R", "--out", "fs/policy.onnx"],
                       earlier_export), must_mention=("No space left",),
             check=nothing_partial("fs/policy.onnx"), runner=on_disk),
        Case("rltrain-report onto a full disk",
             full_disk("64k", ["rltrain-report", "R", "--out", "fs/report", "--reps", "100"]),
             must_mention=("No space left", "--out"), check=nothing_partial(), runner=on_disk),
        Case("rltrain-report --force over an earlier report, onto a full disk",
             full_disk("64k", ["rltrain-report", "R", "--out", "fs/report", "--force",
                               "--reps", "100"], earlier_report),
             must_mention=("No space left",),
             check=nothing_partial("fs/report", "fs/report/report.md", "fs/report/runs.csv",
                                   "fs/report/notes.txt"), runner=on_disk),
        Case("rltrain-collect --steps 2,000,000 (.h5) onto a 4 MB disk",
             full_disk("4m", [*collect_big, "--out", "fs/c.h5"]),
             must_mention=("will not fit", "--steps", "--out"),
             check=all_of(quick(25), nothing_partial()), runner=on_disk),
        Case("rltrain-collect --steps 2,000,000 (.npz) onto a 4 MB disk",
             full_disk("4m", [*collect_big, "--out", "fs/c.npz"]),
             must_mention=("will not fit", "--steps", "--out"),
             check=all_of(quick(25), nothing_partial()), runner=on_disk),
        Case("SIGINT before training", ["rltrain", SMOKE, "hydra.run.dir=run"], "interrupt",
             check=all_of(absent("run/.summary.json.tmp", "run/.epochs.jsonl.tmp"),
                          before_training), exit_code=130, runner=interrupt_before_training),
        Case("rltrain-report on one-seed groups", one_seed_groups, "ok",
             check=no_lone_interval),
        Case("rltrain-collect --random --env MinAtar/Breakout-v1",
             ["rltrain-collect", "--random", "--env", "MinAtar/Breakout-v1", "--episodes", "2",
              "--out", "m.h5"], "either", ("rltrain.envs.wrappers:MinAtar/Breakout-v1",)),
        Case("rltrain-collect --random --env ALE/Pong-v5",
             ["rltrain-collect", "--random", "--env", "ALE/Pong-v5", "--episodes", "1",
              "--out", "p.h5"], "either", ("ale_py:ALE/Pong-v5",)),
        Case("rltrain-collect --random --env MiniGrid-Empty-5x5-v0",
             ["rltrain-collect", "--random", "--env", "MiniGrid-Empty-5x5-v0", "--episodes", "2",
              "--out", "g.h5"], "either", ("env=minigrid", "RUN_DIR --random")),
        Case("rltrain env=gym env.id=MinAtar/Breakout-v1",
             ["rltrain", SMOKE, "env=gym", "env.id=MinAtar/Breakout-v1", "hydra.run.dir=run"],
             "either", ("env=minatar",)),
        Case("rltrain env=gym env.id=ALE/Pong-v5",
             ["rltrain", SMOKE, "env=gym", "env.id=ALE/Pong-v5", "hydra.run.dir=run"],
             must_mention=("env=atari env.id=ALE/Pong-v5",)),
        Case("rltrain env=gym env.id=MiniGrid-Empty-5x5-v0",
             ["rltrain", SMOKE, "env=gym", "env.id=MiniGrid-Empty-5x5-v0", "hydra.run.dir=run"],
             must_mention=("env=minigrid env.id=MiniGrid-Empty-5x5-v0",)),
    ]


def issue45_s9_layer_cases() -> list[Case]:
    """§9: layers (checked by the test suite's import contract; no CLI case)."""
    return []


SECTIONS: dict[str, Callable[[], list[Case]]] = {
    "Controls": control_cases,
    "Config and keys": config_cases,
    "Output locations": output_cases,
    "Config dir": config_dir_cases,
    "Resume": resume_cases,
    "Eval/export": eval_export_cases,
    "Signals and streams": signal_cases,
    "Concurrency": concurrency_cases,
    "Sweeps": sweep_cases,
    "Offline": offline_cases,
    "Issue 20 §1 trust": issue20_trust_cases,
    "Issue 20 §1 datasets": issue20_dataset_cases,
    "Issue 20 §2 files": issue20_file_cases,
    "Issue 20 §3 sweeps": issue20_sweep_cases,
    "Issue 20 §4 faults": issue20_fault_cases,
    "Issue 20 §5 README": issue20_readme_cases,
    "Issue 20 §6 console": issue20_console_cases,
    "Issue 45 §1 identity": issue45_s1_identity_cases,
    "Issue 45 §2 dicts": issue45_s2_dict_cases,
    "Issue 45 §3 sizes": issue45_s3_size_cases,
    "Issue 45 §4 domains": issue45_s4_domain_cases,
    "Issue 45 §5 sweeps": issue45_s5_sweep_cases,
    "Issue 45 §6 Atari": issue45_s6_atari_cases,
    "Issue 45 §7 console": issue45_s7_console_cases,
    "Issue 45 §8 files": issue45_s8_file_cases,
    "Issue 45 §9 layers": issue45_s9_layer_cases,
}


def all_cases() -> list[Case]:
    cases = []
    for section, make in SECTIONS.items():
        for case in make():
            case.section = section
            cases.append(case)
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f"case names must be unique: {duplicates}"
    return cases


# --------------------------------------------------------------------------- judging
def mentioned(mention: Mention, text: str) -> bool:
    options = (mention,) if isinstance(mention, str) else mention
    return any(option.lower() in text.lower() for option in options)


def judge_error(case: Case, result: Result, traceback: bool) -> Verdict:
    if result.returncode == 0:
        return Verdict("EXIT 0")
    if traceback:
        return Verdict("TRACEBACK")
    lines = result.stderr.strip().splitlines()
    if not lines and case.must_mention:
        return Verdict("UNCLEAR", "nothing on stderr")
    if case.strict:
        if result.returncode != 2:
            return Verdict("UNCLEAR", f"exit {exit_text(result)}, not 2")
        said = [line for line in lines if ": warning: " not in line]
        if len(said) != 1:
            return Verdict("UNCLEAR", f"{len(said)} lines on stderr besides warnings, not one")
    if len(lines) > MAX_STDERR_LINES:
        return Verdict("UNCLEAR", f"{len(lines)} lines on stderr")
    missing = [m if isinstance(m, str) else " or ".join(m) for m in case.must_mention
               if not mentioned(m, result.stderr)]
    if missing:
        return Verdict("UNCLEAR", "does not mention " + ", ".join(repr(m) for m in missing))
    return Verdict("clear")


def judge(case: Case, tmp: Path, result: Result, timeout: float) -> Verdict:
    if result.timed_out:
        return Verdict("TIMEOUT", f"still running after {timeout:g} s")
    if case.check is not None:
        try:
            problem = case.check(tmp, result)
        except Exception as e:  # a check that cannot read what it needs is itself a finding
            problem = f"check failed: {type(e).__name__}: {e}"
        if problem:
            return Verdict("WRONG", problem)
    traceback = "Traceback" in result.stdout + result.stderr + result.other_output
    code = result.returncode
    if case.expect == "error" or (case.expect == "either" and (code != 0 or traceback)):
        return judge_error(case, result, traceback)
    if traceback:
        return Verdict("TRACEBACK")
    if case.expect == "interrupt":
        if code != case.exit_code:
            return Verdict("FAILED", f"exit {code}, expected {case.exit_code}")
        if "resume" not in result.stderr.lower():
            return Verdict("UNCLEAR", "stderr does not mention 'resume'")
        return Verdict("ok")
    if code != 0:
        return Verdict("FAILED", f"exit {code}")
    if result.extra.get("closed_while_running") is False:
        return Verdict("ok", "the pipe closed only after the run ended (nothing tested)")
    return Verdict("ok")


def run_case(number: int, case: Case, workdir: Path, timeout: float) -> Row:
    tmp = workdir / f"{number:02d}"
    tmp.mkdir(parents=True)
    try:
        argv = case.argv(tmp) if callable(case.argv) else list(case.argv)
    except Exception as e:
        return Row(number, case, None, Verdict("SETUP", f"{type(e).__name__}: {e}"), tmp)
    if case.runner is not None:
        result = case.runner(tmp, argv, timeout)
    else:
        result = run_process(tmp, argv, timeout, case.send)
    verdict = judge(case, tmp, result, timeout)
    # the whole output, for a look with --keep (written after judging: checks never see it)
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr),
                       ("other_output", result.other_output)):
        if text:
            (tmp / f"_{name}.txt").write_text(text, encoding="utf-8")
    return Row(number, case, result, verdict, tmp)


# --------------------------------------------------------------------------- report
def first_line(result: Result, tmp: Path | None = None) -> str:
    """The first non-blank line of stderr (of stdout if stderr is empty), with the case's
    temporary directory written as a relative path, so that reports compare across runs."""
    text = result.stderr if result.stderr.strip() else result.stdout
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if tmp is not None:
        line = line.replace(f"{tmp}/", "").replace(str(tmp), ".")
    return line if len(line) <= FIRST_LINE_CHARS else line[: FIRST_LINE_CHARS - 1] + "…"


def exit_text(result: Result) -> str:
    if result.timed_out:
        return "timeout"
    if result.display_exit is not None:
        return result.display_exit
    code = result.returncode
    if code < 0:
        return f"{code} ({signal.Signals(-code).name})"
    return str(code)


def shown(command: str, tmp: Path | None) -> str:
    """A command as the table shows it: the case's directory as a relative path, and each word
    over 80 characters clipped (a 100,000-character value, a 300-character name)."""
    if tmp is not None:
        command = command.replace(f"{tmp}/", "").replace(str(tmp), ".")
    return re.sub(r"\S{81,}", lambda m: f"{m.group(0)[:40]}…({len(m.group(0)):,} characters)",
                  command)


def cell(text: str, code: bool = False) -> str:
    text = text.replace("\n", " ").replace("|", "\\|")
    if code and text:
        return "`" + text.replace("`", "'") + "`"
    return text


def table(rows: Sequence[Row]) -> str:
    out = ["| # | case | command | exit | first line of stderr (or stdout) | traceback? | "
           "verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        r = row.result
        if r is None:
            command, code, line, traceback = "", "", "", ""
        else:
            command = shown(r.display_command or shlex.join(r.argv), row.tmp)
            code, line = exit_text(r), first_line(r, row.tmp)
            traceback = "yes" if "Traceback" in r.stdout + r.stderr + r.other_output else "no"
        out.append(f"| {row.number} | {cell(row.case.name)} | {cell(command, True)} | {code} | "
                   f"{cell(line, True)} | {traceback} | {cell(str(row.verdict))} |")
    return "\n".join(out)


def summary(rows: Sequence[Row]) -> str:
    tracebacks = sum(1 for row in rows if row.result is not None and "Traceback" in (
        row.result.stdout + row.result.stderr + row.result.other_output))
    counts = Counter(row.verdict.kind for row in rows)
    per_kind = ", ".join(f"{kind}: {counts[kind]}" for kind in KINDS if counts[kind]) or "none"
    code_ran = sum(1 for row in rows if row.verdict.kind == "WRONG"
                   and row.verdict.detail.startswith(CODE_RAN))
    return (f"Cases: {len(rows)}. Output containing \"Traceback\": {tracebacks}. "
            f"Hangs (TIMEOUT): {counts['TIMEOUT']}. Code run from a file without consent "
            f"(WRONG: {CODE_RAN}): {code_ran}.\n\nVerdicts: {per_kind}.")


# --------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--only", metavar="SUBSTRING",
                   help="run the cases whose name (or section) contains it")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="cases in parallel (2)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds per case before it is killed (120)")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="also write the report here")
    p.add_argument("--keep", action="store_true",
                   help="keep the case directories, each with its _stdout.txt and _stderr.txt "
                   "(their path is printed)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    cases = list(enumerate(all_cases(), 1))
    if args.only:
        wanted = args.only.lower()
        cases = [(n, c) for n, c in cases
                 if wanted in c.name.lower() or wanted in c.section.lower()]
    if args.list:
        for number, case in cases:
            print(f"{number:3d}  [{case.section}] {case.name}  (expect {case.expect})")
        return
    missing = [name for name in PROGRAMS if not (BIN / name).exists()]
    if missing:
        sys.exit(f"hostile_inputs: {', '.join(missing)} not found in {BIN}; run this script "
                 "with the interpreter of the virtualenv rltrain is installed in")

    root = Path(tempfile.mkdtemp(prefix="hostile_inputs_"))
    FIXTURES.root = root
    started = time.monotonic()
    rows: list[Row] = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(run_case, n, c, root / "cases", args.timeout): (n, c)
                       for n, c in cases}
            for done, future in enumerate(as_completed(futures), 1):
                number, case = futures[future]
                row = future.result()
                rows.append(row)
                seconds = f"{row.result.seconds:.1f} s" if row.result else "-"
                print(f"[{done}/{len(cases)}] #{number} {case.name}: {row.verdict} ({seconds})",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"hostile_inputs: case directories kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    rows.sort(key=lambda row: row.number)
    report = (f"{table(rows)}\n\n{summary(rows)}\n\n"
              f"({len(rows)} cases in {time.monotonic() - started:.0f} s, --jobs {args.jobs})\n")
    if args.markdown:
        args.markdown.write_text(report, encoding="utf-8")
    try:
        print(report, flush=True)
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
