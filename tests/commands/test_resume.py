"""``rltrain resume=RUN_DIR`` (rltrain.commands.resume): what a resume accepts (extending the run:
more epochs, another stop score), what it refuses by name, and when a run is already complete;
in-process on the command's own functions, and through a real `rltrain`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import RLTRAIN, cli_env, compose_run, read_jsonl, run_in_process
from rltrain.assembly.lifecycle import ResumePoint
from rltrain.commands.resume import _UNSET, ResumeRefused, extend, parse, resume
from rltrain.rundir.directory import resume_command

OTHER = ("'{arg}' cannot change on resume: a resumed run keeps the config stored in its "
         "checkpoint (only trainer.max_epochs=N and trainer.stop_score=X|null may extend it); "
         "start a new run to change anything else")


# --------------------------------------------------------------------------- parse
def test_parse_reads_the_run_and_the_extension():
    assert parse(["resume=/runs/a"]) == (Path("/runs/a"), None, _UNSET)
    assert parse(["resume=~/a"])[0] == Path.home() / "a"
    run_dir, max_epochs, stop = parse(["-q", "resume=r", "trainer.max_epochs=7",
                                       "trainer.stop_score=3.5", "--quiet"])
    assert (run_dir, max_epochs, stop) == (Path("r"), 7, 3.5)


@pytest.mark.parametrize("null", ["null", "none", "None"])
def test_parse_reads_a_stop_score_of_null(null):
    assert parse(["resume=r", f"trainer.stop_score={null}"])[2] is None


@pytest.mark.parametrize(("arg", "message"), [
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc' is not an integer"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs='2.5' is not an integer"),
    ("trainer.stop_score=abc", "trainer.stop_score='abc' is not a number or null"),
    ("trainer.stop_score=inf", "trainer.stop_score must be a finite number or null, got inf"),
    ("trainer.stop_score=nan", "trainer.stop_score must be a finite number or null, got nan"),
    ("algo.lr=0.1", OTHER.format(arg="algo.lr=0.1")),
    ("+trainer.max_epochs=5", OTHER.format(arg="+trainer.max_epochs=5")),
    ("seed=3", OTHER.format(arg="seed=3")),
])
def test_parse_refuses_by_name(arg, message):
    with pytest.raises(ResumeRefused) as e:
        parse(["resume=r", arg])
    assert str(e.value) == message


# --------------------------------------------------------------------------- extend
def point(*, epoch: int, partial: bool = False, stopped_early: bool = False,
          best: float | None = 20.0, max_epochs: int = 3, stop_score: Any = None
          ) -> ResumePoint:
    """A resume point of a smoke run whose checkpoint is at ``epoch``."""
    cfg = compose_run("experiment=smoke", f"trainer.max_epochs={max_epochs}",
                      f"trainer.stop_score={'null' if stop_score is None else stop_score}")
    trainer = {"epoch": epoch, "partial": {"steps": 10} if partial else None,
               "stopped_early": stopped_early, "best_score": best}
    return ResumePoint({"trainer": trainer}, cfg, Path("last.pt"), [])


def test_a_run_with_every_epoch_done_is_complete():
    p = point(epoch=3)
    assert p.epochs_complete == 3
    assert extend(p, None, _UNSET) == "3 of 3 epochs"
    assert extend(point(epoch=3), 3, _UNSET) == "3 of 3 epochs"
    assert extend(point(epoch=3), None, None) == "3 of 3 epochs"  # no stop score: still done


def test_more_epochs_extend_a_complete_run():
    p = point(epoch=3)
    assert extend(p, 5, _UNSET) is None
    assert p.cfg.trainer.max_epochs == 5


def test_an_interrupted_epoch_is_never_complete():
    p = point(epoch=3, partial=True)
    assert p.epochs_complete == 2
    assert extend(p, None, _UNSET) is None and p.cfg.trainer.max_epochs == 3
    assert extend(point(epoch=3, partial=True, stopped_early=True), None, _UNSET) is None


@pytest.mark.parametrize(("partial", "verb"), [(False, "done"), (True, "started")])
def test_fewer_epochs_than_begun_are_refused(partial, verb):
    with pytest.raises(ResumeRefused) as e:
        extend(point(epoch=2, partial=partial), 1, _UNSET)
    assert str(e.value) == (f"trainer.max_epochs=1 is below the 2 epochs this run has {verb}; "
                            "a resume can only extend a run: pass trainer.max_epochs=3 or more")
    with pytest.raises(ResumeRefused, match="pass trainer.max_epochs=5 or more"):
        extend(point(epoch=5, max_epochs=5), 4, _UNSET)


def test_a_run_stopped_at_its_stop_score_is_complete_unless_the_score_is_raised():
    def stopped() -> ResumePoint:
        return point(epoch=1, stopped_early=True, best=20.0, stop_score=15)

    said = "it stopped early at epoch 1, reaching the stop score"
    assert extend(stopped(), None, _UNSET) == said
    assert extend(stopped(), None, 15.0) == said  # the same stop score
    assert extend(stopped(), None, 10.0) == said  # lowered: still reached
    assert extend(stopped(), None, 20.0) == said  # reached exactly
    raised = stopped()
    assert extend(raised, None, 25.0) is None and raised.cfg.trainer.stop_score == 25.0
    dropped = stopped()
    assert extend(dropped, None, None) is None and dropped.cfg.trainer.stop_score is None
    assert extend(stopped(), 5, _UNSET) is None  # more epochs: it trains on


def test_a_stop_score_with_no_best_yet_lets_the_run_go_on():
    p = point(epoch=1, stopped_early=True, best=None, stop_score=15)
    assert extend(p, None, 30.0) is None


# --------------------------------------------------------------------------- the command
def files_under(path: Path) -> dict[str, bytes]:
    """The run's files and their bytes, the lock file aside (the command takes the lock, and
    releasing it leaves the file, as every command does)."""
    return ({str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.is_file() and p.name != ".rltrain.lock"} if path.is_dir() else {})


def resume_without_training(*args: str) -> tuple[int, list[str]]:
    """The resume command's exit code and lines, for a resume that must not train: the run
    directory it names is left exactly as it was."""
    lines: list[str] = []
    run_dir = Path(next(a for a in args if a.startswith("resume=")).partition("=")[2])
    before = files_under(run_dir)
    code = resume(list(args), say=lines.append, started=0.0, full_error=False)
    assert files_under(run_dir) == before, "a resume that should not train wrote files"
    return code, lines


def test_the_command_refuses_what_is_not_a_run(tmp_path):
    assert resume_without_training(f"resume={tmp_path / 'nope'}") == (
        2, [f"error: resume={tmp_path / 'nope'}: no such run directory"])
    code, said = resume_without_training(f"resume={tmp_path}")
    assert code == 2 and said[0].startswith(f"error: resume={tmp_path}: no checkpoints/ there")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")  # what a full disk once left
    code, said = resume_without_training(f"resume={tmp_path}")
    assert code == 2
    assert said[0].startswith(f"error: resume={tmp_path}: no usable checkpoint in "
                              f"{tmp_path / 'checkpoints'}: {tmp_path / 'checkpoints'}/last.pt "
                              "is truncated or corrupt")
    assert resume_without_training(f"resume={tmp_path}", "algo.lr=1") == (
        2, [f"error: {OTHER.format(arg='algo.lr=1')}"])


def test_the_command_says_a_complete_run_is_complete(two_epoch_run, capsys):
    before = (two_epoch_run / "epochs.jsonl").read_bytes()
    assert resume_without_training(f"resume={two_epoch_run}") == (0, [])
    assert capsys.readouterr().out == (
        f"rltrain: the run in {two_epoch_run} is already complete (2 of 2 epochs); nothing to "
        f"do. Extend it with: rltrain resume={two_epoch_run} trainer.max_epochs=12\n")
    code, said = resume_without_training(f"resume={two_epoch_run}", "trainer.max_epochs=1")
    assert code == 2 and "below the 2 epochs this run has done" in said[0]
    assert (two_epoch_run / "epochs.jsonl").read_bytes() == before


# --------------------------------------------------------------------------- through the CLI
def test_rltrain_resume_refuses_on_stderr_and_says_complete_on_stdout(cli, two_epoch_run):
    """``rltrain resume=`` reaches the command: a refusal is one line on stderr, exit 2; a
    complete run is said on stdout, exit 0, its files untouched."""
    before = (two_epoch_run / "epochs.jsonl").read_bytes()
    res = cli(f"resume={two_epoch_run}", "trainer.max_epochs=1")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("rltrain: error: trainer.max_epochs=1 is below the 2 epochs this run "
                          "has done; a resume can only extend a run: pass trainer.max_epochs=2 "
                          "or more\n")
    res = cli(f"resume={two_epoch_run}")
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout == (
        f"rltrain: the run in {two_epoch_run} is already complete (2 of 2 epochs); nothing to "
        f"do. Extend it with: rltrain resume={two_epoch_run} trainer.max_epochs=12\n")
    assert (two_epoch_run / "epochs.jsonl").read_bytes() == before


# --------------------------------------------------------------------------- the printed command
def test_the_resume_command_is_quoted_for_the_shell():
    assert resume_command(Path("/runs/a")) == "rltrain resume=/runs/a"
    assert resume_command("/r/sp ace/it's", "trainer.max_epochs=12") == (
        "rltrain 'resume=/r/sp ace/it'\"'\"'s' trainer.max_epochs=12")


def test_the_commands_rltrain_prints_work_when_pasted(cli, tmp_path):
    """A run directory with a space and a quote in its name: the hint of a reused directory,
    then the extension hint of a complete run, each pasted into a shell as printed."""
    run_dir = tmp_path / "sp ace" / "it's"
    run_in_process(run_dir, "experiment=smoke", "logger.tensorboard=false")
    res = cli("experiment=smoke", f'hydra.run.dir="{run_dir}"')
    assert res.returncode == 2
    pasted = res.stderr.split("or continue it with: ")[1].strip()
    assert pasted == resume_command(run_dir)

    def paste(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300,
                              env=cli_env({"PATH": f"{RLTRAIN.parent}:{os.environ['PATH']}"}))

    res = paste(pasted)
    assert res.returncode == 0, res.stderr
    extend_with = res.stdout.split("Extend it with: ")[1].strip()
    assert extend_with == resume_command(run_dir, "trainer.max_epochs=12")
    res = paste(extend_with.replace("=12", "=3"))
    assert res.returncode == 0, res.stderr
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3]
