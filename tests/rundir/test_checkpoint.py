"""Checkpoint files (rltrain.rundir.checkpoint): atomic writes and rotation, loading that refuses
what is not a checkpoint this rltrain reads, and the upgrade of version 3 (the replay buffer and the
sampling stream at the top level) to version 4 (both in the trainer's storage), down to an
exact resume from a version-3 checkpoint made by hand."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from conftest import SHORT_DQN, learning_records, random_dataset, resume_in_process, run_in_process
from rltrain.assembly.build import build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import typed_run_config
from rltrain.common.errors import NonFiniteError
from rltrain.rundir.checkpoint import (
    FORMAT,
    READS,
    VERSION,
    CheckpointError,
    atomic_save,
    load_checkpoint,
    load_policy,
    save_checkpoint,
    save_policy,
)


def as_version_3(state: dict[str, Any]) -> dict[str, Any]:
    """A version-4 checkpoint in version 3's layout: the replay buffer at the top level with
    the sampler's stream inside it (``buffer["rng"]``); an offline run's stream as
    ``buffer_rng``; the trainer's state without its storage."""
    old = copy.deepcopy(state)
    storage = old["trainer"].pop("storage")
    buffer = storage.get("buffer") if storage else None
    rng = (storage.get("sampler") or {}).get("rng") if storage else None
    if buffer is not None:
        buffer = {**buffer, "rng": rng}
    old.update(version=3, buffer=buffer, buffer_rng=rng if buffer is None else None)
    return old


def written(state: dict[str, Any], path: Path) -> Path:
    atomic_save(state, path)
    return path


