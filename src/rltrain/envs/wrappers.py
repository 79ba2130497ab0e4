"""The env wrappers rltrain ships where gymnasium has none: Atari's training-time ones, MiniGrid's
observation, the velocity-masked classic-control envs, and MinAtar's registration.

Name them in an env file's ``wrappers``: ``rltrain.envs.wrappers.FireReset``, or
``{name: rltrain.envs.wrappers.EpisodicLife, train_only: true}`` for the training envs alone. Each
keeps its state in plain attributes, so that ``rltrain.envs.state`` captures it for an exact
resume.

- :class:`EpisodicLife` and :class:`ClipRewardSign` are the training half of the DQN
  preprocessing (Mnih et al. 2015, "Human-level control through deep reinforcement learning",
  Methods): a lost life ends the *training* episode and rewards are clipped to their sign.
  Both are ``train_only``: test and eval returns stay the game's own score over the whole
  game (Machado et al. 2018, "Revisiting the Arcade Learning Environment", section 5).
- :class:`FireReset` presses FIRE where the game waits for it (Breakout's serve), in every env.
- :class:`RecordStickyAction` is not named in env files: the env factory puts it around every
  Atari env with sticky actions (:func:`record_sticky_action`), to keep the one part of the
  emulator's state that ALE's saved state leaves out.
- :class:`MiniGridObservation` makes MiniGrid's observation one rltrain stores and encodes.
- :class:`MaskVelocity` drops the velocities from a classic-control observation (RL-Zoo3's
  ``NoVel`` envs): a partially observable env that a policy with memory can still solve.
- Importing this module registers MinAtar's gymnasium ids (:func:`register_minatar`).

MinAtar and MiniGrid are optional (rltrain's extras): this module imports neither at its top,
so that importing it needs neither; the wrapper that reads MiniGrid's constants imports them
when it is built, around an env that already needed the package.
"""

from __future__ import annotations

import sys
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from rltrain.envs.state.families.ale import AleStickyAction

#: Atari's action 0 on every minimal and full action set
NOOP = 0
#: where Atari games with a FIRE button have it (ALE's minimal action sets put it second)
FIRE = 1


def _lives(info: dict[str, Any], wrapper: str) -> int:
    """The lives left, as ALE's AtariEnv reports them in every step's and reset's info."""
    if "lives" not in info:
        raise gym.error.Error(f"{wrapper} needs an env that reports info['lives'] (an ALE "
                              "Atari env), and this one does not")
    return int(info["lives"])


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``), for training only; the game goes on.

    Losing a life is a strong signal the value function would otherwise learn only from a
    distant game over, so DQN (Mnih et al. 2015) ends its training episodes there. The
    following ``reset()`` does not restart the game: it takes one NOOP step and hands back
    that observation, so the next training episode is the next life. The real reset happens
    only at the real end (game over or the time limit), or when ``reset`` is given a seed or
    options (a caller that means a new game). Written after Stable-Baselines3's
    ``EpisodicLifeEnv``, with that last case added: a seeded reset must reseed.

    Life counts come from ``info["lives"]``; ``0 < lives`` because some games (Q*bert) show
    zero lives for a few frames before the game over is announced, and that is not a loss.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        #: whether the last episode ended for real (the game is over): the next reset resets
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _lives(info, "EpisodicLife")
        life_lost = 0 < lives < self.lives
        self.lives = lives
        return obs, reward, bool(terminated or life_lost), truncated, info

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None or options is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            # the next life of the same game; its reward (if any) belongs to no episode
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:  # that step ended the game after all
                obs, info = self.env.reset()
        self.game_over = False
        self.lives = _lives(info, "EpisodicLife")
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after a reset and after each lost life, in games that have a FIRE button.

    Breakout (and games like it) serves the ball only on FIRE. A policy that has not learned
    to press it, a greedy one early in training above all, would wait until the time limit:
    108,000 frames, 27,000 agent steps, per test episode. So this wrapper presses it where the
    game waits, in *every* env (train, test and eval alike: the agent never has to learn it,
    so it must never need it), unlike Stable-Baselines3's ``FireResetEnv``, which presses it at
    reset only. A game without FIRE (its action 1 is something else) passes through unchanged.

    The FIRE step after a lost life is part of the step that lost it (its reward is added, its
    end counts); the FIRE step after a reset is part of the reset (a reward there, never seen in
    practice, would be dropped: a reset returns none).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = getattr(env.unwrapped, "get_action_meanings", None)
        #: whether the game has a FIRE button, as action 1
        self.fires = callable(meanings) and len(meanings()) > FIRE and (
            meanings()[FIRE] == "FIRE")
        self.lives = 0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.fires:
            lives = _lives(info, "FireReset")
            if 0 < lives < self.lives and not (terminated or truncated):
                obs, more, terminated, truncated, info = self.env.step(FIRE)
                reward = float(reward) + float(more)
                lives = _lives(info, "FireReset")
            self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.fires:
            obs, _, terminated, truncated, info = self.env.step(FIRE)
            if terminated or truncated:
                obs, info = self.env.reset()
            self.lives = _lives(info, "FireReset")
        return obs, info


