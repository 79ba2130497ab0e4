"""Shared test helpers: a run, a refusal, a resume and the companion commands in this process
(Hydra's compose API and rltrain's own functions, as the CLI calls them), and the real
`rltrain` commands in fresh processes, started as a user starts them."""


from __future__ import annotations

import compileall
import contextlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from rltrain.algorithms import ALGORITHMS
from rltrain.assembly.checked_config import plain
from rltrain.assembly.lifecycle import RunContext
from rltrain.assembly.registered_schemas import register_configs
from rltrain.assembly.run import run
from rltrain.commands import collect
from rltrain.commands.command_line import prepare
from rltrain.commands.resume import resume
from rltrain.common.stats import InfoStats
from rltrain.config.schemas import ConfigError
from rltrain.process.streams import clip_long_words
from rltrain.rundir import trust
from rltrain.rundir.directory import write_hydra_snapshot

BIN = Path(sys.executable).parent
RLTRAIN = BIN / "rltrain"
TESTS = Path(__file__).resolve().parent
CONF = TESTS.parent / "conf"

# in-process tests use one torch thread, as every rltrain run does by default (torch_threads=1):
# the suite runs one worker per core, and two threads per worker would only contend
torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    """Once per suite (in the controller, before any worker starts): write the bytecode of
    rltrain's modules and of the tests' env packages. Every CLI run of the suite imports
    rltrain afresh; where bytecode writing is off (PYTHONDONTWRITEBYTECODE=1, as on this
    project's machines) each would compile those ~100 modules again, 0.25-0.4 s a run.
    compileall writes the files whatever that setting says; they are git-ignored."""
    if not hasattr(config, "workerinput"):
        for folder in (TESTS.parent / "src", TESTS):
            compileall.compile_dir(folder, quiet=1)


# what rltrain records as set up on this machine (rltrain.rundir.trust) goes to a folder of this
# test process, in-process and in every CLI run it starts, never to the user's home
os.environ["RLTRAIN_STATE_DIR"] = tempfile.mkdtemp(prefix="rltrain-test-state-")


# --------------------------------------------------------------------------- in this process
def compose_run(*overrides: str, hydra: bool = False) -> DictConfig:
    """The run config ``rltrain OVERRIDES`` composes, in-process (Hydra's compose API), the
    command line first checked and prepared as the CLI does
    (:func:`rltrain.commands.command_line.prepare`: ``env.kwargs.KEY=VALUE`` needs no ``+``);
    ``--config-dir DIR`` adds DIR to the search path, as Hydra's main does. ``hydra``: with Hydra's
    own config under ``hydra``."""
    register_configs()
    composed: list[str] = []
    prepared = iter(prepare(list(overrides), CONF))
    for arg in prepared:
        if arg in ("--config-dir", "-cd"):
            composed.append(f"hydra.searchpath=[file://{Path(next(prepared)).absolute()}]")
        elif arg.startswith("-"):
            raise ValueError(f"compose_run takes overrides and --config-dir, not {arg}")
        else:
            composed.append(arg)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=composed, return_hydra_config=hydra)


def run_in_process(run_dir: Path, *overrides: str) -> InfoStats:
    """Train ``rltrain OVERRIDES`` into ``run_dir`` in this process, through the composition
    root the CLI calls (:func:`rltrain.assembly.run.run`); no live progress bar. As the CLI's job
    does, the run, once accepted, gets its ``.hydra/`` snapshot, and the code its env config names
    is recorded as consented to (rltrain.rundir.trust). The console's lines go to stdout (pytest's
    ``capsys``), what the run logs to ``caplog``. The rest of the CLI's part (the run
    directory claimed, rltrain.log, the exit status and its message) runs in the tests that
    start ``rltrain``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    assert not any(run_dir.iterdir()), f"{run_dir} is not empty: the CLI's tests reuse one"
    overrides = (*overrides, "logger.progress_bar=false")
    cfg = compose_run(*overrides, hydra=True)
    with open_dict(cfg):
        hydra_cfg = OmegaConf.create({"hydra": cfg.pop("hydra")})
    command = " ".join(["rltrain", *overrides])
    trust.record(trust.env_surface(plain(cfg.get("env"))), command)
    ctx = RunContext(run_dir, command=command, overrides=list(overrides), on_accept=lambda:
                     write_hydra_snapshot(run_dir, cfg, hydra_cfg, list(overrides)))
    return run(cfg, ctx)


def refusal(run_dir: Path, *overrides: str) -> str:
    """The message ``rltrain OVERRIDES`` refuses its input with, before training (the CLI
    prints ``rltrain: error: `` and this, and exits 2), found in this process: the command
    line checked (:func:`rltrain.commands.command_line.prepare`), composed and built by
    :func:`rltrain.assembly.run.run` into ``run_dir``, which must be left empty."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with pytest.raises(ConfigError) as refused:
        run(compose_run(*overrides, "logger.progress_bar=false"), RunContext(run_dir))
    assert not any(run_dir.iterdir()), f"a refused run wrote {sorted(run_dir.iterdir())}"
    return clip_long_words(str(refused.value))


