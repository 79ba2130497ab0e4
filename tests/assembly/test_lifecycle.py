"""The run lifecycle (rltrain.assembly.lifecycle): where a resume starts, what a restore loads and
what it says it could not, the RNG state and the grouping of what was not captured; exact resume,
reproducibility, checkpoint safety; in this process but for the signals, which real `rltrain`
processes take."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from algo_helpers import CPU, DISC, progress, random_batch
from conftest import (
    SHORT_DQN,
    compose_run,
    interrupt_after_first_epoch,
    learning_records,
    random_dataset,
    read_jsonl,
    resume_in_process,
    run_in_process,
)
from rltrain.algorithms import get
from rltrain.algorithms.dqn import DQNConfig
from rltrain.algorithms.ppo import PPOConfig
from rltrain.assembly.build import Parts, build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.assembly.lifecycle import (
    Lifecycle,
    ResumePoint,
    RunContext,
    check_same_dataset,
    completed_epochs,
    grouped,
    restore_algorithm,
    resume_point,
    rng_state,
    set_rng_state,
)
from rltrain.commands.resume import extend
from rltrain.config.schemas import ConfigError
from rltrain.rundir.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rltrain.trainers import Trainer

#: fields that measure time, not learning

# long enough epochs that a signal sent right after epoch 1's line lands mid-epoch 2
RUNS = {
    "ppo": ["algo=ppo", "trainer.max_epochs=3", "trainer.epoch_num_steps=8192"],
    "dqn": ["algo=dqn", "trainer.max_epochs=3", "trainer.epoch_num_steps=2048",
            "buffer.size=20000"],
}
COMMON = ["trainer.stop_score=null", "seed=1", "logger.progress_bar=false",
          "env.num_test_envs=5", "trainer.test_step_num_episodes=5"]


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_sigterm_then_resume_equals_unbroken_run(tmp_path, algo):
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = [*RUNS[algo], *COMMON]
    run_in_process(full, *args)

    res = interrupt_after_first_epoch([*args, f"hydra.run.dir={broken}"], tmp_path,
                                      signal.SIGTERM)
    assert res.returncode == 143, res.stderr
    assert f"rltrain resume={broken}" in res.stderr
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["interrupted"] is True
    ckpt = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert ckpt["trainer"]["env_step"] == summary["env_step"]
    mid_epoch = ckpt["trainer"]["partial"] is not None
    assert len(read_jsonl(broken / "epochs.jsonl")) == ckpt["trainer"]["epoch"] - mid_epoch

    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
    assert json.loads((broken / "summary.json").read_text())["interrupted"] is False
    # TensorBoard continues at the right steps, nothing logged twice
    acc = EventAccumulator(str(broken / "tb"))
    acc.Reload()
    steps = [s.step for s in acc.Scalars("test/return_mean")]
    assert steps == [r["env_step"] for r in read_jsonl(broken / "epochs.jsonl")]


def test_sigint_exits_130_with_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    res = interrupt_after_first_epoch([*RUNS["ppo"], *COMMON, f"hydra.run.dir={run_dir}"],
                                      tmp_path, signal.SIGINT)
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["format"] == "rltrain-checkpoint"
    assert (run_dir / "final" / "policy.pt").is_file()


def test_same_seed_same_numbers_other_seed_other_numbers(tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        run_in_process(tmp_path / name, "experiment=smoke", "algo=dqn", f"seed={seed}")
        runs[name] = learning_records(tmp_path / name)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    system = json.loads((tmp_path / "a" / "summary.json").read_text())["system"]
    assert {"python", "torch", "gymnasium", "rltrain", "command"} <= system.keys()
    assert system["torch"] == torch.__version__


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished 3-epoch smoke run with one checkpoint per epoch."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    run_in_process(run_dir, "experiment=smoke", "trainer.max_epochs=3")
    return run_dir


def copy_run(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return dst


def test_extend_finished_run(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    assert resume_in_process(run_dir, "trainer.max_epochs=4") == (0, [])
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3, 4]
    assert json.loads((run_dir / "summary.json").read_text())["epochs"] == 4


def test_a_run_stopped_at_its_stop_score_goes_on_with_a_higher_one(tmp_path, capsys):
    """A run that stopped early at its stop score, resumed with trainer.stop_score raised (or
    null), trains on to the end and its records equal an unbroken run's with that stop score;
    the same stop score leaves it complete."""
    args = ["experiment=smoke", "trainer.max_epochs=3", "trainer.test_step_num_episodes=2"]
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    run_in_process(stopped, *args, "trainer.stop_score=0")
    assert [r["epoch"] for r in read_jsonl(stopped / "epochs.jsonl")] == [1]
    capsys.readouterr()
    assert resume_in_process(stopped, "trainer.stop_score=0") == (0, [])
    assert "already complete" in capsys.readouterr().out
    assert resume_in_process(stopped, "trainer.stop_score=null") == (0, [])
    run_in_process(whole, *args, "trainer.stop_score=null")
    assert learning_records(stopped) == learning_records(whole)
    assert json.loads((stopped / "summary.json").read_text())["stopped_early"] is False
    code, said = resume_in_process(stopped, "trainer.stop_score=abc")
    assert code == 2 and "trainer.stop_score='abc' is not a number" in said[0]


def test_truncated_last_falls_back_to_older_checkpoint(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    last = run_dir / "checkpoints" / "last.pt"
    data = last.read_bytes()
    # last.pt is a hard link to the newest numbered file; break the link, then truncate
    last.unlink()
    last.write_bytes(data[: len(data) // 2])
    code, said = resume_in_process(run_dir, "trainer.max_epochs=4")
    assert code == 0, said
    assert "last.pt is truncated or corrupt" in said[0]
    assert "resuming from the older checkpoint" in said[1]
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3, 4]


def test_truncated_only_checkpoint_is_a_clear_error(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data[:100])
    code, said = resume_in_process(run_dir)
    assert code == 2 and len(said) == 1
    assert "last.pt is truncated or corrupt" in said[0]
    assert "Traceback" not in said[0]


class _RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_runs_code_is_refused(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    marker = tmp_path / "pwned"
    for path in (run_dir / "checkpoints").glob("*.pt"):
        path.unlink()
        torch.save({"format": "rltrain-checkpoint", "version": 1, "x": _RunsCode(marker)}, path,
                   pickle_protocol=pickle.DEFAULT_PROTOCOL)
    code, said = resume_in_process(run_dir)
    assert code == 2 and "refusing to load" in said[0]
    assert not marker.exists()


def test_foreign_checkpoint_is_refused(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        path.unlink()
        torch.save({"weights": torch.zeros(3)}, path)
    code, said = resume_in_process(run_dir)
    assert code == 2 and "not an rltrain checkpoint" in said[0]


def test_checkpoint_rotation_keeps_newest(tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "experiment=smoke", "trainer.max_epochs=4",
                   "trainer.keep_checkpoints=2")
    numbered = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert len(numbered) == 2 and numbered[-1].endswith("_00004.pt")
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["epoch"] == 4
    assert not list((run_dir / "checkpoints").glob(".*"))  # no temporary files left


# =========================================================================== in-process
# --------------------------------------------------------------------------- resume_point
def truncate(path: Path) -> None:
    """Cut a checkpoint file in half (a hard link is broken first: the other name keeps the
    whole file)."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[: len(data) // 2])


