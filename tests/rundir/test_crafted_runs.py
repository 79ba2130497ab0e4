"""Run directories from elsewhere, crafted to hurt: every reader of a stored config refuses
them by name, in one line, and rltrain-report skips them and reports the other runs.

One real run is made (in this process); each crafted run is a copy of it with one file altered
the way someone would alter it by hand. A YAML alias bomb, or anything nested deep, is read
only by a command in a process of its own with a memory limit (RLIMIT_AS) and a timeout, so
that a regression fails the test instead of eating the machine's memory; the rest is read by
the commands' own functions in this process.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from conftest import BIN, cli_env, command, compose_run, run_in_process
from rltrain.commands import evaluate, report
from rltrain.commands.report.runs import DamagedRun, load_run
from rltrain.rundir import stored_data

TOOL = "rltrain-report"
#: address space for a reader of a bomb: a refused bomb needs under 1 GiB here (torch
#: imported), an expanded one would take all the memory there is
MEMORY = 2 * 2**30
#: ten lists of ten aliases to the one before: 10**9 values when expanded
BOMB = "".join([f"l0: &l0 [{', '.join(['lol'] * 10)}]\n"] + [
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)])
BOMB_LIST = "".join([f"- &l0 [{', '.join(['lol'] * 10)}]\n"] + [
    f"- &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of two smoke epochs."""
    root = tmp_path_factory.mktemp("crafted")
    run_in_process(root / "real", "experiment=smoke", "logger.tensorboard=false")
    return root / "real"


def craft(real: Path, dest: Path, config: Callable[[str], str] | None = None,
          epochs: Callable[[list[dict[str, Any]]], list[str]] | None = None,
          summary: str | None = None, overrides: str | None = None, seed: int = 0) -> Path:
    """A copy of the real run; ``config`` rewrites the text of .hydra/config.yaml,
    ``epochs`` turns its epoch records into the lines of epochs.jsonl, ``summary`` and
    ``overrides`` replace those files."""
    shutil.copytree(real, dest, ignore=shutil.ignore_patterns(".rltrain.lock"))
    path = dest / ".hydra" / "config.yaml"
    text = path.read_text().replace("\nseed: 0\n", f"\nseed: {seed}\n")
    path.write_text(config(text) if config else text)
    if epochs is not None:
        records = [json.loads(line) for line in (real / "epochs.jsonl").read_text().splitlines()]
        (dest / "epochs.jsonl").write_text("".join(f"{line}\n" for line in epochs(records)))
    if summary is not None:
        (dest / "summary.json").write_text(summary)
    if overrides is not None:
        (dest / ".hydra" / "overrides.yaml").write_text(overrides)
    return dest