def resume_in_process(run_dir: Path, *args: str) -> tuple[int, list[str]]:
    """``rltrain resume=RUN_DIR ARGS`` in this process: the command's own function
    (:func:`rltrain.commands.resume.resume`, through the one door into a run). Returns the exit
    status and what it says on stderr (each line after ``rltrain: ``); what the run logs
    goes to ``caplog``."""
    said: list[str] = []
    code = resume([f"resume={run_dir}", *args], say=said.append, started=time.perf_counter(),
                  full_error=False)
    return code, said


def command(main: Callable[[list[str]], None], *args: str | Path,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A companion command (``rltrain-eval``'s :func:`rltrain.commands.evaluate.main`,
    ``-export``'s, ``-collect``'s, ``-report``'s) in this process, in ``cwd`` if given: its exit
    status (0, or what it passed to ``sys.exit``) and what it wrote to stdout and stderr. The signal
    handlers a command installs for its process are put back afterwards."""
    handlers = {sig: signal.getsignal(sig) for sig in (SIGINT, SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    code = 0
    here = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([str(a) for a in args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess([main.__module__, *map(str, args)], code,
                                       out.getvalue(), err.getvalue())


def random_dataset(path: Path, env_id: str = "CartPole-v1", episodes: int = 4) -> Path:
    """A dataset of uniformly random episodes, written in-process by the code behind
    ``rltrain-collect --random --env ENV_ID --episodes N --out PATH``."""
    collect.run(collect.parser().parse_args(
        ["--random", "--env", env_id, "--episodes", str(episodes), "--out", str(path)]))
    return path


@pytest.fixture(scope="module")
def two_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-epoch smoke run (PPO on CartPole, in this process), made once per test
    module that asks for it."""
    run_dir = tmp_path_factory.mktemp("two") / "run"
    run_in_process(run_dir, "experiment=smoke")
    return run_dir


#: a DQN run on CartPole of two epochs of 256 env steps (a second or so)
SHORT_DQN = ["experiment=smoke", "algo=dqn", "logger.tensorboard=false",
             "env.num_train_envs=2", "env.num_test_envs=2", "trainer.epoch_num_steps=256",
             "buffer.size=2000", "trainer.random_warmup_env_steps=100",
             "algo.target_update_interval=16"]


def cheap_smoke(algo: str) -> list[str]:
    """Overrides that shorten a smoke run on the test envs without skipping a part of it: a
    warm-up within the shorter run, a shorter rollout, and QR-DQN's 200 quantiles cut to 32
    (its quantile Huber loss over 200 x 200 pairs costs about 26 ms a gradient step here)."""
    spec = ALGORITHMS[algo]
    # an on-policy algorithm without trainer defaults of its own collects the trainer's 2048
    # env steps a rollout, whatever the epoch's length: one rollout of 256 per epoch instead
    default_rollout = ("onpolicy" in spec.trainers
                       and not (CONF / "trainer" / "defaults" / f"{algo}.yaml").is_file())
    return [*(["trainer.random_warmup_env_steps=256"] if "offpolicy" in spec.trainers else []),
            *(["trainer.collection_step_num_env_steps=256"] if default_rollout else []),
            *(["algo.quantiles=32"] if algo == "qrdqn" else [])]


# --------------------------------------------------------------------------- real rltrain processes
def cli_env(env: dict | None = None) -> dict:
    """The environment of a CLI run: this directory on PYTHONPATH, so that ``fault_envs`` and
    ``state_envs`` import as a user's own env package would; no HYDRA_FULL_ERROR."""
    full_env = dict(os.environ)
    full_env.pop("HYDRA_FULL_ERROR", None)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS), full_env.get("PYTHONPATH", "")) if p)
    full_env.update(env or {})
    return full_env


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    """Run ``rltrain ARGS`` as a user would; no terminal, so no live progress bar."""
    return subprocess.run([str(RLTRAIN), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=cli_env(env))


def run_tool(name: str, *args: str | Path, cwd: Path, timeout: float = 300,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """Run another console script (``rltrain-eval``, ``rltrain-export``) the same way."""
    return subprocess.run([str(BIN / name), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=cli_env(env))


@pytest.fixture
def cli(tmp_path: Path):
    """``cli(*args)`` runs rltrain with ``tmp_path`` as working directory."""

    def call(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=tmp_path, **kwargs)

    return call


def signal_when(args: list[str], cwd: Path, when: Callable[[str], bool],
                *signals: int, gap: float = 0.0, ack: str | None = None,
                program: Path = RLTRAIN, env: dict | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """Start ``rltrain ARGS``; as soon as a line of its stdout satisfies ``when``, send
    ``signals`` (``gap`` seconds apart); return the finished process with all its output.

    :param ack: before each further signal, wait for a stderr line containing this (the
        process saying it took the previous one): signals of one kind that arrive before
        Python runs its handler count once, which a loaded machine makes likely.
    """
    proc = subprocess.Popen([str(program), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(env))
    streams: dict[str, queue.Queue] = {"out": queue.Queue(), "err": queue.Queue()}
    readers = [threading.Thread(target=_pump, args=(pipe, streams[name]), daemon=True)
               for name, pipe in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    out: list[str] = []
    err: list[str] = []
    deadline = time.monotonic() + timeout

    def next_line(name: str, into: list[str]) -> str | None:
        line = streams[name].get(timeout=max(0.0, deadline - time.monotonic()))
        if line is not None:
            into.append(line)
        return line

    try:
        while (line := next_line("out", out)) is not None:
            if when(line):
                for i, sig in enumerate(signals):
                    if i and ack is not None:
                        while (seen := next_line("err", err)) is not None and ack not in seen:
                            pass
                    if i:
                        time.sleep(gap)
                    proc.send_signal(sig)
                break
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (queue.Empty, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    for reader in readers:
        reader.join()
    for name, into in (("out", out), ("err", err)):
        # what is left (the readers are done: nothing blocks; stdout's end may be read already)
        while not streams[name].empty() and (line := streams[name].get()) is not None:
            into.append(line)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out), "".join(err))


def _pump(pipe, lines: queue.Queue) -> None:  # noqa: ANN001 - a text pipe
    """Read a pipe line by line into a queue; None marks its end."""
    for line in pipe:
        lines.put(line)
    lines.put(None)


def interrupt_after_first_epoch(args: list[str], cwd: Path, sig: int,
                                unbroken: Path | None = None) -> subprocess.CompletedProcess:
    """Start a run, send ``sig`` once epoch 1 is logged, wait for the exit. Given
    ``unbroken`` (the same run, finished), the signal lands mid-epoch 2
    (:func:`conftest.mid_epoch_delay`); else 0.2 s after epoch 1's line."""
    delay = 0.2 if unbroken is None else mid_epoch_delay(unbroken)
    proc = subprocess.Popen([str(RLTRAIN), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("epoch   1/"):
            time.sleep(delay)
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)


def mid_epoch_delay(unbroken: Path) -> float:
    """Seconds to wait after epoch 1's console line for a signal to land mid-epoch 2: 40% of
    the unbroken run's own epoch-2 collect and update time, so it scales with the machine (a
    fixed delay missed the epoch on an idle machine, or came before it on a loaded one)."""
    timing = read_jsonl(unbroken / "epochs.jsonl")[1]["timing"]
    return 0.4 * (timing["collect"] + timing["update"])


SIGTERM, SIGINT, SIGKILL = signal.SIGTERM, signal.SIGINT, signal.SIGKILL


# --------------------------------------------------------------------------- files and records
def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def learning_records(run_dir: Path) -> list[dict]:
    """epochs.jsonl without the fields that measure time rather than learning, nor the run's
    id (each run has its own: two runs of one config learn the same, and are still two)."""
    rows = read_jsonl(run_dir / "epochs.jsonl")
    for row in rows:
        row.pop("run", None)
        for key in ("time", "timing"):
            row.pop(key)
        row.pop("steps_per_s")
        for part in ("train", "test"):
            row[part].pop("collect_steps_per_s")
    return rows


def job_dir(sweep: Path, num: int) -> Path:
    """The directory of job ``num`` of a sweep (named ``<overrides that differ>_job<num>``)."""
    from rltrain.config.schemas import job_number

    found = [p for p in sweep.iterdir() if p.is_dir() and job_number(p.name) == num]
    assert len(found) == 1, f"job {num} in {sweep}: {sorted(p.name for p in sweep.iterdir())}"
    return found[0]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    """A real, small file system at ``path`` (tmpfs), for full-disk and read-only faults.
    Needs root and the right to mount (CAP_SYS_ADMIN); skips, saying so, without them."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                          f"rltrain-test-{uuid.uuid4().hex[:8]}", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip("needs a small real file system: mounting a tmpfs requires root and "
                    f"CAP_SYS_ADMIN ({res.stderr.strip() or 'mount failed'})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def wait_for(predicate: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
