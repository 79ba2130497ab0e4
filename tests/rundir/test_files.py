"""Writing without following links (rltrain.rundir.files): a link planted where rltrain writes never
has its target written; a run directory with such links is refused by name.

Writing whole or not at all (:func:`rltrain.rundir.files.replacing`), on real full disks; and
reading a run's records bounded (:mod:`rltrain.rundir.stored_data`): every reader of
``epochs.jsonl`` and ``summary.json`` holds at most a record's bound in memory, whatever the file
holds."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import command, resume_in_process, run_cli, signal_when, tmpfs
from rltrain.assembly import optuna_trial
from rltrain.commands import evaluate
from rltrain.commands.report.runs import DamagedRun, load_run
from rltrain.loggers.jsonl import RESERVE, JsonlLogger, read_records
from rltrain.rundir import directory, stored_data
from rltrain.rundir.files import (
    LinkError,
    NoFollowFileHandler,
    links_among,
    open_append,
    open_new,
    open_new_bytes,
    replacing,
)
from rltrain.sweeps.optuna.trials import job_error


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim"
    path.write_text("untouched\n")
    return path


def test_a_new_file_replaces_a_link_and_leaves_its_target(tmp_path, victim):
    for opener, data in ((open_new, "new\n"), (open_new_bytes, b"new\n")):
        link = tmp_path / ".summary.json.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(victim)
        with opener(link) as f:
            f.write(data)
        assert not link.is_symlink() and link.read_text() == "new\n"
        assert victim.read_text() == "untouched\n"


def test_appending_to_a_link_is_refused(tmp_path, victim):
    link = tmp_path / "rltrain.log"
    link.symlink_to(victim)
    with pytest.raises(LinkError, match=r"rltrain\.log is a symbolic link \(to .*victim\); "
                                        r"rltrain never writes through a link"):
        open_append(link)
    handler = NoFollowFileHandler(link, delay=True)
    record = logging.LogRecord("rltrain", logging.INFO, __file__, 1, "a line", None, None)
    handler.handleError = lambda record: None  # type: ignore[method-assign]
    handler.emit(record)  # the open fails: logging reports it, the target is not touched
    handler.close()
    assert victim.read_text() == "untouched\n"
    with open_append(tmp_path / "plain.log") as f:  # an ordinary file appends as before
        f.write("x\n")
    with open_append(tmp_path / "plain.log") as f:
        f.write("y\n")
    assert (tmp_path / "plain.log").read_text() == "x\ny\n"


def test_links_among_looks_one_level_into_directories(tmp_path, victim):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").symlink_to(victim)
    (tmp_path / "summary.json").symlink_to(victim)
    (tmp_path / "epochs.jsonl").write_text("")
    found = links_among([tmp_path / n for n in ("checkpoints", "summary.json", "epochs.jsonl",
                                                "absent")])
    assert found == [tmp_path / "checkpoints" / "last.pt", tmp_path / "summary.json"]


@pytest.mark.parametrize("name", [".rltrain.lock", "rltrain.log", "summary.json"])
def test_resume_refuses_a_run_directory_with_a_planted_link(two_epoch_run, tmp_path, victim,
                                                            name):
    run = tmp_path / "run"
    shutil.copytree(two_epoch_run, run, symlinks=True)
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(victim)
    code, said = resume_in_process(run, "trainer.max_epochs=3")
    assert code == 2 and len(said) == 1, said
    assert (f"has symbolic links where rltrain writes ({name} -> {victim}); rltrain never "
            "writes through a link") in said[0]
    assert victim.read_text() == "untouched\n" and "Traceback" not in said[0]


def test_a_new_run_refuses_a_directory_with_a_planted_link(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rltrain.log").symlink_to(victim)
    res = run_cli("experiment=smoke", f"hydra.run.dir={run}", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "rltrain.log -> " in res.stderr and victim.read_text() == "untouched\n"


def test_eval_replaces_a_linked_result_file_not_its_target(two_epoch_run, tmp_path, victim):
    run = tmp_path / "run"
    shutil.copytree(two_epoch_run, run, symlinks=True)
    (run / "eval.json").symlink_to(victim)
    res = command(evaluate.main, run, "--episodes", "1")
    assert res.returncode == 0, res.stderr
    assert not (run / "eval.json").is_symlink() and victim.read_text() == "untouched\n"


# ---- writing whole or not at all


@pytest.mark.parametrize("error", [KeyboardInterrupt(), ValueError("not JSON")],
                         ids=["signal", "error"])
def test_replacing_leaves_the_old_file_and_no_temporary_one(tmp_path, error):
    target = tmp_path / "summary.json"
    target.write_text("old\n")
    with pytest.raises(type(error)), replacing(target) as tmp:
        tmp.write_text("half of a new")
        raise error
    assert os.listdir(tmp_path) == ["summary.json"] and target.read_text() == "old\n"
    with replacing(target) as tmp:
        tmp.write_text("new\n")
    assert os.listdir(tmp_path) == ["summary.json"] and target.read_text() == "new\n"


def test_replacing_on_a_full_disk(tmp_path):
    with tmpfs(tmp_path / "fs", "64k") as fs:
        target = fs / "epochs.jsonl"
        target.write_text("kept\n")
        with pytest.raises(OSError) as e, replacing(target) as tmp, open_new(tmp) as f:
            f.write("x" * 2**20)
        assert e.value.errno == errno.ENOSPC
        assert os.listdir(fs) == ["epochs.jsonl"] and target.read_text() == "kept\n"


# ---- the summary's reserve: held while training, gone however the run ends


def test_the_summary_reserve_is_held_from_the_start_of_training(tmp_path):
    """Held from start_run (a run stopped before training never makes it), given back by
    finish, and gone with its summary when the summary's write fails, by a signal too."""
    reserve = tmp_path / ".summary.json.tmp"
    JsonlLogger(tmp_path)
    assert not reserve.exists()  # a run stopped before training leaves nothing
    logger = JsonlLogger(tmp_path)
    logger.start_run({})
    assert reserve.stat().st_size == RESERVE
    logger.finish({"best_score": 1.0})
    assert json.loads((tmp_path / "summary.json").read_text())["best_score"] == 1.0
    assert not reserve.exists()

    class Interrupted(dict):  # Ctrl-C while the summary is written
        def items(self) -> Any:
            raise KeyboardInterrupt

    (tmp_path / "summary.json").unlink()
    logger = JsonlLogger(tmp_path, extra_summary={"resumes": Interrupted(a=1)})
    logger.start_run({})
    with pytest.raises(KeyboardInterrupt):
        logger.finish({"best_score": 1.0})
    assert sorted(os.listdir(tmp_path)) == ["epochs.jsonl"]