def assert_same_tensors(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("dqn") / "run"
    run_in_process(run_dir, *SHORT_DQN)
    return run_dir


@pytest.fixture(scope="module")
def bc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bc")
    data = random_dataset(where / "cartpole.h5")
    run_dir = where / "run"
    run_in_process(run_dir, "experiment=smoke", "algo=bc", f"dataset={data}",
                   "logger.tensorboard=false", "trainer.max_epochs=1",
                   "trainer.epoch_num_steps=50", "trainer.batch_size=16")
    return run_dir


# --------------------------------------------------------------------------- version 3
def test_an_off_policy_version_3_checkpoint_loads_as_version_4_with_the_same_storage(
        dqn_run, tmp_path):
    new = load_checkpoint(dqn_run / "checkpoints" / "last.pt")
    assert new["version"] == VERSION == 4
    storage = new["trainer"]["storage"]
    assert len(storage["buffer"]["rew"]) > 0 and storage["sampler"]["rng"]
    old = as_version_3(new)
    assert "storage" not in old["trainer"] and old["buffer"]["rng"] == storage["sampler"]["rng"]

    upgraded = load_checkpoint(written(old, tmp_path / "v3.pt"))
    assert upgraded["version"] == 4
    assert "buffer" not in upgraded and "buffer_rng" not in upgraded
    up = upgraded["trainer"]["storage"]
    assert up.keys() == {"buffer", "sampler"} and up["sampler"] == storage["sampler"]
    # the buffer as it was (its old "rng" entry is the buffer's own format to ignore)
    assert_same_tensors({k: v for k, v in up["buffer"].items() if k != "rng"},
                        storage["buffer"])
    assert {k: v for k, v in upgraded["trainer"].items() if k != "storage"} == \
        {k: v for k, v in new["trainer"].items() if k != "storage"}
    assert upgraded.keys() == new.keys()

    # and a trainer built for the run restores the same storage from it, exactly
    s = settings(typed_run_config(OmegaConf.create(new["config"])))
    parts = build_parts(s)
    try:
        trainer = build_trainer(s, parts)
        assert trainer.load_state_dict(upgraded["trainer"]) == []
        restored = trainer.storage_state()
        assert restored is not None and restored["sampler"] == storage["sampler"]
        assert_same_tensors(restored["buffer"], storage["buffer"])
    finally:
        parts.close()


def test_an_off_policy_version_3_checkpoint_without_its_buffer_says_so(dqn_run, tmp_path):
    """trainer.checkpoint_buffer=false left no buffer, and version 3 kept the sampling stream
    inside the buffer: neither comes back, and the trainer says the buffer starts empty."""
    new = load_checkpoint(dqn_run / "checkpoints" / "last.pt")
    old = as_version_3(new)
    old["buffer"] = None
    upgraded = load_checkpoint(written(old, tmp_path / "v3.pt"))
    assert upgraded["trainer"]["storage"] == {"buffer": None, "sampler": None}


def test_an_offline_version_3_checkpoint_keeps_its_sampling_stream(bc_run, tmp_path):
    new = load_checkpoint(bc_run / "checkpoints" / "last.pt")
    storage = new["trainer"]["storage"]
    assert storage.keys() == {"sampler"}
    old = as_version_3(new)
    assert old["buffer"] is None and old["buffer_rng"] == storage["sampler"]["rng"]
    upgraded = load_checkpoint(written(old, tmp_path / "v3.pt"))
    assert upgraded["version"] == 4 and upgraded["trainer"]["storage"] == storage
    assert upgraded["dataset"] == new["dataset"]


def test_an_on_policy_version_3_checkpoint_has_no_storage(two_epoch_run, tmp_path):
    new = load_checkpoint(two_epoch_run / "checkpoints" / "last.pt")
    assert new["config"]["trainer"]["name"] == "onpolicy"
    assert new["trainer"]["storage"] is None
    old = as_version_3(new)
    assert old["buffer"] is None and old["buffer_rng"] is None
    assert load_checkpoint(written(old, tmp_path / "v3.pt"))["trainer"]["storage"] is None


@pytest.mark.parametrize("version", [1, 2, 5, None, "4"])
def test_an_unknown_version_is_refused_naming_the_versions_read(tmp_path, version):
    path = written({"format": FORMAT, "version": version, "trainer": {}}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value) == (f"{path} has checkpoint version {version}, this rltrain reads "
                            "versions 3, 4")
    assert READS == (3, 4)


def test_resume_from_a_version_3_checkpoint_equals_an_unbroken_run(tmp_path, caplog):
    """A DQN run resumed by the resume command from its epoch-1 checkpoint rewritten by hand
    in version 3's layout: exact, and its records are the unbroken run's."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_in_process(full, "experiment=smoke", "algo=dqn", "trainer.max_epochs=3", "seed=1",
                   "logger.tensorboard=false")
    shutil.copytree(full, resumed)
    checkpoints = resumed / "checkpoints"
    (first,) = checkpoints.glob("ckpt_*_00001.pt")
    state = load_checkpoint(first)
    assert state["trainer"]["epoch"] == 1 and state["trainer"]["partial"] is None
    assert len(state["trainer"]["storage"]["buffer"]["rew"]) > 0
    for path in checkpoints.glob("*.pt"):
        path.unlink()
    written(as_version_3(state), checkpoints / "last.pt")

    caplog.set_level(logging.INFO)
    assert resume_in_process(resumed) == (0, [])
    assert any(m.startswith("resumed at epoch 1") and m.endswith("(exact)")
               for m in caplog.messages), caplog.messages
    assert "inexact" not in caplog.text
    assert learning_records(resumed) == learning_records(full)
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["resumes"][-1]["exact"] is True and summary["epochs"] == 3
    # the run's checkpoints are version 4 from then on
    assert load_checkpoint(checkpoints / "last.pt")["version"] == 4


# --------------------------------------------------------------------------- loading
def test_what_is_not_a_checkpoint_is_refused_naming_the_file(tmp_path):
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'none.pt'} does not exist$"):
        load_checkpoint(tmp_path / "none.pt")
    foreign = written({"weights": torch.zeros(3)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="foreign.pt is not an rltrain checkpoint$"):
        load_checkpoint(foreign)
    good = written({"format": FORMAT, "version": VERSION, "trainer": {}}, tmp_path / "cut.pt")
    good.write_bytes(good.read_bytes()[:40])
    with pytest.raises(CheckpointError, match=r"cut.pt is truncated or corrupt \("):
        load_checkpoint(good)


class _Marker:
    """An object that is not plain data: loading it would need to import and run code."""


def test_a_checkpoint_holding_objects_is_refused(tmp_path):
    path = written({"format": FORMAT, "version": VERSION, "x": _Marker()}, tmp_path / "obj.pt")
    with pytest.raises(CheckpointError, match=r"holds objects other than tensors and plain "
                                              r"data \(test_checkpoint._Marker\); refusing to "
                                              r"load it \(it could run code\)$"):
        load_checkpoint(path)


# --------------------------------------------------------------------------- writing
def test_save_checkpoint_links_last_and_keeps_the_newest(tmp_path):
    for epoch in range(1, 5):
        last = save_checkpoint(tmp_path, {"trainer": {"epoch": epoch}},
                               f"ckpt_{epoch:010d}_{epoch:05d}.pt", keep=2)
    assert last == tmp_path / "last.pt"
    numbered = sorted(p.name for p in tmp_path.glob("ckpt_*.pt"))
    assert numbered == ["ckpt_0000000003_00003.pt", "ckpt_0000000004_00004.pt"]
    assert os.path.samefile(last, tmp_path / numbered[-1])  # a link, not a second write
    state = load_checkpoint(last)
    assert (state["format"], state["version"], state["trainer"]) == (FORMAT, 4, {"epoch": 4})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["last.pt", *numbered])


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path):
    path = written({"a": torch.ones(2)}, tmp_path / "state.pt")
    before = path.read_bytes()
    with pytest.raises(Exception):  # noqa: B017 - whatever pickling a function raises
        atomic_save({"a": lambda: None}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pt"]  # no temporary file


def test_a_policy_round_trips_and_non_finite_weights_are_refused(tmp_path):
    weights = {"w": torch.arange(4.0), "steps": torch.tensor(3)}
    path = save_policy(tmp_path / "best", weights, {"algo": "dqn"})
    loaded = load_policy(path)
    assert loaded["meta"] == {"algo": "dqn"}
    assert_same_tensors(loaded["state_dict"], weights)
    with pytest.raises(NonFiniteError, match=r"non-finite weights \(w\)"):
        save_policy(tmp_path / "final", {"w": torch.tensor([1.0, float("nan")])}, {})
    assert not (tmp_path / "final" / "policy.pt").exists()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "final" / "policy.pt")
