"""``hydra/launcher=batched``: seeds of one config as the members of a batch in one process,
PPO's updates stacked over them (rltrain.common.stacking, rltrain.sweeps.batch_scheduler,
rltrain.sweeps.batched, rltrain.algorithms.ppo_stacked). Each seed must be the run it is alone, up
to the order of floating-point sums: in float64 its records agree to 1e-9."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from algo_helpers import learnable, progress, random_rollout
from conftest import (
    SIGTERM,
    job_dir,
    learning_records,
    read_jsonl,
    run_cli,
    signal_when,
)
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.algorithms.ppo_stacked import StackedSteps
from rltrain.common import stacking
from rltrain.envs.vector import space_info
from rltrain.sweeps.batch_scheduler import Member, RNGs, Scheduler, current
from test_sweeps import finish_command, listed_as_on_disk

#: a short PPO sweep on CartPole: 2 epochs of 512 env steps, 2 test episodes each
SMOKE = ["experiment=smoke", "logger.tensorboard=false"]
BATCHED = "hydra/launcher=batched"


# --------------------------------------------------------------------------- the scheduler
@dataclass(eq=False)
class _Twice(stacking.Stackable):
    """A work whose batch doubles each value and notes the batch's size."""

    value: torch.Tensor
    sizes: list[int]

    def batch_key(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @classmethod
    def run_batch(cls, works):
        works[0].sizes.append(len(works))
        return list((torch.stack([w.value for w in works]) * 2).unbind())


@dataclass(eq=False)
class _Broken(stacking.Stackable):
    def batch_key(self) -> int:
        return 0

    @classmethod
    def run_batch(cls, works):
        raise ValueError("the batch broke")


def _draws(seed: int, rounds: int, sizes: list[int] | None = None) -> list[torch.Tensor]:
    """Seed torch, then each round draw 3 numbers and (in a member) hand them over."""
    torch.manual_seed(seed)
    out = []
    for _ in range(rounds):
        x = torch.rand(3)
        out.append(stacking.stack(_Twice(x, sizes if sizes is not None else [])) / 2)
    return out


def test_members_take_turns_meet_as_one_batch_and_draw_their_own_random_numbers():
    sizes: list[int] = []
    ran = [Member(str(s), lambda s=s: _draws(s, 4, sizes), [RNGs()]) for s in range(3)]
    before = torch.get_rng_state()
    Scheduler(ran).run()
    assert torch.equal(torch.get_rng_state(), before)  # the caller's stream is untouched
    assert sizes == [3, 3, 3, 3]
    for s, member in enumerate(ran):
        assert member.error is None and member.done
        alone = _draws(s, 4)  # outside a batch: stack runs the work by itself
        assert all(torch.equal(a, b) for a, b in zip(member.returned, alone, strict=True))


def test_a_members_code_finds_its_member_and_code_outside_a_batch_finds_none():
    """What cli.py and sweep.py ask (``batch_scheduler.current()``) and what an algorithm's
    :func:`rltrain.common.stacking.stack` reaches (``stacking.meeting()``): the member whose thread
    runs the code, and None outside a batch."""
    seen: dict[str, tuple[object, object]] = {}
    ran = [Member(name, lambda name=name: seen.setdefault(name, (current(), stacking.meeting())),
                  []) for name in ("a", "b")]
    Scheduler(ran).run()
    assert [seen[member.name] for member in ran] == [(member, member) for member in ran]
    assert current() is None and stacking.meeting() is None


def _all_draws(seed: int, rounds: int) -> list[tuple[float, float, float]]:
    """Seed the three global RNGs, then each round draw from each (numpy's legacy RNG's
    Gaussian twice, so that its cached second value crosses a turn) and meet."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    out = []
    for _ in range(rounds):
        drawn = (float(torch.rand(1)), float(np.random.standard_normal()), random.random())
        out.append(drawn)
        stacking.stack(_Twice(torch.zeros(1), []))
    return out


def test_members_keep_their_own_numpy_and_python_rngs_and_give_the_callers_back():
    """The RNGs swap lazily (a turn puts the member's state in place and takes it out; the
    caller's comes back once, at the end): each member still draws what it draws alone, and
    the caller's three streams are as they were."""
    np.random.seed(123)
    random.seed(456)
    before = (np.random.get_state()[1].copy(), random.getstate(), torch.get_rng_state())
    ran = [Member(str(s), lambda s=s: _all_draws(s, 5), [RNGs()]) for s in range(3)]
    Scheduler(ran).run()
    assert np.array_equal(np.random.get_state()[1], before[0])
    assert random.getstate() == before[1]
    assert torch.equal(torch.get_rng_state(), before[2])
    for s, member in enumerate(ran):
        assert member.error is None
        assert member.returned == _all_draws(s, 5)


def test_a_member_that_ends_early_leaves_the_batch_smaller():
    sizes: list[int] = []
    ran = [Member(str(n), lambda n=n: _draws(0, n, sizes), [RNGs()]) for n in (1, 3)]
    Scheduler(ran).run()
    assert sizes == [2, 1, 1]
    assert [len(member.returned) for member in ran] == [1, 3]


def test_a_failed_batch_fails_its_members_and_a_failed_member_only_itself():
    def breaks() -> None:
        stacking.stack(_Broken())

    def fails() -> None:
        raise RuntimeError("this member's own bug")

    ran = [Member("a", breaks, []), Member("b", breaks, []),
           Member("c", fails, []), Member("d", lambda: _draws(0, 2), [])]
    Scheduler(ran).run()
    assert [type(member.error) for member in ran] == [ValueError, ValueError, RuntimeError,
                                                     type(None)]
    assert len(ran[3].returned) == 2
    assert stacking.meeting() is None
    assert threading.active_count() < 50  # each member's thread ended


@dataclass(eq=False)
class _Slow(stacking.Stackable):
    def batch_key(self) -> int:
        return 0

    @classmethod
    def run_batch(cls, works):
        time.sleep(0.2)
        return [None] * len(works)


def test_a_members_waits_for_other_members_turns_are_not_its_own_time():
    """Member a meets, then member b spends 0.3 s in its turn before it meets; the batch takes
    0.2 s. Member a waited 0.5 s for its result, 0.3 s of it elsewhere: its update's own time
    is the batch's."""
    waited = {}

    def member(name: str, busy: float) -> None:
        time.sleep(busy)
        start, away = time.perf_counter(), stacking.time_elsewhere()
        stacking.stack(_Slow())
        waited[name] = (time.perf_counter() - start, stacking.time_elsewhere() - away)

    Scheduler([Member("a", lambda: member("a", 0.0), []),
               Member("b", lambda: member("b", 0.3), [])]).run()
    total, elsewhere = waited["a"]
    assert total >= 0.5 and 0.3 <= elsewhere < total - 0.19
    total, elsewhere = waited["b"]
    assert 0.2 <= total and elsewhere < 0.05
    assert stacking.time_elsewhere() == 0.0  # outside a batch


# --------------------------------------------------------------------------- the stacked update
def _ppo(env_id: str, seed: int, **cfg) -> PPO:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)])
    info = space_info(envs, env_id)
    envs.close()
    torch.manual_seed(seed)
    algo = PPO(PPOConfig(**cfg), info, torch.device("cpu"), seed)
    algo.optim.lr = 1e-3 * (1 + seed)  # each seed its own learning rate (annealed ones differ)
    return algo