def test_resume_point_is_last_pt_with_its_config_typed(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    point = resume_point(run_dir)
    assert point.path == run_dir / "checkpoints" / "last.pt" and point.problems == []
    assert point.trainer["epoch"] == 3 and point.epochs_complete == 3
    assert OmegaConf.get_type(point.cfg.algo) is PPOConfig
    assert settings(point.cfg).trainer.max_epochs == 3


def test_resume_point_falls_back_to_the_newest_good_checkpoint(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    checkpoints = run_dir / "checkpoints"
    numbered = sorted(checkpoints.glob("ckpt_*.pt"))
    assert [p.name[-8:] for p in numbered] == ["00001.pt", "00002.pt", "00003.pt"]
    truncate(checkpoints / "last.pt")
    truncate(numbered[-1])
    point = resume_point(run_dir)
    assert point.path == numbered[-2] and point.trainer["epoch"] == 2
    assert len(point.problems) == 2
    assert point.problems[0].startswith(f"{checkpoints / 'last.pt'} is truncated or corrupt (")
    assert point.problems[1].startswith(f"{numbered[-1]} is truncated or corrupt (")


def test_resume_point_without_a_usable_checkpoint_names_each_problem(tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        truncate(path)
    with pytest.raises(CheckpointError) as e:
        resume_point(run_dir)
    message = str(e.value)
    assert message.startswith(f"no usable checkpoint in {run_dir / 'checkpoints'}: ")
    assert message.count("is truncated or corrupt") == 4  # last.pt and three numbered


def test_resume_point_refuses_a_config_that_is_not_rltrains(tmp_path, finished_run):
    state = load_checkpoint(finished_run / "checkpoints" / "last.pt")
    state["config"]["algo"]["name"] = "nope"
    save_checkpoint(tmp_path / "checkpoints", state, "ckpt_1.pt", keep=1)
    with pytest.raises(ConfigError, match=r"names no known algorithm \(algo.name='nope'"):
        resume_point(tmp_path)


def test_completed_epochs_leaves_out_an_epoch_in_progress():
    assert completed_epochs({"epoch": 3, "partial": None}) == 3
    assert completed_epochs({"epoch": 3, "partial": {"steps": 1}}) == 2


# --------------------------------------------------------------------------- restore
def test_restore_algorithm_for_evaluation_loads_the_modules_only():
    spec = get("dqn")
    trained = spec.build(DQNConfig(hidden_sizes=[16]), DISC, CPU, 0)
    trained.update(random_batch(DISC), progress=progress(1))
    state = {"algorithm": trained.training_state()}
    assert state["algorithm"]["optimizers"]["optim"]["steps"] == 1

    fresh = spec.build(DQNConfig(hidden_sizes=[16]), DISC, CPU, 1)
    before = fresh.training_state()
    restore_algorithm(fresh, state, training=False)
    for key, value in trained.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    assert fresh.optimizers()["optim"].steps == 0  # the optimiser is untouched
    assert fresh.rng.bit_generator.state == before["rng"] != state["algorithm"]["rng"]

    resumed = spec.build(DQNConfig(hidden_sizes=[16]), DISC, CPU, 1)
    restore_algorithm(resumed, state)  # training: optimisers and exploration too
    assert resumed.optimizers()["optim"].steps == 1
    assert resumed.rng.bit_generator.state == state["algorithm"]["rng"]


def restore(run_dir: Path, point: ResumePoint) -> tuple[list[str], Trainer, Parts,
                                                        dict[str, Any]]:
    """Build the run of ``point`` afresh and restore it, as rltrain.assembly.run.run does; returns
    the notes, the trainer, the parts (closed by the caller) and the run's history."""
    s = settings(point.cfg)
    parts = build_parts(s)
    history: dict[str, Any] = {"resumes": []}
    life = Lifecycle(RunContext(run_dir), s, parts, config={}, summary={}, history=history,
                     identity=point.identity)
    trainer = build_trainer(s, parts, callbacks=life.callbacks())
    life.attach(trainer)
    return life.restore(point), trainer, parts, history


@pytest.mark.parametrize("keep_buffer", [True, False])
def test_restore_says_what_it_could_not_restore(tmp_path, keep_buffer):
    """An off-policy checkpoint with its replay buffer restores exactly (the same buffer, the
    same global RNG state); one written with trainer.checkpoint_buffer=false says the buffer
    starts empty, and the run's history records the resume as inexact."""
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SHORT_DQN, f"trainer.checkpoint_buffer={str(keep_buffer).lower()}")
    point = resume_point(run_dir)
    stored = point.trainer["storage"]
    assert (stored["buffer"] is not None) == keep_buffer
    notes, trainer, parts, history = restore(run_dir, point)
    try:
        if keep_buffer:
            assert notes == []
            for key, value in parts.storage.buffer.state_dict().items():
                assert torch.equal(value, stored["buffer"][key]), key
        else:
            assert notes == ["the checkpoint holds no replay buffer (trainer.checkpoint_buffer="
                             "false): the buffer starts empty"]
            assert len(parts.storage.buffer) == 0
        assert trainer.reader.state_dict() == stored["sampler"]
        assert (trainer.epoch, trainer.env_step) == (2, point.trainer["env_step"])
        assert history["resumes"] == [{"epoch": 2, "env_step": point.trainer["env_step"],
                                       "exact": keep_buffer, "notes": notes}]
        saved = point.state["rng"]["numpy"]["state"]["key"].numpy().astype(np.uint32)
        assert np.array_equal(np.random.get_state(legacy=False)["state"]["key"], saved)
    finally:
        parts.close()


def test_restore_lets_a_run_stopped_at_its_stop_score_go_on_only_when_raised(tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SHORT_DQN, "trainer.max_epochs=3", "trainer.stop_score=0")
    point = resume_point(run_dir)
    assert point.trainer["stopped_early"] and point.trainer["epoch"] == 1
    _, trainer, parts, _ = restore(run_dir, point)
    parts.close()
    assert trainer.stopped_early and trainer.done()

    point = resume_point(run_dir)
    assert extend(point, None, 1e9) is None  # raised past the best score
    _, trainer, parts, _ = restore(run_dir, point)
    parts.close()
    assert not trainer.stopped_early and not trainer.done()
    assert trainer.stop_score == 1e9


def test_a_resume_must_learn_from_the_data_it_began_with(tmp_path):
    data = random_dataset(tmp_path / "data.h5")
    s = settings(compose_run("experiment=smoke", "algo=bc", f"dataset={data}",
                             "env.num_test_envs=1"))
    parts = build_parts(s)
    try:
        facts = parts.storage.dataset
        assert facts is not None
        same = ResumePoint({"dataset": dict(facts)}, compose_run(), Path("last.pt"), [])
        check_same_dataset(same, parts)
        other = ResumePoint({"dataset": {**facts, "sha256": "0" * 64, "path": "/old/data.h5"}},
                            compose_run(), Path("last.pt"), [])
        with pytest.raises(ConfigError) as e:
            check_same_dataset(other, parts)
        assert str(e.value).startswith(
            f"the dataset {data} is not the one this run began with (/old/data.h5, sha256 "
            f"000000000000...; now {facts['path']}, sha256 {facts['sha256'][:12]}...)")
    finally:
        parts.close()


# --------------------------------------------------------------------------- RNG
def draws() -> tuple[Any, ...]:
    return random.random(), np.random.random(3).tolist(), torch.rand(3).tolist()


def test_rng_state_round_trips_through_a_checkpoint_file(tmp_path):
    """Python's, numpy's and torch's global streams come back where they were, also after a
    save and a load that reads tensors and plain data only."""
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draws()
    state = rng_state()
    expected = draws()
    assert draws() != expected
    set_rng_state(state)
    assert draws() == expected
    torch.save(state, tmp_path / "rng.pt")
    draws()
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert draws() == expected


# --------------------------------------------------------------------------- grouped
def test_grouped_names_entries_that_differ_by_sub_env_index_once():
    entries = [f"train envs: envs.envs[{i}].sim (c_double_Array_4)" for i in range(8)]
    assert grouped(entries) == "train envs: envs.envs[0-7].sim (c_double_Array_4)"
    assert grouped(["test envs: envs.envs[3].sim (x)"]) == "test envs: envs.envs[3].sim (x)"
    assert grouped(["a", "b", "a"]) == "a; b"
    assert grouped([f"e{i}" for i in range(5)]) == "e0; e1; e2; and 2 more"
    assert grouped([f"e{i}" for i in range(5)], limit=5) == "e0; e1; e2; e3; e4"
    mixed = ["train envs: envs.envs[0].sim (x)", "train envs: envs.envs[1].sim (x)",
             "train envs: envs.envs[0].rng (y)"]
    assert grouped(mixed) == ("train envs: envs.envs[0-1].sim (x); "
                              "train envs: envs.envs[0].rng (y)")
