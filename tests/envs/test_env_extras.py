"""Envs that need an extra (mujoco, box2d): without it, one line that names rltrain's pip
install, exit 2, nothing written. The packages are installed where the extras are, and not in
CI (which installs ``.[test]`` only), so each test makes the package absent for its subprocess
when it is present: a stand-in first on PYTHONPATH fails to import as a missing package does."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

from conftest import TESTS, run_cli
from rltrain.envs.vector import needed_extra

#: extra -> the module gymnasium imports for it
MODULES = {"mujoco": "mujoco", "box2d": "Box2D"}
CASES = {
    "hopper": (["env=hopper"], "Hopper-v5", "mujoco"),
    "gym-hopper": (["env=gym", "env.id=Hopper-v5"], "Hopper-v5", "mujoco"),
    "lunarlander": (["env=lunarlander_continuous"], "LunarLanderContinuous-v3", "box2d"),
    "bipedalwalker": (["env=bipedalwalker"], "BipedalWalker-v3", "box2d"),
}


def without(module: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI run in which ``import module`` fails as for a package that is
    not installed (as is where it really is not)."""
    if importlib.util.find_spec(module) is None:
        return {}
    stand_in = tmp_path / "absent" / module
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(
        f'raise ModuleNotFoundError("No module named {module!r}", name={module!r})\n')
    path = [str(stand_in.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


@pytest.mark.parametrize("case", list(CASES))
def test_missing_extra_names_the_pip_install(tmp_path: Path, case: str) -> None:
    args, env_id, extra = CASES[case]
    res = run_cli("algo=sac", *args, cwd=tmp_path, env=without(MODULES[extra], tmp_path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        f"rltrain: error: env {env_id} needs the {extra} extra, which is not installed: "
        f'pip install -e ".[{extra}]" (from a checkout) or pip install "rltrain[{extra}]"']
    assert "gymnasium[" not in res.stdout + res.stderr  # gymnasium's advice is not rltrain's
    assert not list(tmp_path.glob("outputs/*/*"))


NEEDS_FOO = """
import gymnasium as gym


def make(**kwargs):
    raise gym.error.DependencyNotInstalled('foo is not installed, run `pip install foo`')


gym.register("NeedsFoo-v0", entry_point=make)
"""


def test_other_missing_packages_keep_gymnasium_text(tmp_path: Path) -> None:
    """An env outside the extras' packages gets the generic line, with gymnasium's words."""
    (tmp_path / "needs_foo.py").write_text(NEEDS_FOO)
    res = run_cli("algo=sac", "env=gym", "env.id=needs_foo:NeedsFoo-v0",
                  "env.max_episode_steps=100", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "rltrain: error: env 'needs_foo:NeedsFoo-v0' needs a package that is not installed: "
        "foo is not installed, run `pip install foo`"]
    assert not list(tmp_path.glob("outputs/*/*"))


def test_extras_follow_the_entry_point_module() -> None:
    assert needed_extra(gym.spec("Hopper-v5")) == "mujoco"
    assert needed_extra(gym.spec("CarRacing-v3")) == "box2d"
    assert needed_extra(gym.spec("CartPole-v1")) is None
    assert needed_extra(gym.spec("Hopper-v3")) is None  # gymnasium-robotics' now


def test_env_configs_name_the_extra_they_need() -> None:
    """Every env config whose env needs an extra says so, with the same pip install."""
    checked = set()
    for path in sorted((TESTS.parent / "conf" / "env").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        env_id = config.get("id")
        if not isinstance(env_id, str) or env_id == "???":
            continue
        for module in config.get("imports") or []:  # they register the ids (ale_py...)
            importlib.import_module(module)
        extra = needed_extra(gym.spec(env_id))
        if extra is not None:
            assert f'pip install -e ".[{extra}]"' in path.read_text(), path.name
            checked.add(extra)
    assert checked == {"mujoco", "box2d", "atari", "minatar", "minigrid"}