def _work(algo: PPO, n: int, g: torch.Generator, passes: int = 3) -> StackedSteps:
    obs_dim = algo.info.obs_shape[0]
    act = (torch.randint(0, algo.info.num_actions, (n,), generator=g) if algo.discrete
           else torch.randn(n, *algo.info.action_shape, generator=g))
    tensors = (torch.randn(n, obs_dim, generator=g), act, torch.randn(n, generator=g),
               torch.randn(n, generator=g), torch.randn(n, generator=g),
               -torch.rand(n, generator=g))
    return StackedSteps(algo, tensors, [torch.randperm(n, generator=g) for _ in range(passes)],
                        64)


#: one config per seed: the same settings, or (by hand) each seed's own loss coefficients,
#: value clip and gradient clipping (one with none, one with no entropy bonus), and number
#: of passes
_SAME = [{"normalize_advantage": True, "value_clip": 0.2, "max_grad_norm": 0.5,
          "ent_coef": 0.01}] * 3
_OWN = [{"normalize_advantage": True, "value_clip": 0.2, "max_grad_norm": 0.5,
         "ent_coef": 0.01},
        {"normalize_advantage": True, "value_clip": 0.05, "max_grad_norm": None,
         "ent_coef": 0.0, "vf_coef": 1.0, "clip_ratio": 0.1},
        {"normalize_advantage": True, "value_clip": 1.0, "max_grad_norm": 0.1,
         "ent_coef": 0.05, "vf_coef": 0.25, "clip_ratio": 0.3}]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize(("by_hand", "cfgs"), [(True, _SAME), (False, _SAME), (True, _OWN)],
                         ids=["by-hand", "autograd", "by-hand-own-settings"])