class RecordStickyAction(gym.Wrapper):
    """Keeps :class:`rltrain.envs.state.families.ale.AleStickyAction` up to date around ALE's
    AtariEnv: the action the emulator repeats when a frame's action sticks, which ALE's saved
    state leaves out. Each ``step`` makes ``calls`` ``act()`` calls (the env's fixed
    frameskip) with the action's code; each ``reset`` holds NOOP and may reseed the emulator.
    It changes nothing the env returns. Put around the env as gymnasium makes it (its time
    limit included), so that every step of the emulator passes through it."""

    def __init__(self, env: gym.Env, record: AleStickyAction, calls: int) -> None:
        super().__init__(env)
        #: the held action, kept for checkpoints (rltrain.envs.state)
        self.record = record
        #: act() calls per step
        self.calls = calls

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        self.record.acted(int(action), self.calls)
        return result

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        result = self.env.reset(seed=seed, options=options)
        self.record.reset()
        return result


def _ale_code(action: Any) -> int:
    """ALE's code of an entry of AtariEnv's action set (an ale_py.Action)."""
    code: Any = getattr(action, "value", action)
    return int(code)


def record_sticky_action(env: gym.Env) -> gym.Env:
    """``env`` in :class:`RecordStickyAction` when it is ALE's AtariEnv with sticky actions that
    the record can follow: discrete actions (the code of each is the env's ``_action_set``) and
    a fixed frameskip (the number of ``act()`` calls per step). Any other env is returned as
    it is: one without sticky actions needs no record, and an Atari env the record cannot
    follow says at checkpoints that its resume is not exact (rltrain.envs.state)."""
    ale_py = sys.modules.get("ale_py")  # imported by whatever made an Atari env
    atari = env.unwrapped
    ale: Any = getattr(atari, "ale", None)
    codes: Any = getattr(atari, "_action_set", None)
    frameskip = getattr(atari, "_frameskip", None)
    if (ale_py is None or type(ale) is not ale_py.ALEInterface
            or getattr(atari, "continuous", True) or type(frameskip) is not int
            or not isinstance(codes, (list, tuple, np.ndarray))
            or float(ale.getFloat("repeat_action_probability")) <= 0):
        return env
    record = AleStickyAction(ale, [_ale_code(action) for action in codes])
    if record.rng is None:  # its generator is not written as read here: the caveat stands
        return env
    return RecordStickyAction(env, record, frameskip)