def bounded(args: list[str | Path], cwd: Path, timeout: float = 180
            ) -> subprocess.CompletedProcess:
    """``args`` in a subprocess limited to MEMORY of address space and ``timeout`` seconds."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    try:
        return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=cli_env(), preexec_fn=limit)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{args[0]} still ran after {timeout} s (expanding a bomb?)") from e


def one_line(res: subprocess.CompletedProcess, prog: str, *needles: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def with_epoch(change: dict[str, Any], line: int = 0) -> Callable[[list[dict]], list[str]]:
    """epochs.jsonl with record ``line`` changed (a value of KeyError drops the field)."""
    def rewrite(records: list[dict]) -> list[str]:
        for key, value in change.items():
            if value is KeyError:
                records[line].pop(key)
            else:
                records[line][key] = value
        return [json.dumps(r) for r in records]
    return rewrite


# ------------------------------------------------------------------ the bounded YAML reader
def test_omegaconf_save_writes_no_alias(tmp_path: Path) -> None:
    """What the reader relies on: a config rltrain stores, even one whose parts are the same
    Python objects, is written without anchors or aliases, and read back as OmegaConf reads
    it."""
    shared = [64, 64]
    data: Any = OmegaConf.to_container(compose_run("experiment=smoke"))
    data["env"]["kwargs"] = {"a": shared, "b": shared, "c": {"x": shared}}
    path = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.create(data), path)
    text = path.read_text()
    assert "&" not in text and "*" not in text, text
    assert stored_data.read_yaml(path) == OmegaConf.to_container(OmegaConf.load(path))
    # a float, as OmegaConf
    assert stored_data.read_yaml(path)["env"]["normalize"]["epsilon"] == 1e-08


@pytest.mark.parametrize(("text", "problem"), [
    ("&a [*a]\n", "nested more than 64 levels deep, or refers to itself"),
    ("a: &a {x: 1}\nb:\n  <<: *a\n", "the YAML merge key '<<' at line 3"),
    ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64 levels deep at line 1"),
    ("".join("  " * i + "-\n" for i in range(100)), "nested more than 64 levels deep at line 65"),
    ("".join(f"k{i}: {i}\n" for i in range(20_000)), "it holds more than 10,000 values"),
    ("seed: " + "9" * 5000 + "\n", "an integer of 5,000 digits at line 1"),
    ("seed: !!set {1: null}\n", "seed is a set ({1}); rltrain writes plain data only"),
    ("env:\n  wrappers: [{1: a, b: c}]\n", "env.wrappers[0] has the key 1 (an int)"),
    ("x: !!binary aGk=\n", "x is a bytes (b'hi')"),
    ("x: !!timestamp 2001-12-14\n", "x is a date"),
    ("x: !!python/object/apply:os.system [ls]\n", "could not determine a constructor"),
    ("a: 1\na: 2\n", "found duplicate key a, line 2"),
    ("a: [1\n", "expected ',' or ']', but got '<stream end>', line 2"),
])
def test_what_the_reader_refuses(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(stored_data.StoredDataError) as e:
        stored_data.read_yaml(path)
    assert str(e.value).startswith(f"{path} is damaged (") and problem in e.value.problem


def test_the_reader_reads_what_is_plain(tmp_path: Path) -> None:
    """Plain data within the bounds is read as OmegaConf reads it: a date stays a string,
    an alias that repeats a little is expanded, an empty file is None."""
    path = tmp_path / "ok.yaml"
    path.write_text("a: &x [1, 2]\nb: *x\nday: 2001-12-14\nlr: 1e-3\n")
    assert stored_data.read_yaml(path) == {"a": [1, 2], "b": [1, 2], "day": "2001-12-14",
                                           "lr": 1e-3}
    path.write_text("")
    assert stored_data.read_yaml(path) is None


def test_what_cannot_be_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("x: " + "a" * stored_data.MAX_BYTES + "\n")
    with pytest.raises(stored_data.StoredDataError, match="cannot be read: larger than 1 MiB"):
        stored_data.read_yaml(big)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(stored_data.StoredDataError, match="cannot be read: 'utf-8' codec"):
        stored_data.read_yaml(binary)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO at a config's name: refused at once (an open for reading would wait forever for
    a writer)."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    found: list[BaseException] = []

    def read() -> None:
        try:
            stored_data.read_yaml(fifo)
        except stored_data.StoredDataError as e:
            found.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # unblock the thread: a writer opens the FIFO
        with open(fifo, "w"):
            pass
        raise AssertionError("reading a FIFO blocked")
    assert found and "cannot be read: not a regular file" in str(found[0])


def test_shared_references_are_counted_as_they_expand() -> None:
    """A checkpoint's config (unpickled: a pickle's memo shares objects as aliases do) is
    checked by what it expands to, in time bounded by the bound itself."""
    part: Any = ["lol"] * 10
    for _ in range(9):
        part = [part] * 10
    with pytest.raises(stored_data.StoredDataError, match="expands to more than 10,000 values"):
        stored_data.check_plain({"env": {"kwargs": {"k": part}}}, "the config in last.pt")
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(stored_data.StoredDataError, match="refers to itself"):
        stored_data.check_plain(loop, "x")
    stored_data.check_plain({"a": [1, 2.0, None, True, "s", {"b": []}]}, "x")


# ------------------------------------------------------------------ every reader, a bomb
@pytest.mark.parametrize("tool", ["rltrain-report", "rltrain-eval", "rltrain-export",
                                  "rltrain-collect"])
def test_an_alias_bomb_in_a_run_config_is_refused_by_every_reader(
        real: Path, tmp_path: Path, tool: str) -> None:
    """Before: each grew memory without bound (a timeout at 4 GB here). Now: one line naming
    the file, exit 2, memory bounded by the subprocess's limit."""
    run = craft(real, tmp_path / "bomb", config=lambda t: BOMB + t)
    extra = {"rltrain-report": ["--out", tmp_path / "out"],
             "rltrain-collect": ["--out", tmp_path / "d.npz", "--episodes", "1"],
             "rltrain-export": ["--out", tmp_path / "p.onnx"]}.get(tool, [])
    res = bounded([BIN / tool, run, *extra], cwd=tmp_path)
    config = f"{run}/.hydra/config.yaml"
    if tool == TOOL:  # the report skips it with a warning; with nothing else, exit 2
        assert res.stderr.startswith(f"{TOOL}: warning: skipping {run}: .hydra/config.yaml is "
                                     "damaged (it expands to more than 10,000 values"), res.stderr
        res.stderr = res.stderr.split("\n", 1)[1]
        one_line(res, TOOL, "no usable runs")
    else:
        one_line(res, tool, f"{config} is damaged (it expands to more than 10,000 values",
                 "a 'billion laughs'?")