def test_ppos_stacked_minibatch_steps_equal_each_seeds_own_in_float64(env_id, by_hand, cfgs):
    """Three seeds with rollouts of different lengths (so padded minibatches, and a seed
    without a last minibatch), advantage normalisation, value clipping, an entropy bonus and
    gradient clipping: each seed's parameters, Adam state and stats equal its own loop's to
    1e-12, with the stacked gradient written by hand (the default) or taken by autograd; by
    hand, also when each seed has its own settings and number of passes (a sweep over
    them)."""
    torch.set_default_dtype(torch.float64)
    try:
        stacked = [_ppo(env_id, s, **cfg) for s, cfg in enumerate(cfgs)]
        for algo in stacked:
            algo.by_hand = by_hand
        alone = [_ppo(env_id, s, **cfg) for s, cfg in enumerate(cfgs)]
        g = torch.Generator().manual_seed(0)
        passes = (3, 3, 3) if cfgs is _SAME else (3, 1, 2)
        works = [_work(a, n, g, p)
                 for a, n, p in zip(stacked, (250, 256, 130), passes, strict=True)]
        assert len({w.batch_key() for w in works}) == 1
        results = StackedSteps.run_batch(works)
        for work, twin, (sums, steps) in zip(works, alone, results, strict=True):
            twin_sums, twin_steps = twin.minibatch_steps(work.tensors, work.perms, work.size)
            assert steps == twin_steps == len(work.perms) * math.ceil(len(work.tensors[0]) / 64)
            assert work.algo.optim.steps == twin.optim.steps == steps
            assert torch.allclose(sums, twin_sums, rtol=0, atol=1e-12)
            for name in ("flat", "exp_avg", "exp_avg_sq"):
                a, b = getattr(work.algo.optim, name), getattr(twin.optim, name)
                assert torch.allclose(a, b, rtol=0, atol=1e-12), name
            assert not torch.equal(work.algo.optim.flat, stacked[0].optim.flat) or \
                work.algo is stacked[0]
            x = torch.randn(5, work.algo.info.obs_shape[0])
            assert torch.allclose(work.algo.pi(x), twin.pi(x), rtol=0, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)


def test_members_with_and_without_value_clipping_stack_in_separate_batches():
    g = torch.Generator().manual_seed(0)
    clipped, other_clip, plain = (_work(_ppo("CartPole-v1", s, value_clip=c), 64, g)
                                  for s, c in ((0, 0.2), (1, 0.5), (2, None)))
    assert clipped.batch_key() == other_clip.batch_key() != plain.batch_key()
    shape = _work(_ppo("CartPole-v1", 3, value_clip=0.2, hidden_sizes=[32]), 64, g)
    assert shape.batch_key() != clipped.batch_key()