class ClipRewardSign(gym.RewardWrapper):
    """The reward's sign: -1, 0 or +1 (Mnih et al. 2015: one learning rate for games whose
    scores differ by orders of magnitude). For training only; gymnasium's ``ClipReward(-1, 1)``
    would keep a reward of 0.5 as 0.5, and keeps no count of what it changed either."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


class MiniGridObservation(gym.ObservationWrapper):
    """MiniGrid's observation as ``Dict(image=Box(uint8), direction=Discrete(4))``.

    - The ``mission`` string is dropped: in DoorKey, Empty, FourRooms, LavaCrossing and the
      other single-task envs it is the same sentence at every step of every episode, so it
      carries no information, and rltrain encodes no text. (In BabyAI-style envs, whose mission
      changes per episode, dropping it loses what the agent must do: those need a text encoder.)
    - The image's ``Box(0, 255, (7, 7, 3))`` becomes ``Box(0, high)`` where ``high`` is, per
      channel, the largest value MiniGrid ever writes there: the object index, the colour
      index and the state (``minigrid.core.constants``; the state channel also holds the
      agent's direction, 0 to 3, in the agent's cell of the fully observable wrappers). An
      image encoder that scales by the space's ``high`` then sees values in [0, 1]; by 255 it
      would see at most 10/255.
    - ``direction`` stays ``Discrete(4)``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

        space = env.observation_space
        if not (isinstance(space, gym.spaces.Dict) and isinstance(
                space.spaces.get("image"), gym.spaces.Box) and "direction" in space.spaces):
            raise gym.error.Error("MiniGridObservation needs MiniGrid's Dict observation "
                                  f"(image, direction, mission), got {space}")
        image = space["image"]
        assert isinstance(image, gym.spaces.Box)
        high = np.array([max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()),
                         max(*STATE_TO_IDX.values(), 3)], dtype=np.uint8)
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(np.zeros(image.shape, np.uint8),
                                    np.broadcast_to(high, image.shape).copy(), dtype=np.uint8),
            "direction": gym.spaces.Discrete(4),
        })

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {"image": observation["image"], "direction": int(observation["direction"])}


#: the velocity entries of each env's observation that :class:`MaskVelocity` drops by default:
#: RL-Zoo3's table (``rl_zoo3.wrappers.MaskVelocityWrapper``), by the env's id without version
VELOCITIES: dict[str, tuple[int, ...]] = {
    "CartPole": (1, 3),  # cart velocity, pole angular velocity
    "MountainCar": (1,),
    "MountainCarContinuous": (1,),
    "Pendulum": (2,),  # angular velocity
    "LunarLander": (2, 3, 5),  # horizontal, vertical and angular velocity
    "LunarLanderContinuous": (2, 3, 5),
}


