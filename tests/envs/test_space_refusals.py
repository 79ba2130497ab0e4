"""Spaces rltrain cannot act in are refused when the run is built, by name, before anything is
written (issue 45 §4): a space with no values (an action Box of shape (0,) once trained with
exit 0, and rltrain-eval and -export then crashed on its run). And an encoder's refusal names
a way out that works: an image too small for any convolution is flattened."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import space_envs
from conftest import command, compose_run, run_in_process
from rltrain.assembly.build import build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.commands import evaluate, export
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.nets.encoders import ENCODERS, make_encoder
from rltrain.nets.encoders.registry import choose
from rltrain.spaces.observations import stored_shape

ENV = ["env=gym", f"env.id={space_envs.SPACES_ID}"]
#: the same env for a CLI run, which imports the module that registers it
CLI_ENV = ["env=gym", f"env.id=space_envs:{space_envs.SPACES_ID}"]


def refusal(*overrides: str) -> str:
    s = settings(compose_run(*ENV, "experiment=smoke", *overrides))
    with pytest.raises(ConfigError) as e:
        parts = build_parts(s)
        parts.close()
    return str(e.value)


@pytest.mark.parametrize(("overrides", "part"), [
    (["algo=ppo", "+env.kwargs.action=box:0"], "the action space (Box([], [], (0,), float32))"),
    (["algo=sac", "+env.kwargs.action='box:3,0'"], "the action space"),
    (["algo=ppo", "+env.kwargs.obs=[0]"], "the observation space"),
    (["algo=dqn", "+env.kwargs.obs=[4,0]"], "the observation space"),
])
def test_a_space_with_no_values_is_refused_naming_it(overrides: list[str], part: str) -> None:
    message = refusal(*overrides)
    assert f"{space_envs.SPACES_ID}: {part}" in message
    assert "holds no values" in message and "env.wrappers" in message


def test_the_refusal_comes_from_the_cli_before_any_file(cli, tmp_path: Path) -> None:
    res = cli(*CLI_ENV, "experiment=smoke", "algo=ppo", "env.kwargs.action=box:0",
              "hydra.run.dir=run")
    assert res.returncode == 2, res.stderr
    assert "holds no values" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- encoders
SPACE_CASES = {
    "image 1x1": gym.spaces.Box(0, 255, (1, 1, 3), np.uint8),
    "image 2x2": gym.spaces.Box(0, 255, (2, 2, 3), np.uint8),
    "image 7x7": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
    "image 84x84x4": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
    "vector": gym.spaces.Box(-1.0, 1.0, (5,), np.float32),
    "dict": gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
                             "direction": gym.spaces.Discrete(4)}),
}


def info_of(space: gym.Space) -> SpaceInfo:
    return SpaceInfo(stored_shape(space), 3, (), None, None, None, "test/Env",
                     obs_space=space, action_space=gym.spaces.Discrete(3))


@pytest.mark.parametrize("case", sorted(SPACE_CASES))
@pytest.mark.parametrize("name", ["auto", *sorted(ENCODERS)])
def test_an_encoders_refusal_names_a_way_out_that_works(case: str, name: str) -> None:
    """Every ``algo.encoder=`` a refusal suggests takes the space (a 1x1 image was refused by
    every encoder, each saying "use algo.encoder=auto", which refused it too)."""
    info = info_of(SPACE_CASES[case])
    try:
        choose(info, name)
        return
    except ConfigError as e:
        message = str(e)
    suggested = re.findall(r"algo\.encoder=(\w+) \(it takes|, or ([\w ]+)$", message)
    names = [n for pair in suggested for n in (pair[0], *pair[1].split(" or ")) if n]
    assert names, f"a refusal that names no way out: {message}"
    for way in names:
        choose(info, way)  # raises if the suggestion does not work


@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 2, 3), (2, 9, 1)])
def test_an_image_too_small_to_convolve_is_flattened_scaled_by_its_bounds(
        shape: tuple[int, ...]) -> None:
    space = gym.spaces.Box(0, 200, shape, np.uint8)
    encoder = make_encoder(info_of(space))
    assert choose(info_of(space)).name == "flat" and encoder.out_dim == int(np.prod(shape))
    obs = torch.full((2, *shape), 100, dtype=torch.uint8)
    assert torch.equal(encoder(obs), torch.full((2, int(np.prod(shape))), 0.5))


def test_a_run_on_a_tiny_image_trains_evaluates_and_exports(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_in_process(run, *CLI_ENV, "experiment=smoke", "env.kwargs.obs=[2,2,3]",
                   "env.kwargs.dtype=uint8")
    for main in (evaluate.main, export.main):
        done = command(main, run)
        assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- crashes
def test_a_crash_in_the_envs_step_names_its_kwargs_and_one_elsewhere_does_not(
        tmp_path: Path) -> None:
    """The kwargs an env was made with are the usual suspects of a crash in its own code,
    and said with it; a crash in rltrain's or torch's code (a policy's) must not blame them
    (the one-env Dict bug of issue 45 read "the env was made with env.kwargs=...")."""
    info = run_in_process(tmp_path / "crash", *ENV, "experiment=smoke",
                          "+env.kwargs.crash_at=100", "logger.tensorboard=false")
    assert info.status == "failed"
    assert info.error == ("RuntimeError: the simulator diverged at step 100 (the env was made "
                          "with env.kwargs={'crash_at': 100})")

    s = settings(compose_run(*ENV, "experiment=smoke", "+env.kwargs.crash_at=100"))
    parts = build_parts(s)
    try:
        trainer = build_trainer(s, parts)
        trainer.crash_hint = " (the env was made with env.kwargs={'crash_at': 100})"
        trainer.failure = RuntimeError("self.stride(0) must be divisible by 8")
        assert trainer.info().error == "RuntimeError: self.stride(0) must be divisible by 8"
    finally:
        parts.close()