def test_a_bomb_in_a_checkpoints_config_is_refused_by_resume(real: Path, tmp_path: Path) -> None:
    """rltrain resume= reads the config stored in the checkpoint: a pickle shares objects as
    YAML aliases do, and OmegaConf.create expanded them (a timeout at 8 GB before)."""
    import torch

    run = craft(real, tmp_path / "run")
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    part: Any = ["lol"] * 10
    for _ in range(8):
        part = [part] * 10
    state["config"]["env"]["kwargs"] = {"k": part}
    torch.save(state, last)
    res = bounded([BIN / "rltrain", f"resume={run}", "trainer.max_epochs=3"], cwd=tmp_path)
    one_line(res, "rltrain", f"resume={run}: the config in {last} is damaged (it expands to "
             "more than 10,000 values")


def test_a_sweep_into_a_job_directory_with_a_bomb_refuses_the_job(real: Path,
                                                                  tmp_path: Path) -> None:
    """A sweep run again into its directory compares each job's stored overrides.yaml with
    its own: a bomb there was Python's AttributeError through Hydra's error lines; now the
    job is refused as holding a different run, nothing overwritten."""
    sweep = tmp_path / "sweep"
    job = craft(real, sweep / "job0", overrides=BOMB_LIST)  # one job: named by its number
    before = (job / "epochs.jsonl").read_bytes()
    res = bounded([BIN / "rltrain", "-q", "--multirun", "experiment=smoke", "seed=0",
                   f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert f"rltrain: error: job 0: {job} already holds a different run" in res.stderr
    assert "Traceback" not in res.stderr and "AttributeError" not in res.stderr
    assert (job / "epochs.jsonl").read_bytes() == before


def test_an_alias_bomb_in_overrides_is_warned_of_and_the_run_reported(
        real: Path, tmp_path: Path) -> None:
    run = craft(real, tmp_path / "bomb", overrides=BOMB_LIST)
    res = bounded([BIN / TOOL, run, "--out", tmp_path / "out", "--reps", "50"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (f"{TOOL}: warning: {run}/.hydra/overrides.yaml is damaged (it expands to more "
            "than 10,000 values") in res.stderr
    assert "1 run in 1 group on 1 task" in res.stdout


# ------------------------------------------------------------------ hostile shapes, by name
HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "seed-set": ({"config": lambda t: t.replace("\nseed: 0\n", "\nseed: !!set {1: null}\n")},
                 ".hydra/config.yaml is damaged (seed is a set ({1})"),
    "wrapper-keys": ({"config": lambda t: t.replace("wrappers: []", "wrappers: [{1: a, b: c}]")},
                     ".hydra/config.yaml is damaged (env.wrappers[0] has the key 1 (an int)"),
    "config-list": ({"config": lambda t: "- 1\n- 2\n"},
                    ".hydra/config.yaml is not an rltrain config (no env group)"),
    "huge-int": ({"config": lambda t: t.replace("\nseed: 0\n", "\nseed: " + "9" * 5000 + "\n")},
                 ".hydra/config.yaml is damaged (an integer of 5,000 digits at line"),
    "deep-yaml": ({"config": lambda t: t.replace("wrappers: []", "wrappers: " + "[" * 5000
                                                 + "]" * 5000)},
                  ".hydra/config.yaml is damaged (nested more than 64 levels deep at line"),
    "seed-string": ({"config": lambda t: t.replace("\nseed: 0\n", "\nseed: zero\n")},
                    '.hydra/config.yaml: seed is "zero", not a whole number >= 0'),
    "env-id-list": ({"config": lambda t: t.replace("id: CartPole-v1", "id: [a, b]")},
                    '.hydra/config.yaml: env.id is ["a", "b"], not a name'),
    "stop-score-text": ({"config": lambda t: t.replace("stop_score: null", "stop_score: soon")},
                        '.hydra/config.yaml: trainer.stop_score is "soon", not a number, auto '
                        "or null"),
    "env-step-nan": ({"epochs": with_epoch({"env_step": float("nan")})},
                     "epochs.jsonl line 1: env_step is NaN, not a count of steps"),
    "env-step-inf": ({"epochs": with_epoch({"env_step": float("inf")})},
                     "epochs.jsonl line 1: env_step is Infinity, not a count of steps"),
    "env-step-string": ({"epochs": with_epoch({"env_step": "512"})},
                        'epochs.jsonl line 1: env_step is "512", not a count of steps'),
    "env-step-negative": ({"epochs": with_epoch({"env_step": -512})},
                          "epochs.jsonl line 1: env_step is -512, not a count of steps"),
    "env-step-missing": ({"epochs": with_epoch({"env_step": KeyError})},
                         "epochs.jsonl line 1 has no env_step"),
    "env-step-huge": ({"epochs": with_epoch({"env_step": 10**400})},
                      "epochs.jsonl line 1: env_step is 1000"),
    "env-step-backwards": ({"epochs": with_epoch({"env_step": 4096})},
                           "epochs.jsonl line 2: env_step 1024 does not follow 4096 (line 1)"),
    "return-huge": ({"epochs": with_epoch({"test": {"return_mean": 10**400}}, line=1)},
                    "epochs.jsonl line 2: test.return_mean is 1000"),
    "return-string": ({"epochs": with_epoch({"test": {"return_mean": "high"}}, line=1)},
                      'epochs.jsonl line 2: test.return_mean is "high", not a number'),
    "test-list": ({"epochs": with_epoch({"test": [1]}, line=1)},
                  "epochs.jsonl line 2: test is [1], not an object"),
    "epochs-deep": ({"epochs": lambda rs: [json.dumps(rs[0]), "[" * 100_000 + "]" * 100_000]},
                    "epochs.jsonl line 2 is not an epoch record"),
    "stopped-early-text": ({"summary": json.dumps({"status": "completed",
                                                   "stopped_early": "false"})},
                           'summary.json: stopped_early is "false", not true or false'),
    "threshold-nan": ({"summary": json.dumps({"reward_threshold": float("nan")})},
                      "summary.json: reward_threshold is NaN, not a finite number or null"),
    "env-step-summary": ({"summary": json.dumps({"env_step": -1})},
                         "summary.json: env_step is -1, not a whole number >= 0"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_run_is_damaged_naming_the_field(real: Path, tmp_path: Path,
                                                   name: str) -> None:
    change, message = HOSTILE[name]
    run = craft(real, tmp_path / name, **change)
    with pytest.raises(DamagedRun) as e:
        load_run(run, warn=lambda m: None)
    assert str(e.value).startswith(message), str(e.value)


def test_the_report_skips_hostile_runs_and_reports_the_others(real: Path,
                                                              tmp_path: Path) -> None:
    """Every hostile run at once, with two good ones: a warning per hostile run naming it and
    the field, the good ones reported, exit 0. Survivable oddities (a summary that is not an
    object, or nested too deep) are warned of and the run kept, its status unknown."""
    root = tmp_path / "runs"
    for name, (change, _) in HOSTILE.items():
        craft(real, root / name, **change)
    craft(real, root / "good", seed=1)
    craft(real, root / "summary-list", seed=2, summary="[1, 2]")
    craft(real, root / "summary-deep", seed=3, summary="[" * 100_000 + "]" * 100_000)
    res = bounded([BIN / TOOL, root, real, "--out", tmp_path / "out", "--reps", "50"],
                  cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    warnings = res.stderr.strip().splitlines()
    for name, (_, message) in HOSTILE.items():
        assert f"{TOOL}: warning: skipping {root / name}: {message}" in res.stderr, name
    assert (f"{TOOL}: warning: {root / 'summary-list'}/summary.json is not a JSON object "
            "([1, 2]); its status is taken as unknown") in warnings
    assert (f"{TOOL}: warning: {root / 'summary-deep'}/summary.json cannot be read (nested "
            "too deeply); its status is taken as unknown") in warnings
    assert len(warnings) == len(HOSTILE) + 2, res.stderr
    assert f"4 runs in 1 group on 1 task ({len(HOSTILE)} skipped)" in res.stdout
    rows = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    assert sorted(Path(r["run_dir"]).name for r in rows) == [
        "good", "real", "summary-deep", "summary-list"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"skipped, cannot be read: `{root / 'seed-set'}`: .hydra/config.yaml is damaged" in md


def test_nothing_reportable_is_an_error(real: Path, tmp_path: Path) -> None:
    """Only hostile runs: each skipped with its warning, then one error, exit 2, no report."""
    root = tmp_path / "runs"
    for name in ("seed-set", "env-step-nan"):
        craft(real, root / name, **HOSTILE[name][0])
    res = command(report.main, root)
    lines = res.stderr.strip().splitlines()
    assert [line.split(":")[1] for line in lines[:2]] == [" warning"] * 2, res.stderr
    res.stderr = "\n".join(lines[2:])
    one_line(res, TOOL, "no usable runs: of 2 run directories, 2 cannot be read and 0 failed")
    assert not (root / "report").exists()


def test_a_hostile_config_through_rltrain_eval(real: Path, tmp_path: Path) -> None:
    """The readers that rebuild a run (eval, export, collect: load_run_settings) name the
    file and field in one line (a set was a traceback, exit 1)."""
    run = craft(real, tmp_path / "set", **HOSTILE["seed-set"][0])
    res = command(evaluate.main, run, "--episodes", "1")
    one_line(res, "rltrain-eval", f"{run}/.hydra/config.yaml is damaged (seed is a set ({{1}})",
             "the run cannot be rebuilt from it")
