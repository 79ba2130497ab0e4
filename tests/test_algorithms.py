"""The algorithm registry and what each continuous-control algorithm promises: SAC's
temperature, TD3's smoothing and delays, the deployable policy, and the normalisers' life
cycle (frozen while testing, saved, restored, applied alike by eval and the ONNX graph)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import yaml

from conftest import TESTS, learning_records, read_jsonl, run_tool, signal_when
from rltrain.algorithms import ALGORITHMS, CONTINUOUS, DISCRETE, Progress
from rltrain.algorithms.ddpg import DDPG, DDPGConfig
from rltrain.algorithms.sac import SAC, SACConfig
from rltrain.algorithms.td3 import TD3, TD3Config
from rltrain.config import ConfigError, key_problem
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo

CONF = TESTS.parent / "conf"
BOX = SpaceInfo((3,), None, (2,), np.array([-2, -1], np.float32), np.array([2, 3], np.float32),
                None, "test")
CPU = torch.device("cpu")


def batch(n: int = 32, seed: int = 0, obs_dim: int = 3, act_dim: int = 2) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
                 act=rng.uniform(-1, 1, size=(n, act_dim)).astype(np.float32),
                 rew=rng.normal(size=n).astype(np.float32),
                 next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
                 discount=np.full(n, 0.99, np.float32), lanes=np.zeros(n, np.int64),
                 positions=np.arange(n))


# --------------------------------------------------------------------------- the registry
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_registered_algorithm_has_a_yaml_and_builds(name):
    """One YAML per algorithm, naming a trainer the algorithm supports and extending its
    schema; its class builds from the schema's defaults with the same constructor."""
    spec = ALGORITHMS[name]
    raw = yaml.safe_load((CONF / "algo" / f"{name}.yaml").read_text())
    defaults = raw["defaults"]
    assert f"/schema/algo/{name}@_here_" in defaults
    trainer = next(d["/trainer@_global_.trainer"] for d in defaults if isinstance(d, dict))
    assert trainer in spec.trainers
    info = BOX if CONTINUOUS in spec.actions else SpaceInfo((4,), 3, (), None, None, None, "t")
    cfg = spec.config()
    cfg.check()
    algorithm = spec.cls(cfg, info, CPU, 0)
    obs = np.zeros((5, *info.obs_shape), np.float32)
    act = algorithm.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    assert act.shape == (5, *info.action_shape)
    with torch.no_grad():
        env_act = algorithm.deployable()(torch.from_numpy(obs))
    assert env_act.shape == (5, *info.action_shape)
    if not info.discrete:  # the deployable policy acts in the env's bounds
        assert (env_act.numpy() >= info.action_low).all()
        assert (env_act.numpy() <= info.action_high).all()


def test_key_checks_follow_each_algorithms_schema():
    assert key_problem("algo.actor_lr", ["sac"]) is None
    assert key_problem("algo.target_noise", ["td3"]) is None
    problem = key_problem("algo.actor_lr", ["ppo"])
    assert problem is not None and "unknown key algo.actor_lr" in problem
    assert "did you mean algo.target_noise" in key_problem("algo.target_nois", ["td3"])
    # a key of another algorithm's schema names this one's nearest keys
    assert ("did you mean algo.actor_lr, algo.alpha_lr or algo.critic_lr?"
            in key_problem("algo.lr", ["sac"]))
    assert key_problem("env.normalize.obs") is None
    assert "did you mean env.normalize.reward" in key_problem("env.normalize.rewards")


@pytest.mark.parametrize(("cfg", "field"), [
    (SACConfig(tau=1.5), "algo.tau"),
    (SACConfig(init_alpha=0.0), "algo.init_alpha"),
    (SACConfig(policy_delay=0), "algo.policy_delay"),
    (TD3Config(target_noise_clip=-1.0), "algo.target_noise_clip"),
    (DDPGConfig(exploration_noise=float("nan")), "algo.exploration_noise"),
    (DDPGConfig(hidden_sizes=[0]), "algo.hidden_sizes"),
])
def test_schemas_check_their_own_fields(cfg, field):
    with pytest.raises(ConfigError, match=field):
        cfg.check()


# --------------------------------------------------------------------------- SAC
@pytest.mark.parametrize(("target_entropy", "direction"), [(-50.0, -1), (50.0, 1)])
def test_sac_temperature_follows_the_entropy_target(target_entropy, direction):
    """Entropy above the target (a very low target) lowers alpha; below it raises alpha."""
    torch.manual_seed(0)
    sac = SAC(SACConfig(hidden_sizes=[16], target_entropy=target_entropy, alpha_lr=1e-2),
              BOX, CPU, 0)
    alphas = [float(sac.log_alpha.detach().exp())]
    for step in range(5):
        sac.update(batch(seed=step), progress=Progress(step, step, 0.0))
        alphas.append(float(sac.log_alpha.detach().exp()))
    assert (direction * np.diff(alphas) > 0).all(), alphas


