"""``rltrain-eval RUN_DIR``: test a trained policy again, away from training.

The algorithm is rebuilt from the run's stored config (``.hydra/config.yaml``), the
chosen weights are loaded into its policy network, and N deterministic episodes run
on a fresh test vector env in fixed per-env quotas, exactly as the trainer's test
step does, but with a seed of their own (default ``10_000 + seed``, disjoint from the
train and test seeds of the run). The result is printed and written to
``RUN_DIR/eval.json``.

Weights: ``best/policy.pt`` and ``final/policy.pt`` hold the deployable policy (observation
normaliser, actor network, action scaling: see ``Algorithm.deployable``); ``last`` loads the
algorithm's modules from ``checkpoints/last.pt`` (through the lifecycle's loading path, as a
resume reads it) and takes the same policy out of them.

rltrain's run-time modules are imported inside the functions that need them, after the
arguments are parsed: they import torch and gymnasium (1.1 s here), and ``rltrain-eval --help``
or a wrong argument then answers in 0.08 s (``rltrain-export`` and ``rltrain-collect`` share
this module's argument handling).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from rltrain.files import write_new
from rltrain.streams import clip_long_words, os_error_text

#: the weights a run keeps, by ``--weights`` name
WEIGHT_FILES = {
    "best": Path("best") / "policy.pt",
    "final": Path("final") / "policy.pt",
    "last": Path("checkpoints") / "last.pt",
}
#: the default evaluation seed is this plus the run's seed; the run's own env seeds are
#: ``[seed, seed + num_train_envs + num_test_envs)``, far below it
SEED_OFFSET = 10_000


class UserError(Exception):
    """A problem with what the user asked for: reported in one line, without a traceback."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with errors in rltrain's style: one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int, what: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {text!r}")
        return value
    return parse


positive_int = _int_at_least(1, "positive")


def seed_int(text: str) -> int:
    from rltrain.config import MAX_SEED

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {MAX_SEED:,}, got "
                                         f"{text!r}")
    return value


