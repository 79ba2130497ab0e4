"""Writing without following links (rltrain.files): a link planted where rltrain writes never
has its target written; through the CLI, a run directory with such links is refused by name."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from conftest import run_cli, run_tool
from rltrain.files import (
    LinkError,
    NoFollowFileHandler,
    links_among,
    open_append,
    open_new,
    open_new_bytes,
)


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
    res = run_cli(f"resume={run}", "trainer.max_epochs=3", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert (f"has symbolic links where rltrain writes ({name} -> {victim}); rltrain never "
            "writes through a link") in res.stderr
    assert victim.read_text() == "untouched\n" and "Traceback" not in res.stderr


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
    res = run_tool("rltrain-eval", run, "--episodes", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (run / "eval.json").is_symlink() and victim.read_text() == "untouched\n"