def test_sigint_before_training_leaves_no_summary_reserve(tmp_path):
    """Ctrl-C as the run's header is printed (its loggers made, training not begun, or just
    begun): no .summary.json.tmp is left, whichever phase the signal met."""
    run = tmp_path / "run"
    res = signal_when(["experiment=smoke", f"hydra.run.dir={run}",
                       "logger.progress_bar=false"], tmp_path,
                      lambda line: line.startswith("env "), signal.SIGINT)
    assert res.returncode == 130, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert not list(run.glob(".*.tmp")), sorted(os.listdir(run))
    assert ("before training began" in res.stderr) != (run / "summary.json").is_file()


# ---- reading a run's records, bounded


@pytest.fixture(scope="module")
def huge_run(two_epoch_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-epoch run with a 64 MiB line after its records, one record after that, and a
    64 MiB summary.json."""
    run = tmp_path_factory.mktemp("huge") / "run"
    shutil.copytree(two_epoch_run, run)
    records = (run / "epochs.jsonl").read_text().splitlines()
    third = json.loads(records[-1])
    third.update(epoch=3, env_step=third["env_step"] * 2)
    with (run / "epochs.jsonl").open("a") as f:
        f.write('{"epoch": 3, "pad": "' + "x" * 2**26 + '"}\n')
        f.write(json.dumps(third) + "\n")
    (run / "summary.json").write_text('{"pad": "' + "x" * 2**26 + '"}')
    return run


def _peak_mib(read: Callable[[], Any]) -> tuple[Any, float]:
    tracemalloc.start()
    try:
        result = read()
        return result, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _raises(read: Callable[[], Any], error: type[BaseException]) -> Callable[[], Any]:
    def call() -> Any:
        with pytest.raises(error) as e:
            read()
        return str(e.value)
    return call


def test_every_reader_of_a_run_holds_one_record_at_most(huge_run):
    """Resume, the Optuna trial's scores, the run-directory and sweep checks, the report:
    each reads around the 64 MiB line and summary in a few MiB, and says what it left."""
    warned: dict[str, list[str]] = {"resume": [], "report": []}
    readers = {
        "resume": lambda: [r["epoch"] for r in read_records(huge_run / "epochs.jsonl",
                                                             warned["resume"].append)],
        "trial scores": lambda: [r["epoch"] for r in optuna_trial._records(huge_run)],
        "run summary": lambda: directory.read_summary(huge_run),
        "sweep job error": lambda: job_error(str(huge_run)),
        "report": _raises(lambda: load_run(huge_run, warn=warned["report"].append),
                          DamagedRun),
    }
    expected = {
        "resume": [1, 2, 3], "trial scores": [1, 2], "run summary": {},
        "sweep job error": None,
        "report": "epochs.jsonl line 3 is longer than 1 MiB; an epoch record is about 1 KB",
    }
    for name, read in readers.items():
        found, peak = _peak_mib(read)
        assert found == expected[name], name
        assert peak < 8, f"{name} held {peak:.0f} MiB"
    assert warned == {
        "resume": ["epochs.jsonl line 3 is not a valid record (longer than 1 MiB, where a "
                   "record rltrain writes is about 1 KB): dropped"],
        "report": [f"{huge_run / 'summary.json'} cannot be read (larger than 1 MiB, where "
                   "rltrain writes a few KB); its status is taken as unknown"]}
    with pytest.raises(stored_data.StoredDataError, match="summary.json cannot be read: larger "
                                                     "than 1 MiB"):
        stored_data.read_json(huge_run / "summary.json")


def test_a_resume_rewrites_its_records_a_line_at_a_time(huge_run, tmp_path, caplog):
    """The resume's rewrite of epochs.jsonl (records after its checkpoint dropped) holds one
    record at a time, and names the line it drops."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(huge_run / "epochs.jsonl", run / "epochs.jsonl")
    with caplog.at_level(logging.WARNING, "rltrain"):
        _, peak = _peak_mib(lambda: JsonlLogger(run, keep_epochs=2))
    assert peak < 8, f"the rewrite held {peak:.0f} MiB"
    assert [json.loads(line)["epoch"] for line in (run / "epochs.jsonl").open()] == [1, 2]
    assert "epochs.jsonl line 3 is not a valid record (longer than 1 MiB" in caplog.text
    assert sorted(os.listdir(run)) == ["epochs.jsonl"]


def test_json_lines_says_what_each_line_is(tmp_path):
    path = tmp_path / "epochs.jsonl"
    deep = b"[" * 100_000 + b"]" * 100_000
    path.write_bytes(b'{"epoch": 1}\n\n' + deep + b'\nnope\n{"epoch": 4')
    lines = list(stored_data.json_lines(path))
    assert [(line.number, line.value, line.torn) for line in lines] == [
        (1, {"epoch": 1}, False), (3, None, False), (4, None, False), (5, None, True)]
    assert [line.problem for line in lines][:2] == [None, "nested too deeply"]
    assert lines[2].problem.startswith("not JSON")
    os.mkfifo(tmp_path / "fifo")  # refused at once, not waited on
    with pytest.raises(stored_data.StoredDataError, match="not a regular file"):
        list(stored_data.json_lines(tmp_path / "fifo"))
