"""Spaces rltrain cannot act in are refused when the run is built, by name, before anything is
written (issue 45 §4): a space with no values (an action Box of shape (0,) once trained with
exit 0, and rltrain-eval and -export then crashed on its run)."""

from __future__ import annotations

from pathlib import Path

import pytest

import space_envs
from conftest import compose_run
from rltrain.build import build_parts
from rltrain.config import ConfigError
from rltrain.settings import settings

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