def test_ppo_on_images_or_with_a_shared_encoder_updates_alone():
    assert _ppo("CartPole-v1", 0).batchable
    assert not _ppo("CartPole-v1", 0, share_encoder=True).batchable


class _Desk:
    """A meeting that runs each work alone, as the scheduler would run a batch of one."""

    elsewhere = 0.0

    def __init__(self) -> None:
        self.works = 0

    def meet(self, work):  # noqa: ANN001, ANN201 - a Stackable, its result
        self.works += 1
        return type(work).run_batch([work])[0]


def test_ppo_built_in_a_member_hands_its_steps_to_the_meeting_it_was_built_in():
    """Whether a PPO's steps are handed over is decided where it is built: on a member's
    thread (the scheduler attends it before building the run) it keeps that meeting; built
    anywhere else, or unable to stack, it runs its own steps."""
    assert _ppo("CartPole-v1", 0).meeting is None
    desk = _Desk()
    stacking.attend(desk)
    try:
        member = _ppo("CartPole-v1", 0)
        alone = _ppo("CartPole-v1", 0, share_encoder=True)
    finally:
        stacking.attend(None)
    assert member.meeting is desk and alone.meeting is None
    for ppo in (member, alone):  # the meeting is the one it was built with, wherever it runs
        rollout = learnable(ppo, random_rollout(ppo.info, lanes=2, steps=16))
        report = ppo.update(rollout, batch_size=8, repetitions=2, progress=progress(0))
        assert report.gradient_steps == 8
    assert desk.works == 1


# --------------------------------------------------------------------------- the launcher
def _records_close(a: Path, b: Path, tol: float) -> float:
    """The largest relative difference between the numbers of two runs' records (which must
    otherwise be equal, key for key)."""
    worst = 0.0

    def walk(x, y, where: str) -> None:
        nonlocal worst
        if isinstance(x, dict):
            assert isinstance(y, dict) and x.keys() == y.keys(), where
            for k in x:
                walk(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, float) and isinstance(y, float):
            if math.isnan(x) and math.isnan(y):
                return
            diff = abs(x - y) / max(1.0, abs(y))
            assert diff <= tol, f"{where}: {x} vs {y}"
            worst = max(worst, diff)
        else:
            assert x == y, f"{where}: {x!r} vs {y!r}"

    ra, rb = learning_records(a), learning_records(b)
    assert len(ra) == len(rb)
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        walk(x, y, f"epoch {i + 1}")
    return worst


def _files(job: Path) -> set[str]:
    return {str(p.relative_to(job)) for p in job.rglob("*") if p.is_file()}


