"""What a run will hold in memory is known before any of it is allocated (issue 45 §3): the
networks sized on the meta device exactly as they will be built, an update's intermediates,
the buffer; refused by name when they cannot fit, warned of when large; and a signal during
the build is honoured even inside one long C call."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import space_envs
from conftest import RLTRAIN, TESTS, cli_env, compose_run
from rltrain.algorithms import ALGORITHMS, Algorithm
from rltrain.assembly.build import frame_stack
from rltrain.assembly.checked_config import Settings, settings
from rltrain.assembly.footprint import check_footprint, networks_need
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.envs.vector import make_vector_env, max_episode_steps, space_info
from rltrain.nets.encoders.registry import ENCODERS
from rltrain.process.system import available_memory
from rltrain.trainers import TRAINERS, StorageRequest

SPACES = ["env=gym", f"env.id={space_envs.SPACES_ID}"]
CLI_SPACES = ["env=gym", f"env.id=space_envs:{space_envs.SPACES_ID}"]
#: an env of each observation kind the encoders take, for each action kind
ENVS = {"cartpole": ["env=cartpole"], "pendulum": ["env=pendulum"],
        "multidiscrete": [*SPACES, "+env.kwargs.action='multidiscrete:3,5,2'"],
        "image": [*SPACES, "+env.kwargs.obs=[40,40,3]", "+env.kwargs.dtype=uint8"],
        "image, continuous": [*SPACES, "+env.kwargs.obs=[12,12,2]", "+env.kwargs.dtype=uint8",
                              "+env.kwargs.action=box:2"]}
needs_memory = pytest.mark.skipif(available_memory() is None,
                                  reason="the memory available is not known here")


def settings_and_info(*overrides: str) -> tuple[Settings, SpaceInfo]:
    s = settings(compose_run(*overrides))
    envs = make_vector_env(s.env, 1)
    try:
        info = space_info(envs, s.env.id, max_episode_steps(s.env)[0], None)
    finally:
        envs.close()
    return s, info


def request(s: Settings, info: SpaceInfo) -> StorageRequest:
    return StorageRequest(info, s.env.num_train_envs, s.buffer.size, s.dataset, s.trust,
                          frame_stack(s, info))


def real_bytes(algorithm: Algorithm) -> int:
    """What a built algorithm holds: its parameters and buffers, each optimiser's gradient
    and state, counted on the real tensors."""
    seen: dict[int, int] = {}
    for t in [*algorithm.parameters(), *algorithm.buffers()]:
        seen[id(t)] = t.numel() * t.element_size()
    total = sum(seen.values())
    for optim in algorithm.optimizers().values():
        state = [optim.grad, *(optim.state_dict()[name] for name in optim._buffers)]
        total += sum(t.numel() * t.element_size() for t in state)
    return total


@functools.cache
def action_kind(env: str) -> str:
    return settings_and_info("algo=ppo", *ENVS[env])[1].action_kind


def combos(per_algorithm: int = 2) -> list[tuple[str, str]]:
    """Each algorithm on up to ``per_algorithm`` of :data:`ENVS` whose actions it takes
    (vectors first, then images)."""
    out = []
    for name, spec in sorted(ALGORITHMS.items()):
        fits = [env for env in ENVS if action_kind(env) in spec.actions]
        out += [(name, env) for env in fits[:per_algorithm]]
    return out


@pytest.mark.parametrize(("name", "env"), combos())
def test_the_networks_sized_on_the_meta_device_are_the_networks_built(name: str,
                                                                       env: str) -> None:
    spec = ALGORITHMS[name]
    offline = ["dataset=x.h5"] if spec.trainers == ("offline",) else []
    s, info = settings_and_info(f"algo={name}", *ENVS[env], *offline)
    need = networks_need(s, info)
    built = spec.build(s.algo, info, torch.device("cpu"), s.seed)
    assert need.nbytes == real_bytes(built)
    assert f"{sum(p.numel() for p in built.parameters()):,} parameters" in need.detail


def test_sizing_the_networks_imports_nothing_heavy_and_takes_milliseconds() -> None:
    """The meta device runs some ops through Python decompositions that import
    torch._dynamo (seconds of every run's start-up): the build avoids them, for every
    algorithm."""
    code = (
        "import sys, time, torch\n"
        f"sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(TESTS)!r}]\n"
        "import test_footprint as t\n"
        "from rltrain.assembly.footprint import networks_need\n"
        "cases = t.combos(per_algorithm=1)\n"
        "start = time.perf_counter()\n"
        "for name, env in cases:\n"
        "    spec = t.ALGORITHMS[name]\n"
        "    offline = ['dataset=x.h5'] if spec.trainers == ('offline',) else []\n"
        "    s, info = t.settings_and_info(f'algo={name}', *t.ENVS[env], *offline)\n"
        "    networks_need(s, info)\n"
        "print(len(cases), 'torch._dynamo' in sys.modules, 'sympy' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TESTS.parent, env=cli_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    count, dynamo, sympy = res.stdout.split()
    assert int(count) == len(ALGORITHMS) and (dynamo, sympy) == ("False", "False"), res.stdout


@needs_memory
@pytest.mark.parametrize(("overrides", "start", "says"), [
    (["algo=ppo", "+env.kwargs.action=discrete:1000000000"],
     "algo=ppo's networks need more than ", "from the action space Discrete(1000000000)"),
    (["algo=dqn", "+env.kwargs.action=discrete:1000000000"],
     "algo=dqn's networks need more than ", "use an action space with fewer values"),
    (["algo=ppo", "+env.kwargs.action='multidiscrete:2147483647,3'"],
     "algo=ppo's networks need more than ", "MultiDiscrete([2147483647          3])"),
    (["algo=qrdqn", "+env.kwargs.action=discrete:100000", "algo.quantiles=100000"],
     "algo=qrdqn's networks need more than ", "Discrete(100000) x algo.quantiles=100,000"),
    (["algo=ppo", "algo.hidden_sizes=[100000,100000]"], "algo=ppo's networks need ",
     "follows from algo.hidden_sizes=[100000, 100000]), but "),
    (["algo=qrdqn", "algo.quantiles=100000"], "algo=qrdqn's update needs ",
     "(batches of 64 with algo.quantiles=100,000), but"),
    (["algo=ppo", "+env.kwargs.obs=[2000,2000,3]", "+env.kwargs.dtype=uint8"],
     "algo=ppo's networks need ", "follows from the observations (2000, 2000, 3) through "
     "algo.encoder=nature's convolutions), but"),
    (["algo=dqn", "buffer.size=10000000000000"], "buffer.size needs ",
     "for 10,000,000,000,000 transitions of"),
])
def test_what_cannot_fit_is_refused_naming_the_setting(overrides: list[str], start: str,
                                                      says: str) -> None:
    s, info = settings_and_info(*SPACES, *overrides)
    with pytest.raises(ConfigError) as e:
        check_footprint(s, info, request(s, info))
    message = str(e.value)
    assert message.startswith(start) and says in message, message
    assert " is available; " in message


@needs_memory
def test_parts_that_fit_alone_but_not_together_are_refused_with_the_sum() -> None:
    """Networks and a buffer each about 60% of the memory available (sized, never built)."""
    available = available_memory()
    assert available is not None
    base, info = settings_and_info("algo=dqn", "env=cartpole")
    width = 64
    while True:  # hidden layers wide enough for the networks to take 60% of the memory
        s = replace(base, algo=replace(base.algo, hidden_sizes=[width, width]))
        if networks_need(s, info).nbytes > 0.6 * available:
            break
        width = int(width * 1.2) + 1
    per = TRAINERS["offpolicy"].storage_plan(s.trainer, request(s, info)).per_transition(info)
    s = replace(s, buffer=replace(s.buffer, size=int(0.6 * available) // per))
    with pytest.raises(ConfigError, match=r"^the run needs .* of memory \(algo=dqn's networks "
                                          r".*, buffer.size .*\), but .* is available; lower "
                                          r"algo.hidden_sizes$"):
        check_footprint(s, info, request(s, info))


@needs_memory
def test_a_run_taking_more_than_half_the_memory_is_warned_of(caplog) -> None:
    s, info = settings_and_info("algo=dqn", "env=cartpole")
    available = available_memory()
    assert available is not None
    per = TRAINERS["offpolicy"].storage_plan(s.trainer, request(s, info)).per_transition(info)
    s, info = settings_and_info("algo=dqn", "env=cartpole",
                                f"buffer.size={int(0.7 * available) // per}")
    with caplog.at_level(logging.WARNING, logger="rltrain"):
        check_footprint(s, info, request(s, info))
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("this run will hold about ")
    assert "of the " in warning and warning.endswith("lower buffer.size")
    caplog.clear()
    s, info = settings_and_info("algo=dqn", "env=cartpole")
    with caplog.at_level(logging.WARNING, logger="rltrain"):
        check_footprint(s, info, request(s, info))
    assert not caplog.records


@needs_memory
def test_the_refusal_comes_from_the_cli_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    start = time.monotonic()
    res = subprocess.run([str(RLTRAIN), *CLI_SPACES, "experiment=smoke",
                          "env.kwargs.action=discrete:1000000000", "hydra.run.dir=run"],
                         cwd=tmp_path, capture_output=True, text=True, env=cli_env(),
                         timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("rltrain: error: algo=ppo's networks need more than ")
    assert "Traceback" not in res.stderr and not (tmp_path / "run").exists()
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_one_long_c_call_while_building_stops_the_run(tmp_path: Path,
                                                                       signum: int) -> None:
    """The env's constructor spends tens of seconds in one C call, where Python runs no
    signal handler: the build's watcher ends the process within its grace period, with the
    start-up's message, and removes the run directory it had made."""
    marker = tmp_path / "stall"
    proc = subprocess.Popen([str(RLTRAIN), *CLI_SPACES, "experiment=smoke",
                             f"env.kwargs.stall={marker}", "hydra.run.dir=run"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate()[1]
        time.sleep(0.3)  # inside the C call
        sent = time.monotonic()
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    assert not marker.with_name("stall.done").exists(), "the C call ended before the stop"
    assert proc.returncode == 128 + signum, err
    assert waited < 10, waited
    name = signal.Signals(signum).name
    assert err.strip().endswith(f"rltrain: {name} received before training began: stopped; "
                                "nothing was trained, so there is nothing to resume"), err
    assert not (tmp_path / "run").exists()


#: image shapes, each with every convolutional encoder that takes it
CONV_CASES = [(name, shape) for shape in ((84, 84, 4), (4, 84, 84), (10, 10, 6), (37, 41, 3),
                                          (96, 96, 3), (9, 13, 1))
              for name in ("nature", "minatar", "impala")
              if ENCODERS[name].accepts(gym.spaces.Box(0, 255, shape, np.uint8))]


@pytest.mark.parametrize(("encoder", "shape"), CONV_CASES)
def test_a_conv_encoders_features_are_worked_out_as_a_forward_pass_gives_them(
        encoder: str, shape: tuple[int, ...]) -> None:
    """The encoders size their torsos by arithmetic (rltrain.nets.encoders.image.out_shape), no
    longer by a trial pass: the same widths a real pass gives."""
    net = ENCODERS[encoder].build(gym.spaces.Box(0, 255, shape, np.uint8))
    with torch.no_grad():
        out = net(torch.zeros(2, *shape, dtype=torch.uint8))
    assert out.shape == (2, net.out_dim)