def test_sac_target_critics_move_by_polyak_only():
    torch.manual_seed(1)
    sac = SAC(SACConfig(hidden_sizes=[16], tau=0.1), BOX, CPU, 0)
    before = sac.critic_target_flat.clone()
    sac.update(batch(), progress=Progress(0, 0, 0.0))
    expected = 0.9 * before + 0.1 * sac.critic_optim.flat
    torch.testing.assert_close(sac.critic_target_flat, expected, rtol=0, atol=1e-6)


def test_sac_without_autotune_keeps_alpha():
    sac = SAC(SACConfig(hidden_sizes=[16], autotune=False, init_alpha=0.2), BOX, CPU, 0)
    for step in range(3):
        stats = sac.update(batch(seed=step), progress=Progress(step, step, 0.0))
    assert stats.alpha == pytest.approx(0.2)
    assert "alpha" not in sac.optimizers()


# --------------------------------------------------------------------------- TD3 and DDPG
def test_td3_target_smoothing_noise_is_clipped():
    torch.manual_seed(2)
    td3 = TD3(TD3Config(hidden_sizes=[16], target_noise=10.0, target_noise_clip=0.3), BOX,
              CPU, 0)
    obs = torch.randn(4000, 3)
    clean = td3.pi_target(obs)
    noisy = td3.target_action(obs)
    diff = (noisy - clean).abs()
    assert float(diff.max()) <= 0.3 + 1e-6  # clipped (and within [-1, 1] below)
    assert float(diff.mean()) > 0.2  # huge noise: almost every draw hits the clip
    assert float(noisy.abs().max()) <= 1.0
    # DDPG evaluates the target action without noise
    ddpg = DDPG(DDPGConfig(hidden_sizes=[16]), BOX, CPU, 0)
    torch.testing.assert_close(ddpg.target_action(obs), ddpg.pi_target(obs))


def test_td3_delays_actor_and_target_updates():
    """With policy_delay=2 the actor and both targets change on even gradient steps only;
    the critics change on every step."""
    torch.manual_seed(3)
    td3 = TD3(TD3Config(hidden_sizes=[16], policy_delay=2), BOX, CPU, 0)
    for step in range(4):
        actor, critic = td3.actor_optim.flat.clone(), td3.critic_optim.flat.clone()
        targets = (td3.pi_target_flat.clone(), td3.critic_target_flat.clone())
        td3.update(batch(seed=step), progress=Progress(step, step, 0.0))
        assert not torch.equal(td3.critic_optim.flat, critic)
        moved = [not torch.equal(a, b) for a, b in (
            (td3.actor_optim.flat, actor), (td3.pi_target_flat, targets[0]),
            (td3.critic_target_flat, targets[1]))]
        assert moved == [step % 2 == 0] * 3, (step, moved)


def test_exploration_noise_is_gaussian_and_clipped_to_the_box():
    torch.manual_seed(4)
    ddpg = DDPG(DDPGConfig(hidden_sizes=[16], exploration_noise=0.1), BOX, CPU, 0)
    obs = np.zeros((20000, 3), np.float32)
    greedy = ddpg.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    explored = ddpg.act(obs, deterministic=False, progress=Progress(0, 0, 0.0))
    noise = explored - greedy
    assert abs(float(noise.std()) - 0.1) < 0.005
    assert np.abs(explored).max() <= 1.0


