"""The one door into a run (rltrain.assembly.orchestrator), in this process: how a run ended, said
the same for every command; a resume's directory locked while it runs; a run opened for its
policy. The commands' own processes (exit codes, streams) are tested in tests/commands."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import compose_run, run_in_process
from rltrain.assembly.lifecycle import RunContext
from rltrain.assembly.orchestrator import newest_checkpoint, open_run, resuming, train
from rltrain.common.errors import UserError
from rltrain.config.schemas import ConfigError
from rltrain.rundir import directory
from rltrain.rundir.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("door") / "run"
    run_in_process(run_dir, "experiment=smoke", "trainer.max_epochs=1")
    return run_dir


def test_a_run_that_trained_ends_with_code_0_and_its_stats(tmp_path):
    cfg = compose_run("experiment=smoke", "trainer.max_epochs=1", "logger.progress_bar=false")
    (tmp_path / "run").mkdir()  # the command claims it first (rltrain.rundir.directory.claim)
    ended = train(cfg, RunContext(tmp_path / "run"))
    assert (ended.code, ended.message, ended.error) == (0, None, None)
    assert ended.info is not None and ended.info.status == "completed"
    assert ended.info.epochs == 1 and (tmp_path / "run" / "summary.json").is_file()


def test_a_refused_run_ends_with_code_2_its_labelled_message_and_no_files(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_run("experiment=smoke", "algo.lr=-1", "logger.progress_bar=false")
    ended = train(cfg, RunContext(run_dir), label="job 3: ")
    assert ended.code == 2 and ended.info is None
    assert isinstance(ended.error, ConfigError)
    assert ended.message is not None and ended.message.startswith("error: job 3: ")
    assert "algo.lr" in ended.message
    assert not any(run_dir.iterdir())


def test_with_full_error_a_refusal_raises_with_its_traceback(tmp_path):
    cfg = compose_run("experiment=smoke", "algo.lr=-1", "logger.progress_bar=false")
    with pytest.raises(ConfigError, match="algo.lr"):
        train(cfg, RunContext(tmp_path), full_error=True)


def test_resuming_holds_the_directory_until_the_block_ends(one_epoch_run):
    with resuming(one_epoch_run, consent=False, allow="--trust") as point:
        assert point.path == one_epoch_run / "checkpoints" / "last.pt"
        assert point.epochs_complete == 1
        with pytest.raises(directory.RunDirError):
            directory.RunDirLock(one_epoch_run).acquire()
    lock = directory.RunDirLock(one_epoch_run)  # released: another command may take it
    lock.acquire()
    lock.release()


def test_resuming_a_run_without_a_usable_checkpoint_is_refused_and_releases_it(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated or corrupt"), \
            resuming(tmp_path, consent=False, allow="--trust"):
        pass
    lock = directory.RunDirLock(tmp_path)
    lock.acquire()
    lock.release()


def test_an_opened_run_acts_in_its_env_action_space(one_epoch_run):
    for weights in ("best", "final", "last"):
        loaded = open_run(one_epoch_run, weights)
        actions = loaded.act(np.zeros((3, 4), dtype=np.float32))
        assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
        assert loaded.weights_path.is_file() and not loaded.recurrent


def test_opening_weights_a_run_does_not_have_names_those_it_has(tmp_path, one_epoch_run):
    copy = tmp_path / "run"
    shutil.copytree(one_epoch_run, copy)
    shutil.rmtree(copy / "best")
    with pytest.raises(UserError, match="this run has --weights final, last"):
        open_run(copy, "best")


def test_the_newest_checkpoint_of_another_run_is_refused(tmp_path, one_epoch_run):
    state, path = newest_checkpoint(one_epoch_run)
    assert path.name == "last.pt" and state["trainer"]["epoch"] == 1
    other = tmp_path / "other"
    run_in_process(other, "experiment=smoke", "trainer.max_epochs=1", "seed=1")
    shutil.copy(one_epoch_run / "checkpoints" / "last.pt", other / "checkpoints" / "last.pt")
    with pytest.raises(UserError, match="use the directory of the run that wrote it"):
        newest_checkpoint(other)
