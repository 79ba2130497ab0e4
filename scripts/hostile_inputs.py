"""Hostile inputs: run the real rltrain CLI on inputs a user can get wrong, and judge the answers.

The project's rule: every way a user can get the input wrong ends in a short error naming what
was wrong and what would be right, with nothing lost and no traceback; exit 0 means the result
is right. Each case below runs ``rltrain``, ``rltrain-eval`` or ``rltrain-export`` in a
subprocess (no mocks), in its own fresh temporary working directory, and declares what it
expects:

  error      refused: non-zero exit, no "Traceback", at most 12 lines on stderr, and every
             ``must_mention`` string in stderr (case-insensitive; a tuple means any one of them).
             Verdict "clear" if so, else "UNCLEAR: why", "TRACEBACK" or "EXIT 0" (the worst: an
             input that must be refused gave a silent, wrong answer).
  ok         exit 0 and no traceback: verdict "ok", else "TRACEBACK" or "FAILED: exit N".
  either     a clear error or ok (the case records which).
  interrupt  exit with the given code (130 SIGINT, 143 SIGTERM) and stderr mentions "resume".

A case may have a ``check(tmpdir, result)`` that returns a description of what went wrong
(records missing, an existing run damaged, weights overwritten); it becomes "WRONG: ..." and
takes precedence over every other verdict but TIMEOUT (the run got past ``--timeout``). Runs
that train use ``experiment=smoke`` (2 epochs of 512 env steps) unless the case needs more. A
finished smoke run that several cases need is trained once per invocation and copied
(``cp -a``) into each case's directory.

The report is a Markdown table on stdout, then the number of cases whose output holds
"Traceback" and the count per verdict; progress goes to stderr. ``--keep`` keeps each case's
directory, with the case's whole output in ``_stdout.txt`` and ``_stderr.txt``. The script
always exits 0 (it is a report) unless it crashes itself.

Usage (from the repository root; the rltrain executables are found next to the interpreter):

    .venv/bin/python scripts/hostile_inputs.py [--jobs 2] [--timeout 120]
        [--only SUBSTRING] [--list] [--markdown PATH] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

BIN = Path(sys.executable).parent
PROGRAMS = ("rltrain", "rltrain-eval", "rltrain-export", "rltrain-collect", "rltrain-report")
SMOKE = "experiment=smoke"
MAX_STDERR_LINES = 12
FIRST_LINE_CHARS = 110
SNAPSHOT = "_snapshot.json"
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
    """The program name first in argv -> the executable next to this interpreter."""
    head, *rest = argv
    return [str(BIN / head) if head in PROGRAMS else head, *rest]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)  # would turn every error into a traceback
    env["COLUMNS"] = "200"
    return env


def spawn(tmp: Path, argv: Sequence[str], stdout: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(resolve(argv), cwd=tmp, env=child_env(), stdin=subprocess.DEVNULL,
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
    """A finished smoke run, trained once per invocation (on first use) and copied per case."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self._lock = threading.Lock()
        self._run: Path | None = None
        self._error: str | None = None

    def finished_run(self) -> Path:
        with self._lock:
            if self._run is None and self._error is None:
                self._run, self._error = self._train()
            if self._error is not None:
                raise SetupError(self._error)
            assert self._run is not None
            return self._run

    def _train(self) -> tuple[Path | None, str | None]:
        assert self.root is not None, "Fixtures.root is set in main()"
        home = self.root / "fixtures"
        home.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(resolve(["rltrain", SMOKE, "hydra.run.dir=smoke"]), cwd=home,
                                  env=child_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=600)
        except subprocess.TimeoutExpired:
            return None, "the shared smoke run did not finish within 600 s"
        run = home / "smoke"
        if proc.returncode != 0 or not (run / "summary.json").is_file():
            tail = decode(proc.stderr).strip().splitlines()[-1:] or ["(no stderr)"]
            return None, f"the shared smoke run failed (exit {proc.returncode}): {tail[0]}"
        return run, None


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
            command = r.display_command or shlex.join(r.argv)
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
    return (f"Cases: {len(rows)}. Output containing \"Traceback\": {tracebacks}.\n\n"
            f"Verdicts: {per_kind}.")


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
