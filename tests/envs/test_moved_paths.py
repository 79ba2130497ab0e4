"""Names that files keep from before rltrain's modules moved into packages (issue 46): a run's
config names ``rltrain.wrappers.MaskVelocity`` (and ``env.imports: [rltrain.wrappers]``), and
its checkpoints' env state the type of each wrapper (``rltrain.actions.ScaleActions``). Such a
run still resumes exactly and evaluates, the old paths read as the new ones
(:mod:`rltrain.common.moved`), and needs no consent (it is rltrain's own code)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from conftest import command, learning_records, read_jsonl, resume_in_process, run_in_process
from rltrain.commands import evaluate
from rltrain.common.moved import MOVED, current_name
from rltrain.config.schemas import EnvConfig
from rltrain.envs.vector import import_env_modules, resolve_wrappers
from rltrain.envs.wrappers import ClipRewardSign, MaskVelocity
from rltrain.rundir.trust import env_surface

#: what the rltrain before the move wrote, by what it writes now
FORMER = {new: old for old, new in MOVED.items()}


def test_a_former_path_names_the_module_now() -> None:
    assert current_name("rltrain.wrappers") == "rltrain.envs.wrappers"
    assert current_name("rltrain.wrappers.MaskVelocity") == "rltrain.envs.wrappers.MaskVelocity"
    assert current_name("rltrain.actions.ScaleActions") == "rltrain.spaces.actions.ScaleActions"
    assert current_name("rltrain.masking.InfoActionMask") == \
        "rltrain.spaces.masking.InfoActionMask"
    for name in ("rltrain.wrappersX", "rltrain.envs.wrappers.MaskVelocity", "mypkg.wrappers.W",
                 "gymnasium.wrappers.FlattenObservation", "FlattenObservation"):
        assert current_name(name) == name
    for new in MOVED.values():
        importlib.import_module(new)


def test_a_former_wrapper_path_builds_the_same_wrapper_and_needs_no_consent() -> None:
    env = {"id": "CartPole-v1", "imports": ["rltrain.wrappers"],
           "wrappers": ["rltrain.wrappers.MaskVelocity",
                        {"name": "rltrain.wrappers.ClipRewardSign", "train_only": True}]}
    assert env_surface(env) == []
    import_env_modules(EnvConfig(name="cartpole", id="CartPole-v1", imports=env["imports"]))
    assert "rltrain.wrappers" not in sys.modules  # read as the module now, not one of its own
    # a module of the same name elsewhere is not rltrain's
    assert env_surface({"wrappers": ["mypkg.wrappers.MaskVelocity"]}) != []
    specs = resolve_wrappers(env["wrappers"])
    assert [(s.factory, s.label, s.train_only) for s in specs] == [
        (MaskVelocity, "rltrain.wrappers.MaskVelocity", False),
        (ClipRewardSign, "rltrain.wrappers.ClipRewardSign", True)]


def _former(value: Any) -> Any:
    """``value`` (a checkpoint's contents) with each name in today's paths in its former one."""
    if isinstance(value, str):
        for new, old in FORMER.items():
            if value == new or value.startswith(new + "."):
                return old + value[len(new):]
        return value
    if isinstance(value, dict):
        return {_former(k): _former(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_former(v) for v in value)
    return value


def _as_made_before_the_move(run_dir: Path) -> None:
    """Write the former module paths into a run's config and checkpoints, as rltrain wrote
    them before its modules moved."""
    config = run_dir / ".hydra" / "config.yaml"
    text = config.read_text()
    for new, old in FORMER.items():
        text = text.replace(new + ".", old + ".").replace(new + "]", old + "]")
    assert "rltrain.wrappers.MaskVelocity" in text
    config.write_text(text)
    for path in (run_dir / "checkpoints").glob("*.pt"):
        state = torch.load(path, map_location="cpu", weights_only=True)
        former = _former(state)
        assert "rltrain.actions.ScaleActions" in repr(former["collectors"])  # the env state
        path.unlink()  # last.pt is a hard link to the newest numbered file
        torch.save(former, path)


def test_a_run_made_before_the_move_resumes_exactly_and_evaluates(tmp_path: Path) -> None:
    """SAC on Pendulum without velocities: rltrain's MaskVelocity in the config and in the env
    state, and the action scaling wrapper of every continuous run in the env state. The run
    stops at its first test (its stop score), its files are written with the former paths, and
    it resumes to the end: its records equal an unbroken run's."""
    # (a gradient step every 4 env steps: the paths and the resume are what is checked)
    run = ("algo=sac", "env=pendulum_novel", "experiment=smoke", "trainer.epoch_num_steps=256",
           "trainer.random_warmup_env_steps=100", "env.num_test_envs=1",
           "trainer.test_step_num_episodes=1", "trainer.collection_step_num_env_steps=4",
           "trainer.update_step_num_gradient_steps_per_sample=0.25")
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert run_in_process(whole, *run).status == "completed"
    run_in_process(stopped, *run, "trainer.stop_score=-100000")
    assert [r["epoch"] for r in read_jsonl(stopped / "epochs.jsonl")] == [1]
    _as_made_before_the_move(stopped)
    assert resume_in_process(stopped, "trainer.stop_score=null") == (0, [])
    assert learning_records(stopped) == learning_records(whole)
    res = command(evaluate.main, stopped, "--episodes", "1")
    assert res.returncode == 0, res.stderr