class MaskVelocity(gym.ObservationWrapper):
    """A classic-control env without its velocities: the observation keeps every entry but
    those (a Box of the remaining entries, their bounds kept), as RL-Zoo3's ``NoVel`` envs
    (CartPoleNoVel-v1, PendulumNoVel-v1, ...) hide them, so that no single observation tells
    how the system moves and a policy needs memory (``algo=ppo_lstm``).

    RL-Zoo3's wrapper multiplies the velocities by zero and keeps the shape; this one drops
    them, so that no network input is a constant (which an observation normaliser would divide
    by a zero spread). ``indices`` names the dropped entries; by default they are looked up in
    :data:`VELOCITIES` by the env's id (``CartPole-v1`` -> ``CartPole``)."""

    def __init__(self, env: gym.Env, indices: list[int] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise gym.error.Error(f"MaskVelocity needs a vector (1-D Box) observation, got "
                                  f"{space}")
        if indices is None:
            spec = env.unwrapped.spec
            name = "" if spec is None else spec.id.rpartition("/")[2].rpartition("-v")[0]
            if name not in VELOCITIES:
                raise gym.error.Error(
                    f"MaskVelocity knows the velocities of {', '.join(VELOCITIES)}, not of "
                    f"{spec.id if spec else 'this env'}: name them, e.g. "
                    "{name: rltrain.envs.wrappers.MaskVelocity, kwargs: {indices: [1, 3]}}")
            indices = list(VELOCITIES[name])
        n = space.shape[0]
        dropped = sorted({int(i) for i in indices})
        if not dropped or dropped[0] < 0 or dropped[-1] >= n or len(dropped) == n:
            raise gym.error.Error(f"MaskVelocity indices {list(indices)} must name some, not "
                                  f"all, of the observation's {n} entries (0 to {n - 1})")
        #: the entries the observation keeps, in order
        self.kept = np.array([i for i in range(n) if i not in dropped], dtype=np.int64)
        self.observation_space = gym.spaces.Box(space.low[self.kept], space.high[self.kept],
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.kept]


#: MinAtar's games: gymnasium id name -> the game's module in minatar.environments
MINATAR_GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway",
                 "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}


def register_minatar() -> None:
    """Register ``MinAtar/<Game>-v0`` (all 6 actions) and ``-v1`` (the game's minimal action
    set), as MinAtar 1.0.15's own ``minatar.gym.register_envs()`` does; MinAtar defines that
    function but nothing calls it at import, so its ids are not there after ``import minatar``.
    The entry point is named, not imported: making one of these envs without MinAtar installed
    fails with a ModuleNotFoundError that rltrain turns into the extra to install. Ids already
    registered (by MinAtar's own function) are left as they are."""
    for name, game in MINATAR_GAMES.items():
        for version, minimal in ((0, False), (1, True)):
            env_id = f"MinAtar/{name}-v{version}"
            if env_id not in gym.registry:
                gym.register(env_id, entry_point="minatar.gym:BaseEnv",
                             kwargs={"game": game, "use_minimal_action_set": minimal})


#: MinAtar's colours, one per channel, in channel order (a channel's objects are drawn in its
#: colour on black; where several channels hold something, the last one's shows, as MinAtar's
#: own display draws it): ten hues far apart, bright on black
MINATAR_COLOURS = np.array([(70, 140, 255), (255, 150, 30), (60, 200, 70), (230, 50, 50),
                            (170, 110, 230), (190, 130, 90), (255, 120, 210), (160, 160, 160),
                            (220, 220, 40), (40, 210, 230)], dtype=np.uint8)
#: a MinAtar video's frame rate: MinAtar's own display shows a frame for 50 ms
MINATAR_FPS = 20


class MinAtarFrames(gym.Wrapper):
    """MinAtar as its games look, for videos: each channel of the state in its own colour
    (:data:`MINATAR_COLOURS`) on black, each cell ``scale`` pixels square (the 10x10 grid as
    160x160 pixels), uint8 RGB, at :data:`MINATAR_FPS` frames per second.

    MinAtar's own ``rgb_array`` frames are its palette's float colours in [0, 1], one pixel
    per cell: a video writer makes them 10x10 and black, and gymnasium warns twice (float
    frames, no ``render_fps``). This wrapper draws from the game's state and never asks the
    env to render, so neither warning has a cause. It holds no state of its own."""

    def __init__(self, env: gym.Env, scale: int = 16) -> None:
        super().__init__(env)
        if scale < 1:
            raise gym.error.Error(f"MinAtarFrames scale must be >= 1, got {scale}")
        self.scale = scale
        self.metadata = {**env.metadata, "render_fps": MINATAR_FPS}

    def render(self) -> np.ndarray:
        minatar: Any = self.env.unwrapped  # minatar.gym.BaseEnv, untyped
        state = np.asarray(minatar.game.state()).astype(bool)  # (10, 10, channels)
        n = state.shape[-1]
        # the last channel set at each cell (1-based), 0 where none is
        top = np.where(state.any(-1), n - np.argmax(state[..., ::-1], axis=-1), 0)
        palette = np.concatenate([np.zeros((1, 3), np.uint8),
                                  np.resize(MINATAR_COLOURS, (n, 3))])
        frame = palette[top]
        return np.repeat(np.repeat(frame, self.scale, axis=0), self.scale, axis=1)


def is_minatar(env: gym.Env) -> bool:
    """Whether ``env`` is one of MinAtar's games (its gymnasium class, whatever wraps it)."""
    return type(env.unwrapped).__module__ == "minatar.gym"


def watchable(env: gym.Env) -> gym.Env:
    """``env`` as a video should record it: MinAtar's games drawn by :class:`MinAtarFrames`;
    any other env as it is (its own rgb_array frames are already a picture of it)."""
    return MinAtarFrames(env) if is_minatar(env) else env


register_minatar()