def test_a_batched_sweep_equals_its_seeds_run_by_the_basic_launcher_in_float64(cli, tmp_path):
    args = ["--multirun", *SMOKE, "seed=3,7", "precision=float64", "trainer.max_epochs=3"]
    basic, batched = tmp_path / "basic", tmp_path / "batched"
    res = cli(*args, f"hydra.sweep.dir={basic}")
    assert res.returncode == 0, res.stderr
    res = cli(*args, BATCHED, "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={batched}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "rltrain: jobs 0, 1 run as 1 batch(es) of members (in this process)" in res.stdout
    ran = re.search(r"the batch of jobs 0, 1 ran (\d+) updates as (\d+) stacked computations",
                    res.stdout)
    assert ran is not None and int(ran.group(1)) == 2 * int(ran.group(2)) > 0, res.stdout
    assert re.search(r"^\[job 1\] epoch   3/3 ", res.stdout, re.M), res.stdout
    for num in (0, 1):
        a, b = job_dir(batched, num), job_dir(basic, num)
        assert a.name == b.name
        assert _records_close(a, b, tol=1e-9) < 1e-9
        assert _files(a) == _files(b)
        assert read_jsonl(a / "epochs.jsonl")[-1]["gradient_step"] > 0


def test_a_sweep_over_ppos_settings_stacks_and_equals_the_basic_launchers_in_float64(
        cli, tmp_path):
    """Jobs that differ in settings PPO takes per member (learning rate, number of passes)
    are members of one batch, and each equals its job under the basic launcher; jobs
    that differ in the network's shape are not."""
    args = ["--multirun", *SMOKE, "seed=3", "precision=float64", "trainer.max_epochs=2",
            "algo.lr=1e-3,3e-4", "trainer.update_step_num_repetitions=2,4",
            "algo.ent_coef=0.01", "algo.clip_ratio=0.1"]
    basic, batched = tmp_path / "basic", tmp_path / "batched"
    res = cli(*args, f"hydra.sweep.dir={basic}")
    assert res.returncode == 0, res.stderr
    res = cli(*args, BATCHED, "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={batched}")
    assert res.returncode == 0, res.stderr
    assert "rltrain: jobs 0, 1, 2, 3 run as 1 batch(es) of members (in this process)" in \
        res.stdout
    ran = re.search(r"the batch of jobs 0, 1, 2, 3 ran (\d+) updates as (\d+) stacked "
                    r"computations", res.stdout)
    assert ran is not None and int(ran.group(1)) == 4 * int(ran.group(2)) > 0, res.stdout
    for num in range(4):
        assert _records_close(job_dir(batched, num), job_dir(basic, num), tol=1e-9) < 1e-9
    first = read_jsonl(job_dir(batched, 0) / "epochs.jsonl")[-1]
    other = read_jsonl(job_dir(batched, 3) / "epochs.jsonl")[-1]
    assert first["update"]["lr"] != other["update"]["lr"]  # the members' own learning rates
    assert 2 * first["gradient_step"] == other["gradient_step"]  # and their own passes

    res = cli("--multirun", *SMOKE, "seed=0", "algo.hidden_sizes=[32],[16]", BATCHED,
              f"hydra.sweep.dir={tmp_path / 'shapes'}")
    assert res.returncode == 0, res.stderr
    for num, other in ((0, 1), (1, 0)):
        assert (f"rltrain: job {num} runs alone: it differs from job {other} in "
                "algo.hidden_sizes (the members of a batch may differ only in seed, algo.lr, "
                "algo.lr_annealing, algo.gamma, algo.gae_lambda, algo.clip_ratio, "
                "algo.value_clip, algo.ent_coef, algo.vf_coef, algo.max_grad_norm, "
                "algo.init_log_std, trainer.update_step_num_repetitions)") in res.stdout, \
            res.stdout


# 17 s: stacked members equal the basic launcher's in the default sweeps over seeds and settings
@pytest.mark.slow
def test_optuna_trials_asked_together_stack_and_equal_the_basic_launchers(cli, tmp_path):
    """Optuna's trials that the sweeper asks for together (``hydra.sweeper.n_jobs``) and that
    differ only in member settings are members of one batch; each trial's records and score equal
    the same study's under the basic launcher (float64, to 1e-9)."""
    args = ["--multirun", "hydra/sweeper=optuna", *SMOKE, "precision=float64",
            "trainer.max_epochs=2", "algo.lr=tag(log, interval(1e-4, 1e-2))",
            "algo.ent_coef=interval(0, 0.02)", "hydra.sweeper.n_trials=4",
            "hydra.sweeper.n_jobs=2"]
    basic, batched = tmp_path / "basic", tmp_path / "batched"
    res = cli(*args, f"hydra.sweep.dir={basic}")
    assert res.returncode == 0, res.stderr
    res = cli(*args, BATCHED, "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={batched}")
    assert res.returncode == 0, res.stderr
    for jobs in ("0, 1", "2, 3"):
        assert f"rltrain: jobs {jobs} run as 1 batch(es) of members (in this process)" in \
            res.stdout, res.stdout
    for num in range(4):
        a, b = job_dir(batched, num), job_dir(basic, num)
        assert a.name == b.name  # the same parameters asked of the same study
        assert _records_close(a, b, tol=1e-9) < 1e-9
    rows = [list(csv.DictReader((d / "trials.csv").open())) for d in (basic, batched)]
    assert len(rows[0]) == len(rows[1]) == 4
    for x, y in zip(*rows, strict=True):
        assert (x["state"], x["algo.lr"], x["algo.ent_coef"]) == \
            (y["state"], y["algo.lr"], y["algo.ent_coef"])
        assert abs(float(x["value"]) - float(y["value"])) <= 1e-9 * max(1.0, abs(float(x["value"])))


#: runs a sweep under the batched launcher, and before its jobs run compares each job's
#: config with the one Hydra composes for the job's overrides (a job that differs from an
#: earlier one only in seed gets a copy of that job's config, reseeded)
_COMPARE_CONFIGS = """
import sys
from omegaconf import OmegaConf
from rltrain.sweeps import batched
from rltrain.commands import train as cli
def compare(launcher, unit, quiet):
    for job in unit:
        hydras = batched._compose(launcher.hydra_context, launcher.config, job.overrides,
                                  job.num)
        same = (OmegaConf.to_container(job.cfg, resolve=False)
                == OmegaConf.to_container(hydras, resolve=False)
                and OmegaConf.get_type(job.cfg) is OmegaConf.get_type(hydras)
                and job.cfg._get_flag("struct") == hydras._get_flag("struct"))
        print("job", job.num, job.cfg.seed, job.cfg.hydra.job.override_dirname, same)
    return {}
batched._run_unit = compare
sys.argv = ["rltrain", "--multirun", *sys.argv[1:]]
cli.main()
"""


def test_jobs_that_differ_in_seed_get_the_config_hydra_would_compose(tmp_path):
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _COMPARE_CONFIGS, *SMOKE, "seed=0,1,12", "algo.lr=1e-3,2e-3",
         "trainer.max_epochs=2", "hydra.job.chdir=false", BATCHED, "hydra.launcher.n_jobs=1",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    jobs = re.findall(r"^job (\d+) (\d+) (\S+) (True|False)$", res.stdout, re.M)
    assert len(jobs) == 6, res.stdout + res.stderr
    for num, seed, dirname, same in jobs:
        assert same == "True", f"job {num}: its config differs from Hydra's"
        assert dirname.endswith(f"seed={seed}")
    assert sorted(int(seed) for _, seed, _, _ in jobs) == [0, 0, 1, 1, 12, 12]


@pytest.mark.slow  # 10 s; the batches in the main process are checked by default
def test_batches_in_worker_processes_equal_the_basic_launchers_too(cli, tmp_path):
    """``hydra.launcher.n_jobs=2``: four seeds dealt into two batches of two members, each in a
    worker process of its own; every seed's records equal the basic launcher's (float64)."""
    args = ["--multirun", *SMOKE, "seed=0,1,2,3", "precision=float64"]
    basic, workers = tmp_path / "basic", tmp_path / "workers"
    assert cli(*args, f"hydra.sweep.dir={basic}").returncode == 0
    # stdout block-buffered, as in a pipe without PYTHONUNBUFFERED: what the main process
    # wrote before forking is written once, not again by each worker
    res = cli(*args, BATCHED, "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={workers}",
              env={"PYTHONUNBUFFERED": ""})
    assert res.returncode == 0, res.stderr
    # forked from the main process (which has no other Python thread when it launches)
    assert res.stdout.count("rltrain: jobs 0, 2; 1, 3 run as 2 batch(es) of members (in 2 "
                            "worker processes, forked)") == 1, res.stdout
    for jobs in ("0, 2", "1, 3"):
        assert re.search(rf"the batch of jobs {jobs} ran \d+ updates", res.stdout), res.stdout
    for num in range(4):
        _records_close(job_dir(workers, num), job_dir(basic, num), tol=1e-9)


#: the CLI with another Python thread running when the sweep launches
_WITH_A_THREAD = """
import sys, threading
threading.Thread(target=threading.Event().wait, daemon=True).start()
from rltrain.commands import train as cli
sys.argv = ["rltrain", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.slow  # 16 s; a rare set-up (a thread in the main process)
def test_workers_are_loky_s_when_the_main_process_runs_another_thread(tmp_path):
    """A fork copies every lock as it is, held ones too, but runs only the forking thread:
    with another thread alive the workers are loky's, fresh processes, with equal records."""
    import subprocess
    import sys

    args = ["--multirun", *SMOKE, "seed=0,1,2,3", "precision=float64",
            "hydra.launcher.n_jobs=2"]
    forked, fresh = tmp_path / "forked", tmp_path / "fresh"
    res = run_cli(*args, BATCHED, f"hydra.sweep.dir={forked}", cwd=tmp_path)
    assert "(in 2 worker processes, forked)" in res.stdout, res.stdout + res.stderr
    res = subprocess.run([sys.executable, "-c", _WITH_A_THREAD, *args, BATCHED,
                          f"hydra.sweep.dir={fresh}"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "run as 2 batch(es) of members (in 2 worker processes)\n" in res.stdout, res.stdout
    for num in range(4):
        _records_close(job_dir(fresh, num), job_dir(forked, num), tol=1e-9)


def test_a_batched_launcher_without_workers_is_refused(cli, tmp_path):
    res = cli("--multirun", *SMOKE, "seed=0,1", BATCHED, "hydra.launcher.n_jobs=0",
              f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert res.returncode == 2
    assert "hydra.launcher.n_jobs must be >= 1, or -1 for one per CPU; got 0" in res.stderr
    assert "Traceback" not in res.stderr
    assert not list((tmp_path / "sweep").glob("*job*"))


def test_jobs_that_cannot_be_members_run_alone_and_say_why(cli, tmp_path):
    from conftest import SHORT_DQN

    sweep = tmp_path / "sweep"
    res = cli("--multirun", *SHORT_DQN, "seed=0,1", BATCHED, f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    for num in (0, 1):
        assert (f"rltrain: job {num} runs alone: algo=dqn has no "
                "batched update yet (batched: ppo)") in res.stdout
        assert (job_dir(sweep, num) / "final").is_dir()
    res = cli("--multirun", *SMOKE, "seed=5", BATCHED, f"hydra.sweep.dir={tmp_path / 'one'}")
    assert res.returncode == 0, res.stderr
    assert "rltrain: job 0 runs alone: no other job of the sweep runs algo=ppo" in res.stdout


# two worker processes with the slow checks (18 s)
@pytest.mark.parametrize("n_jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_signal_stops_every_member_and_the_same_command_resumes_them_all(cli, tmp_path,
                                                                            n_jobs):
    """SIGTERM in epoch 1: each member finishes its step, checkpoints and stops (exit 143);
    the same command again resumes every job, and the records equal an unbroken batched
    sweep's (float64: to 1e-9). With two workers (forked from the main process), the main
    process passes the signal on to them."""
    seeds = 2 * n_jobs
    args = ["--multirun", *SMOKE, f"seed=range({seeds})", "precision=float64",
            "trainer.max_epochs=6", BATCHED, f"hydra.launcher.n_jobs={n_jobs}"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    assert cli(*args, f"hydra.sweep.dir={full}").returncode == 0
    # the signal once every job has ended its first epoch: the two workers' batches run
    # apart, and one far enough ahead could end its last epoch before a signal sent at a
    # given job's first (it did, once: a flaky test)
    ended_first: set[str] = set()

    def every_job_ended_one_epoch(line: str) -> bool:
        if match := re.match(r"\[job (\d+)\] epoch +1/6", line):
            ended_first.add(match.group(1))
        return len(ended_first) == seeds

    res = signal_when([*args, f"hydra.sweep.dir={broken}"], tmp_path,
                      every_job_ended_one_epoch, SIGTERM)
    assert res.returncode == 143, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    # the process's line, not a member's: no [job N] before it
    assert re.search(r"^rltrain: SIGTERM received; finishing the current step", res.stderr,
                     re.M), res.stderr
    for num in range(seeds):
        summary = (job_dir(broken, num) / "summary.json").read_text()
        assert '"status": "interrupted"' in summary
    res = cli(*args, f"hydra.sweep.dir={broken}")
    assert res.returncode == 0, res.stderr
    for num in range(seeds):
        assert (f"[job {num}] rltrain: resuming the unfinished run in {job_dir(broken, num)}"
                in res.stdout)
        _records_close(job_dir(broken, num), job_dir(full, num), tol=1e-9)


def test_a_second_signal_stops_the_members_without_a_traceback(tmp_path):
    """The second SIGTERM lands on the scheduler's thread, which no member runs in: it stops
    the batches, each member stops at once at its next meet (or its step's end, the first signal's
    stop), and the sweep ends 143 with every job's summary written."""
    sweep = tmp_path / "sweep"
    res = signal_when(["--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=60",
                       "trainer.epoch_num_steps=4096", BATCHED, "hydra.launcher.n_jobs=1",
                       f"hydra.sweep.dir={sweep}"],
                      tmp_path, lambda line: line.startswith("[job 1] epoch   1/60"),
                      SIGTERM, SIGTERM, ack="SIGTERM received")
    assert res.returncode == 143, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    for num in (0, 1):
        summary = (job_dir(sweep, num) / "summary.json").read_text()
        assert '"status": "interrupted"' in summary


def test_members_signalled_twice_are_listed_as_on_disk_and_finished_by_one_command(cli,
                                                                                   tmp_path):
    """Issue 45 §5: two SIGTERMs while the second member is being built. Member 0, waiting at its
    first update, stops at once with no checkpoint written; the list said 'interrupted ...
    resume with' and the printed command then failed it ('no usable checkpoint'), so only a
    third run finished the sweep. Member 1 either honours the first signal as its training
    begins (a checkpoint at step 0: it used to miss it and train on) or, past that already,
    stops at once in its first step. Either way the list says what each directory holds,
    and the printed command finishes every job in one run."""
    sweep = tmp_path / "sweep"
    args = ["--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=2", BATCHED,
            "hydra.launcher.n_jobs=1"]
    res = signal_when([*args, f"hydra.sweep.dir={sweep}"], tmp_path,
                      lambda line: line.startswith("[job 1] env "), SIGTERM, SIGTERM,
                      ack="SIGTERM received")
    assert res.returncode == 143, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "[job 0] rltrain: SIGTERM received again: stopped at once; no checkpoint was " \
           "written" in res.stderr
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    listed = listed_as_on_disk(report, sweep)
    assert listed[0] == "stopped" and listed[1] in ("stopped", "interrupted"), report
    res = run_cli(*finish_command(report), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert (f"[job 0] rltrain: note: replacing what an attempt without a checkpoint left in "
            f"{job_dir(sweep, 0)} (") in res.stderr
    assert "it was stopped at once, before its first checkpoint)" in res.stderr
    if listed[1] == "interrupted":
        assert (f"[job 1] rltrain: resuming the unfinished run in {job_dir(sweep, 1)}"
                in res.stdout)
    for num in (0, 1):
        done = json.loads((job_dir(sweep, num) / "summary.json").read_text())
        assert done["status"] == "completed"
        assert [r["epoch"] for r in read_jsonl(job_dir(sweep, num) / "epochs.jsonl")] == [1, 2]


def test_the_default_is_a_worker_per_cpu():
    import os

    from hydra_plugins.rltrain_batched_launcher.batched_launcher import BatchedLauncherConf
    from rltrain.sweeps.batched import worker_count

    assert BatchedLauncherConf().n_jobs == -1
    assert worker_count(-1) == len(os.sched_getaffinity(0))
    assert worker_count(3) == 3
    for bad in (0, -2):
        with pytest.raises(ValueError, match="or -1 for one per CPU"):
            worker_count(bad)