def require(modules: Sequence[str], what: str, extra: str) -> None:
    """Fail early, before any work, when an optional dependency is missing."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise UserError(
            f"{what} needs {' and '.join(missing)}, which {verb} not installed; install the "
            f"'{extra}' extra: pip install -e \".[{extra}]\" (in the rltrain repository)"
        )


def short(e: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass
class LoadedRun:
    """A run's algorithm, rebuilt from its config, with the chosen weights loaded."""

    run_dir: Path
    settings: Any  # rltrain.settings.Settings
    info: Any  # rltrain.core.SpaceInfo
    algorithm: Any  # rltrain.algorithms.Algorithm
    weights: str
    weights_path: Path
    #: raw observations -> the actions the env receives (``Algorithm.deployable()``), loaded
    policy: Any = None

    @property
    def recurrent(self) -> bool:
        """The policy has memory (rltrain.algorithms.base.RecurrentDeployedPolicy): it acts
        on each env's state too, which :meth:`acting` threads through the episodes."""
        from rltrain.algorithms.base import RecurrentDeployedPolicy

        return isinstance(self.policy, RecurrentDeployedPolicy)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations as a collector passes them (a Dict
        observation's packed rows are unpacked into one tensor per key). A policy with memory
        cannot act on observations alone: :meth:`acting` gives what a collector steps it with."""
        import torch

        from rltrain.algorithms.base import policy_inputs

        if self.recurrent:
            raise UserError(f"the {self.settings.algo.name} policy has memory: it acts on each "
                            "env's state as well as its observation, which this command does "
                            "not keep; rltrain-eval and rltrain-export run it")
        with torch.inference_mode():
            return self.policy(*policy_inputs(self.info, obs)).numpy()

    def acting(self) -> Any:
        """The policy as a collector steps envs with it (rltrain.core.Policy): :meth:`act`, or
        for a policy with memory a rltrain.recurrent.RecurrentPolicy over its ``step`` (the
        collector keeps each env's state, zeros at each episode's start)."""
        if not self.recurrent:
            return self.act
        import torch

        from rltrain.algorithms.base import policy_inputs
        from rltrain.recurrent import RecurrentPolicy

        policy, info = self.policy, self.info
        size, parts = policy.state_size, len(policy.state_names)

        def step(obs: np.ndarray, state: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
            action, *after = policy.step(*policy_inputs(info, obs), *state.split(size, -1))
            return action.numpy(), torch.cat(after, -1)

        return RecurrentPolicy(step, size * parts)


def load_run(run_dir: Path, weights: str, device: str | None = None, *,
             consent: bool = False) -> LoadedRun:
    """Rebuild the run's algorithm from ``.hydra/config.yaml`` and load ``weights`` into it
    (on ``device``, default: cpu, whatever the run trained on). Code the config names that
    was not set up on this machine runs only with ``consent`` (``--trust``).

    Raises :class:`rltrain.config.ConfigError` or :class:`UserError` for anything the
    user can fix (no such run, no such weights file, a damaged file).
    """
    import torch

    from rltrain.build import build_algorithm
    from rltrain.envs import make_vector_env, max_episode_steps, space_info
    from rltrain.settings import load_run_settings

    s = load_run_settings(run_dir, device=device or "cpu", consent=consent)
    path = run_dir / WEIGHT_FILES[weights]
    if not path.is_file():
        have = [name for name, rel in WEIGHT_FILES.items() if (run_dir / rel).is_file()]
        hint = f"this run has --weights {', '.join(have)}" if have else "this run saved no weights"
        raise UserError(f"{path} does not exist (--weights {weights}); {hint}")
    torch.set_num_threads(s.torch_threads)
    envs = make_vector_env(s.env, 1)
    try:
        info = space_info(envs, s.env.id, max_episode_steps(s.env)[0],
                          s.env.reward_threshold)
    finally:
        envs.close()
    algorithm = build_algorithm(s, info)
    policy = algorithm.deployable()
    policy.load_state_dict(_policy_state(path, weights, algorithm, info, _own(run_dir)))
    algorithm.eval()
    return LoadedRun(run_dir, s, info, algorithm, weights, path, policy.eval())


def _own(run_dir: Path) -> dict[str, Any] | None:
    """The directory's own run (rltrain.lifecycle.own_identity); UserError if run.json is
    damaged."""
    from rltrain.lifecycle import ForeignFile, own_identity

    try:
        return own_identity(run_dir)
    except ForeignFile as e:
        raise UserError(str(e)) from None


def _policy_state(path: Path, weights: str, algorithm: Any, info: Any,
                  own: dict[str, Any] | None = None) -> dict[str, Any]:
    """The deployable policy's state_dict from a weights file, checked against the policy
    the run's config builds and against the run (``own``: its identity): a file another run
    wrote, copied into this directory, is refused naming both runs."""

    from rltrain.checkpoint import CheckpointError, load_checkpoint, load_policy
    from rltrain.lifecycle import file_identity, not_own, restore_algorithm

    def refuse_other(obj: Any) -> None:
        problem = not_own(path, file_identity(obj), own)
        if problem is not None:
            raise UserError(f"{problem}; these are not this run's weights: move that file "
                            "out, or pass the directory of the run that wrote it")

    policy = algorithm.deployable()
    if weights == "last":
        # the full training state, checked (format, version) and loaded weights_only, read
        # as a resume reads it
        try:
            obj = load_checkpoint(path)
        except CheckpointError as e:
            raise UserError(short(e, 240)) from None
        refuse_other(obj)
        try:
            modules = obj["algorithm"]["modules"]
        except (KeyError, TypeError):
            raise UserError(f"{path} is not an rltrain checkpoint (no algorithm modules)"
                            ) from None
        expected = algorithm.state_dict()
        problem = _mismatch(expected, modules)
        if problem:
            raise UserError(f"{path} does not fit the algorithm built from the run's config "
                            f"({problem})")
        restore_algorithm(algorithm, obj, training=False)
        return policy.state_dict()
    else:
        try:
            obj = load_policy(path)
        except CheckpointError as e:
            raise UserError(short(e, 240)) from None
        refuse_other(obj)
        state = obj["state_dict"]
        meta = obj.get("meta") or {}
        algo = algorithm.cfg.name
        saved = (meta.get("algo", algo), meta.get("env_id", info.env_id))
        if saved != (algo, info.env_id):
            raise UserError(f"{path} holds {saved[0]} weights for {saved[1]}, but the run's "
                            f"config builds {algo} for {info.env_id}")
    problem = _mismatch(policy.state_dict(), state)
    if problem:
        raise UserError(f"{path} does not fit the policy built from the run's config "
                        f"({problem})")
    return state


def _mismatch(expected: dict[str, Any], state: dict[str, Any]) -> str:
    """What keeps ``state`` from loading into a module whose state_dict is ``expected``."""
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    wrong = sorted(k for k in expected.keys() & state.keys()
                   if tuple(state[k].shape) != tuple(expected[k].shape))
    return "; ".join(f"{label} {', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''}"
                     for label, keys in (("missing", missing), ("unexpected", unexpected),
                                         ("wrong shape", wrong)) if keys)


def default_seed(run_seed: int) -> int:
    return SEED_OFFSET + run_seed


def make_video_env(env_cfg: Any, quotas: np.ndarray, folder: Path) -> Any:
    """The run's env from the one env factory (same-step sync vector env, its wrappers),
    with sub-env i wrapped last in gymnasium's RecordVideo, recording its first
    ``quotas[i]`` episodes, i.e. exactly the episodes that count:
    ``env{i}-episode-{k}.mp4`` in ``folder``."""
    import gymnasium as gym
    from gymnasium.wrappers import RecordVideo

    from rltrain.envs import make_vector_env
    from rltrain.wrappers import watchable

    def record(env: gym.Env, i: int) -> gym.Env:
        # MinAtar's own frames are 10x10 float colours, black in a video: drawn here instead
        return RecordVideo(watchable(env), str(folder), name_prefix=f"env{i}",
                           episode_trigger=lambda episode: episode < quotas[i])

    # rgb_array rendering draws off-screen; without this, pygame's SDL looks for a display
    # server and prints "XDG_RUNTIME_DIR is invalid or not set" on headless machines
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # RecordVideo warns that it may overwrite files once the folder exists: each env
        # records under its own names, and a rerun replaces a rerun's videos by design.
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        return make_vector_env(env_cfg, len(quotas), render_mode="rgb_array", extra=record)


def evaluate(loaded: LoadedRun, episodes: int, seed: int, video: Path | None = None) -> Any:
    """Run ``episodes`` deterministic episodes of the deployable policy on the run's env (its
    own action space: the policy scales its actions); returns the collector's
    :class:`Episodes`."""
    from rltrain.build import seed_everything
    from rltrain.collector import Collector, episode_quotas
    from rltrain.envs import make_vector_env

    s = loaded.settings
    num_envs = min(s.env.num_test_envs, episodes)
    if video is None:
        envs = make_vector_env(s.env, num_envs)
    else:
        envs = make_video_env(s.env, episode_quotas(episodes, num_envs), video)
    seed_everything(seed)
    try:
        collector = Collector(envs)
        collector.reset(seed=seed)
        return collector.collect(loaded.acting(), n_episodes=episodes, quota=True)
    finally:
        with warnings.catch_warnings():
            # after a failed render, RecordVideo notes that it had no frames to save
            warnings.filterwarnings("ignore", message=".*zero frames to save.*")
            envs.close()


def write_json(obj: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write_new(tmp, json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


#: what --trust does, for every tool that rebuilds a run from its directory
TRUST_HELP = ("run the modules and wrappers RUN_DIR's config names even though no command on "
              "this machine set them up (a run from elsewhere); only for a run you trust")


def parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="rltrain-eval",
        description="Evaluate a trained policy: deterministic episodes on fresh test envs, "
        "rebuilt from the run directory's stored config. Prints the mean return and "
        "writes RUN_DIR/eval.json.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                   help="a run directory written by rltrain (holds .hydra/config.yaml)")
    p.add_argument("--episodes", type=positive_int, default=10, metavar="N",
                   help="number of episodes (default: 10), in fixed per-env quotas")
    p.add_argument("--weights", choices=tuple(WEIGHT_FILES), default="best",
                   help="best/policy.pt, final/policy.pt or the policy in checkpoints/last.pt "
                   "(default: best)")
    p.add_argument("--seed", type=seed_int, default=None, metavar="S",
                   help=f"seed of the evaluation envs (default: {SEED_OFFSET} + the run's seed)")
    p.add_argument("--video", type=Path, default=None, metavar="DIR",
                   help="record every evaluated episode as an mp4 in DIR (needs the 'video' "
                   "extra: moviepy, pygame)")
    p.add_argument("--trust", action="store_true", help=TRUST_HELP)
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    if args.video is not None:
        require(["moviepy"], "--video", "video")
        if args.video.exists() and not args.video.is_dir():
            raise UserError(f"--video {args.video} is a file; pass a directory for the videos")
    loaded = load_run(args.run_dir, args.weights, consent=args.trust)
    s = loaded.settings
    seed = default_seed(s.seed) if args.seed is None else args.seed
    try:
        result = evaluate(loaded, args.episodes, seed, args.video)
    except gym.error.DependencyNotInstalled as e:
        raise UserError(f"--video: rendering {s.env.id} needs a missing package ({short(e)}); "
                        "the 'video' extra has pygame, which the classic-control envs render "
                        "with: pip install -e \".[video]\"") from None
    returns = [float(r) for r in result.returns]
    lengths = [int(n) for n in result.lengths]
    report = {
        "run_dir": str(args.run_dir),
        "algo": s.algo.name,
        "env_id": s.env.id,
        "weights": args.weights,
        "weights_path": str(loaded.weights_path),
        "episodes": len(returns),
        "num_envs": min(s.env.num_test_envs, args.episodes),
        "seed": seed,
        "deterministic": True,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "returns": returns,
        "lengths": lengths,
        "video_dir": None if args.video is None else str(args.video),
    }
    return report


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    from rltrain.config import ConfigError

    try:
        r = run(args)
    except (ConfigError, UserError) as e:
        print(f"rltrain-eval: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"rltrain-eval: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("rltrain-eval: interrupted", file=sys.stderr)
        sys.exit(130)
    returns = np.asarray(r["returns"])
    print(f"{r['algo']} on {r['env_id']}, {r['weights']} weights ({r['weights_path']}), "
          f"{r['episodes']} deterministic episodes on {r['num_envs']} envs, seed {r['seed']}")
    print(f"return {r['return_mean']:.2f} ± {r['return_std']:.2f} "
          f"(min {returns.min():.2f}, max {returns.max():.2f}), "
          f"mean episode length {r['length_mean']:.1f}")
    if r["video_dir"] is not None:
        print(f"videos in {r['video_dir']}")
    path = args.run_dir / "eval.json"
    try:
        write_json(r, path)
    except OSError as e:  # a read-only run: the result above is not lost, only not saved
        print(f"rltrain-eval: error: could not write {path}: {e.strerror or short(e)}",
              file=sys.stderr)
        sys.exit(2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
