"""The image env groups (env=atari, minatar, minigrid, carracing, carracing_discrete) compose and
build; train_only wrappers (``env.wrappers`` entries with ``train_only: true``) shape the
training envs alone, so test returns stay the game's own; MiniGrid's and MinAtar's
observations are what an image or dict encoder takes; a missing extra is named. Env level
only: no networks are built."""

from __future__ import annotations

import functools
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf

from conftest import compose_run
from rltrain.assembly.checked_config import settings
from rltrain.config.schemas import ConfigError, EnvConfig
from rltrain.envs.vector import make_vector_env, space_info
from rltrain.envs.wrappers import ClipRewardSign, EpisodicLife, FireReset
from rltrain.rundir import trust

pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")
pytest.importorskip("minatar", reason="needs the minatar extra: pip install -e '.[minatar]'")
pytest.importorskip("minigrid", reason="needs the minigrid extra: pip install -e '.[minigrid]'")
pytest.importorskip("Box2D", reason="needs the box2d extra: pip install -e '.[box2d]'")


@functools.lru_cache
def env_config(*overrides: str) -> EnvConfig:
    """The checked env section of ``rltrain OVERRIDES`` (shared: never changed)."""
    return settings(compose_run(*overrides)).env


def wrappers_of(env: gym.Env) -> list[gym.Wrapper]:
    """An env's wrappers, outermost first."""
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(env)
        env = env.env
    return out


def wrapper_types(env: gym.Env) -> list[type]:
    return [type(w) for w in wrappers_of(env)]