# --------------------------------------------------------------------------- through the CLI
def test_unbounded_actions_are_refused_by_squashing_algorithms(cli, tmp_path):
    res = cli("algo=sac", "env=gym", "env.id=toy_envs:rltrain-test/Unbounded-v0",
              "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode == 2, res.stderr
    assert "unbounded in dimensions [0]" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


def test_discrete_algorithm_on_box_actions_names_the_ones_that_fit(cli, tmp_path):
    res = cli("algo=dqn", "env=pendulum", "experiment=smoke")
    assert res.returncode == 2
    assert "algo=dqn needs discrete actions" in res.stderr
    assert all(f"algo={a}" in res.stderr for a in ("ddpg", "ppo", "sac", "td3"))


NORM = ["env=pendulum", "env.normalize.obs=true", "env.normalize.reward=true",
        "algo.hidden_sizes=[32,32]", "trainer.epoch_num_steps=600",
        "trainer.random_warmup_env_steps=300", "trainer.test_step_num_episodes=2",
        "env.num_test_envs=2", "trainer.stop_score=null"]


def test_normalisers_frozen_in_tests_saved_with_the_policy_and_exported(cli, tmp_path):
    """With observation normalisation on: the statistics count exactly the training env steps
    (warm-up included, no test step), the saved policy carries them, and rltrain-eval and the
    ONNX graph apply them: the exported graph matches torch (export's own check) and a
    policy evaluated with its statistics zeroed acts differently."""
    run_dir = tmp_path / "run"
    res = cli("algo=td3", *NORM, "trainer.max_epochs=2", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    modules = ckpt["algorithm"]["modules"]
    # every training env step, and nothing from the 2 x 2 test episodes of 200 steps
    assert int(modules["obs_norm.moments.count"]) == summary["env_step"]
    assert "reward_scaler.moments.var" in modules
    policy = torch.load(run_dir / "final" / "policy.pt", weights_only=True)["state_dict"]
    assert torch.equal(policy["obs_norm.shift"], modules["obs_norm.shift"])
    assert float(policy["obs_norm.shift"].abs().sum()) > 0  # statistics were learnt
    assert "reward_scaler.returns" not in policy  # training only

    res = run_tool("rltrain-export", run_dir, "--weights", "final", "--out",
                   tmp_path / "p.onnx", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "ONNX matches torch" in res.stdout

    import onnxruntime as ort

    from rltrain.evaluate import load_run

    loaded = load_run(run_dir, "final")
    obs = np.random.default_rng(0).uniform(-1, 1, size=(64, 3)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    onnx_act = session.run(["action"], {"obs": obs})[0]
    np.testing.assert_allclose(onnx_act, loaded.act(obs), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        loaded.policy.obs_norm.shift.zero_()
        loaded.policy.obs_norm.scale.fill_(1.0)
    assert not np.allclose(loaded.act(obs), onnx_act, atol=1e-3)

    res = run_tool("rltrain-eval", run_dir, "--weights", "final", "--episodes", "2",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 2


def test_eval_reproduces_the_test_step_with_normalised_observations(cli, tmp_path):
    """rltrain-eval with the run's test seed and the final weights plays exactly the episodes
    of the last test step (same normalised observations, same action scaling)."""
    run_dir = tmp_path / "run"
    res = cli("algo=sac", *NORM, "trainer.max_epochs=1", "trainer.test_step_num_episodes=4",
              "env.num_test_envs=4", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    from rltrain.trainer import derived_seed

    last = read_jsonl(run_dir / "epochs.jsonl")[-1]
    test_seed = derived_seed(0 + 1, 0)  # env_seeds(seed=0, 1 train env): test base = 1
    res = run_tool("rltrain-eval", run_dir, "--weights", "final", "--episodes", "4",
                   "--seed", str(test_seed), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["return_mean"] == pytest.approx(last["test"]["return_mean"], rel=1e-9)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_exact_resume_with_normalisation(tmp_path, algo):
    """SIGTERM mid-epoch, resume: the records equal an unbroken run's, observation and reward
    statistics included (time fields aside)."""
    args = [f"algo={algo}", *NORM, "trainer.max_epochs=3", "trainer.checkpoint_every=1"]
    from conftest import run_cli

    whole = tmp_path / "whole"
    res = run_cli(*args, f"hydra.run.dir={whole}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    broken = tmp_path / "broken"
    import signal

    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path,
                      lambda line: line.startswith("epoch   2/3"), signal.SIGTERM)
    assert res.returncode == 128 + signal.SIGTERM, res.stdout + res.stderr
    res = run_cli(f"resume={broken}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "(exact)" in res.stdout + res.stderr
    assert learning_records(broken) == learning_records(whole)
    a = torch.load(whole / "checkpoints" / "last.pt", weights_only=True)["algorithm"]["modules"]
    b = torch.load(broken / "checkpoints" / "last.pt", weights_only=True)["algorithm"]["modules"]
    for key in ("obs_norm.moments.mean", "obs_norm.moments.count", "reward_scaler.moments.var",
                "reward_scaler.returns"):
        assert torch.equal(a[key], b[key]), key


def test_config_stats_fields_are_dataclasses():
    for spec in ALGORITHMS.values():
        assert dataclasses.is_dataclass(spec.config)
        assert set(spec.actions) <= {DISCRETE, CONTINUOUS}




def tuned_pairs() -> list[tuple[str, str]]:
    pairs = []
    for path in sorted((CONF / "tuned").glob("*.yaml")):
        algo = next(a for a in ALGORITHMS if path.stem.startswith(f"{a}_"))
        pairs.append((algo, path.stem[len(algo) + 1:]))
    return pairs


@pytest.mark.parametrize(("algo", "env"), tuned_pairs())
def test_every_tuned_config_composes_and_passes_the_checks(algo, env):
    """Each conf/tuned/<algo>_<env>.yaml names a registered algorithm and a shipped env, is
    picked up by `algo=<algo> env=<env>`, and yields settings that pass every check."""
    from hydra import compose, initialize_config_dir

    from rltrain.config import register_configs
    from rltrain.run import settings

    assert (CONF / "env" / f"{env}.yaml").exists()
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"algo={algo}", f"env={env}"])
    raw = yaml.safe_load((CONF / "tuned" / f"{algo}_{env}.yaml").read_text())
    assert cfg.algo.name == algo and cfg.env.name == env
    s = settings(cfg)
    if "trainer" in raw:  # the tuned values are the ones composed
        assert s.trainer.max_epochs == raw["trainer"].get("max_epochs", s.trainer.max_epochs)