# --------------------------------------------------------------------------- the groups
GROUPS = {
    # group: (algo, observation shape, observation dtype, action space)
    "atari": ("dqn", (4, 84, 84), np.uint8, gym.spaces.Discrete(6)),  # Pong's minimal set
    "minatar": ("dqn", (10, 10, 4), np.uint8, gym.spaces.Discrete(3)),  # Breakout's
    "carracing": ("sac", (4, 96, 96), np.uint8, None),
    "carracing_discrete": ("dqn", (4, 96, 96), np.uint8, gym.spaces.Discrete(5)),
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_each_image_group_builds_its_train_and_test_envs(group: str) -> None:
    algo, shape, dtype, actions = GROUPS[group]
    cfg = env_config(f"algo={algo}", f"env={group}")
    for train in (True, False):
        envs = make_vector_env(cfg, 2, train=train)
        try:
            space = envs.single_observation_space
            assert isinstance(space, gym.spaces.Box)
            assert (space.shape, space.dtype) == (shape, dtype)
            if actions is not None:
                assert envs.single_action_space == actions
            else:
                assert isinstance(envs.single_action_space, gym.spaces.Box)
            obs, _ = envs.reset(seed=0)
            assert obs.shape == (2, *shape) and obs.dtype == dtype
            info = space_info(envs, cfg.id)
            assert info.obs_space == space
        finally:
            envs.close()


def test_the_groups_name_their_runs_after_the_game() -> None:
    assert env_config("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5").name == \
        "ALE-Breakout-v5"
    assert env_config("algo=dqn", "env=minatar", "env.id=MinAtar/Seaquest-v1").name == \
        "MinAtar-Seaquest-v1"
    assert env_config("algo=dqn", "env=minigrid").name == "MiniGrid-DoorKey-5x5-v0"


def test_the_command_line_composes_train_only_wrappers() -> None:
    """What ``rltrain --cfg job ...`` prints (the composed config as YAML)."""
    shown = OmegaConf.to_yaml(compose_run("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5"))
    assert "  - name: rltrain.envs.wrappers.EpisodicLife\n    train_only: true\n" in shown
    shown = OmegaConf.to_yaml(compose_run(
        "algo=dqn", "env=cartpole",
        "env.wrappers=[{name:rltrain.envs.wrappers.ClipRewardSign,train_only:true}]"))
    assert "  - name: rltrain.envs.wrappers.ClipRewardSign\n    train_only: true\n" in shown


# --------------------------------------------------------------------------- Atari
def test_the_atari_protocol_and_the_training_wrappers() -> None:
    cfg = env_config("algo=dqn", "env=atari")
    train, test = make_vector_env(cfg, 1, train=True), make_vector_env(cfg, 1)
    try:
        base = test.envs[0].unwrapped
        assert base.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
        assert base._frameskip == 1  # AtariPreprocessing skips the frames
        assert base.ale.getInt("max_num_frames_per_episode") == 108_000
        preprocessing = next(w for w in wrappers_of(test.envs[0])
                             if isinstance(w, gym.wrappers.AtariPreprocessing))
        assert (preprocessing.noop_max, preprocessing.frame_skip) == (30, 4)
        assert not preprocessing.terminal_on_life_loss
        stack, preprocess = gym.wrappers.FrameStackObservation, gym.wrappers.AtariPreprocessing
        # in the order of env.wrappers, outermost first; train_only ones in the train env alone
        assert wrapper_types(train.envs[0])[:5] == [ClipRewardSign, stack, EpisodicLife,
                                                    FireReset, preprocess]
        assert wrapper_types(test.envs[0])[:3] == [stack, FireReset, preprocess]
    finally:
        train.close()
        test.close()


def test_test_returns_are_unclipped_and_a_lost_life_ends_only_training_episodes() -> None:
    """Space Invaders scores 5 to 30 per invader and has 3 lives: the same seed and actions in a
    training and a test env give the same game until the training env's first lost life, the
    training rewards the sign of the test ones."""
    cfg = env_config("algo=dqn", "env=atari", "env.id=ALE/SpaceInvaders-v5")
    train, test = make_vector_env(cfg, 1, train=True), make_vector_env(cfg, 1)
    try:
        train.reset(seed=3)
        test.reset(seed=3)
        rng = np.random.default_rng(0)
        train_rewards, test_rewards = [], []
        for _ in range(1000):
            action = rng.integers(0, 6, size=1)
            _, r_train, t_train, _, i_train = train.step(action)
            _, r_test, t_test, _, i_test = test.step(action)
            train_rewards.append(float(r_train[0]))
            test_rewards.append(float(r_test[0]))
            if t_train[0]:
                break
        assert t_train[0] and not t_test[0]  # a life lost: the training episode ends, alone
        assert i_train["lives"][0] == i_test["lives"][0] == 2
        assert max(test_rewards) > 1  # the game's own points
        assert train_rewards == [float(np.sign(r)) for r in test_rewards]
    finally:
        train.close()
        test.close()


def test_every_training_episode_starts_with_its_first_frame_repeated() -> None:
    """The frame stack pads each episode's start with its first frame, a training episode
    after a lost life included (EpisodicLife and FireReset sit inside the stack), and within
    an episode each stack follows on from the previous one: what a replay buffer storing each
    frame once relies on."""
    cfg = env_config("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5")
    train = make_vector_env(cfg, 1, train=True)
    try:
        obs, _ = train.reset(seed=0)
        rng = np.random.default_rng(0)
        starts = 0
        for _ in range(300):
            previous = obs
            obs, _, terminated, truncated, _ = train.step(rng.integers(0, 4, size=1))
            if terminated[0] or truncated[0]:
                starts += 1
                assert all(np.array_equal(obs[0, i], obs[0, 0]) for i in range(4))
            else:
                assert np.array_equal(obs[0, :3], previous[0, 1:])
        assert starts >= 3
    finally:
        train.close()


def test_fire_reset_serves_every_ball_so_no_episode_waits() -> None:
    """Breakout serves only on FIRE: with NOOP alone, FireReset's presses after the reset and
    after each lost life are what lets the game reach its end (5 lives); the test env's
    episode is the whole game, the training env's one life."""
    cfg = env_config("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5")
    test, train = make_vector_env(cfg, 1), make_vector_env(cfg, 1, train=True)
    try:
        test.reset(seed=0)
        train.reset(seed=0)
        lives, train_ends = [], 0
        for _ in range(2000):
            _, _, terminated, truncated, info = test.step(np.zeros(1, dtype=np.int64))
            _, _, train_terminated, _, _ = train.step(np.zeros(1, dtype=np.int64))
            train_ends += int(train_terminated[0])
            lives.append(int(info["lives"][0]))
            if terminated[0] or truncated[0]:
                break
        assert terminated[0] and len(lives) < 500  # the game over, all 5 balls served and lost
        assert set(lives) == {5, 4, 3, 2, 1}  # (the last info is the next game's reset's)
        assert train_ends >= 4  # one training episode per life, the game going on
    finally:
        test.close()
        train.close()


# ---------------------------------------------------- the wrappers on a stand-in Atari game
class Lives(gym.Env):
    """Three lives, one lost every 4 steps; reward 5 at each step; FIRE is action 1."""

    observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t, self.fired, self.resets = 0, 0, 0

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE"]

    def _info(self) -> dict[str, Any]:
        return {"lives": 3 - self.t // 4}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.t, self.resets = 0, self.resets + 1
        return np.array([self.t], np.uint8), self._info()

    def step(self, action: Any) -> tuple:
        self.t += 1
        self.fired += int(action == 1)
        return np.array([self.t], np.uint8), 5.0, self.t >= 12, False, self._info()


def test_episodic_life_resets_the_game_only_at_its_end() -> None:
    env = EpisodicLife(Lives())
    env.reset(seed=1)
    ends = []
    for _ in range(3):
        steps = 0
        while True:
            _, reward, terminated, truncated, info = env.step(0)
            steps += 1
            if terminated:
                ends.append((steps, info["lives"]))
                break
        env.reset()  # the next life: one NOOP step, no reset of the game
    assert ends == [(4, 2), (3, 1), (3, 0)]  # each "reset" took a step of the next life
    assert env.unwrapped.resets == 2  # the first reset, and the one after the game over
    env.reset(seed=5)  # a seeded reset is always a real one
    assert env.unwrapped.resets == 3


def test_fire_reset_presses_fire_after_the_reset_and_each_lost_life() -> None:
    env = FireReset(Lives())
    env.reset(seed=0)
    assert env.unwrapped.fired == 1
    rewards = [env.step(0)[1] for _ in range(5)]
    assert env.unwrapped.fired == 2  # the third step lost a life, and FIRE followed
    assert rewards == [5.0, 5.0, 10.0, 5.0, 5.0]  # the FIRE step's reward is that step's


def test_clip_reward_sign() -> None:
    env = ClipRewardSign(Lives())
    env.reset()
    assert env.step(0)[1] == 1.0
    assert [env.reward(r) for r in (-7.5, 0.0, 0.25)] == [-1.0, 0.0, 1.0]


def test_a_train_only_wrapper_may_not_change_the_spaces() -> None:
    cfg = env_config("algo=dqn", "env=cartpole", "env.wrappers=[RecordEpisodeStatistics,"
                     "{name:DtypeObservation,kwargs:{dtype:float64},train_only:true}]")
    make_vector_env(cfg, 1).close()  # the test envs do without it
    with pytest.raises(ConfigError, match=r"^env\.wrappers\[1\] DtypeObservation changes the "
                                          r"observation space \(Box\(.*float32\) -> "
                                          r"Box\(.*float64\)\), but it is train_only: "):
        make_vector_env(cfg, 1, train=True)


def test_train_only_must_be_a_bool() -> None:
    cfg = env_config("algo=dqn", "env=cartpole",
                     "env.wrappers=[{name:rltrain.envs.wrappers.ClipRewardSign,train_only:maybe}]")
    with pytest.raises(ConfigError, match=r"^env\.wrappers\[0\]: train_only must be true or "
                                          r"false, got 'maybe'$"):
        make_vector_env(cfg, 1)


def test_train_only_wrappers_are_part_of_the_trust_surface() -> None:
    env = {"id": "CartPole-v1", "wrappers": [
        {"name": "rltrain.envs.wrappers.EpisodicLife", "train_only": True},
        {"name": "pydoc.pipepager", "kwargs": {"cmd": "touch x"}, "train_only": True}]}
    assert trust.env_surface(env) == [
        "call pydoc.pipepager(cmd='touch x') (env.wrappers[1])"]
    assert trust.env_surface({"id": "MinAtar/Breakout-v1", "imports": ["rltrain.envs.wrappers"],
                              "wrappers": ["rltrain.envs.wrappers.MiniGridObservation"]}) == []


# --------------------------------------------------------------------------- MinAtar, MiniGrid
@pytest.mark.parametrize(("game", "channels"), [("Asterix", 4), ("Breakout", 4),
                                                ("Freeway", 7), ("Seaquest", 10),
                                                ("SpaceInvaders", 6)])
def test_minatar_observations_are_uint8_images_bounded_by_one(game: str, channels: int) -> None:
    cfg = env_config("algo=dqn", "env=minatar", f"env.id=MinAtar/{game}-v1")
    assert cfg.kwargs["sticky_action_prob"] == 0.1
    envs = make_vector_env(cfg, 2)
    try:
        assert envs.single_observation_space == gym.spaces.Box(0, 1, (10, 10, channels),
                                                               np.uint8)
        obs, _ = envs.reset(seed=0)
        for _ in range(20):
            obs, *_ = envs.step(envs.action_space.sample())
        assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 1}
    finally:
        envs.close()


@pytest.mark.parametrize(("game", "channels"), [("Breakout", 4), ("Seaquest", 10)])
def test_minatar_is_drawn_as_its_games_look(game: str, channels: int) -> None:
    """Issue 45: rltrain-eval --video on MinAtar wrote 10x10 all-black videos (MinAtar's own
    frames are float colours in [0, 1]) with two gymnasium warnings. The video env draws each
    channel in its colour on black, 16 pixels a cell, uint8, with a frame rate."""
    import warnings

    from rltrain.envs.wrappers import MINATAR_COLOURS, MINATAR_FPS, watchable

    env = watchable(gym.make(f"MinAtar/{game}-v1", render_mode="rgb_array"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no gymnasium warning, as a video env renders
        env.reset(seed=0)
        for _ in range(15):
            env.step(env.action_space.sample())
        frame = env.render()
    state = np.asarray(env.unwrapped.game.state(), dtype=bool)
    env.close()
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
    assert env.metadata["render_fps"] == MINATAR_FPS
    # each cell one colour: black where the state is empty, else its last channel's colour
    cells = frame[::16, ::16]
    for y, x in np.ndindex(cells.shape[:2]):
        on = np.flatnonzero(state[y, x])
        expected = MINATAR_COLOURS[on[-1]] if on.size else np.zeros(3, np.uint8)
        np.testing.assert_array_equal(cells[y, x], expected)
    assert state.any() and (frame > 0).any()
    assert np.array_equal(frame[:16, :16], np.broadcast_to(frame[0, 0], (16, 16, 3)))


def test_a_minatar_video_is_watchable(tmp_path) -> None:
    """The video rltrain-eval --video writes for MinAtar: 160x160, not black, 20 fps."""
    pytest.importorskip("moviepy", reason="needs the video extra: pip install -e '.[video]'")
    import warnings

    from moviepy import VideoFileClip

    from rltrain.commands.evaluate import make_video_env
    from rltrain.data.collector import Collector, random_policy

    cfg = env_config("algo=dqn", "env=minatar")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        envs = make_video_env(cfg, np.array([1]), tmp_path)
        try:
            collector = Collector(envs)
            collector.reset(seed=0)
            collector.collect(random_policy(envs, 0), n_episodes=1, quota=True)
        finally:
            envs.close()
    (video,) = tmp_path.glob("*.mp4")
    clip = VideoFileClip(str(video))
    try:
        assert tuple(clip.size) == (160, 160) and clip.fps == 20
        frame = clip.get_frame(0)
    finally:
        clip.close()
    assert frame.mean() > 5  # Breakout's row of bricks, at least


def test_the_minigrid_observation_drops_the_mission_and_bounds_each_channel() -> None:
    from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

    envs = make_vector_env(env_config("algo=dqn", "env=minigrid"), 2)
    try:
        space = envs.single_observation_space
        assert isinstance(space, gym.spaces.Dict) and set(space) == {"image", "direction"}
        image = space["image"]
        assert (image.shape, image.dtype) == ((7, 7, 3), np.uint8)
        assert (image.low == 0).all()
        # object index, colour index, state (or the agent's direction, 0 to 3)
        high = [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()),
                max(*STATE_TO_IDX.values(), 3)]
        assert high == [10, 5, 3] and (image.high == np.array(high, np.uint8)).all()
        assert space["direction"] == gym.spaces.Discrete(4)
        assert space_info(envs, "MiniGrid-DoorKey-5x5-v0").obs_space == space
        obs, _ = envs.reset(seed=0)
        for _ in range(50):
            assert set(obs) == {"image", "direction"}
            assert all(space.contains({k: v[i] for k, v in obs.items()}) for i in range(2))
            obs, *_ = envs.step(envs.action_space.sample())
    finally:
        envs.close()


# --------------------------------------------------------------------------- missing extras
@pytest.mark.parametrize(("group", "absent", "extra"), [
    ("atari", ["ale_py"], "atari"),
    ("atari", ["cv2"], "atari"),  # AtariPreprocessing resizes with OpenCV
    ("minatar", ["minatar", "minatar.gym"], "minatar"),
    ("minigrid", ["minigrid"], "minigrid"),
])
def test_a_missing_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch, group: str,
                                               absent: list[str], extra: str) -> None:
    cfg = env_config("algo=dqn", f"env={group}")
    for module in absent:  # None in sys.modules: the import fails as for a missing package
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigError, match=rf'pip install -e "\.\[{extra}\]" \(from a checkout\) '
                                          rf'or pip install "rltrain\[{extra}\]"$'):
        make_vector_env(cfg, 1)
