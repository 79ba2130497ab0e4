"""``rltrain-eval RUN_DIR``: test a trained policy again, away from training.

The run is opened through the one door into a run (:func:`rltrain.assembly.orchestrator.open_run`:
the algorithm rebuilt from the run's stored config, ``.hydra/config.yaml``, with the chosen
weights loaded into its policy network), and N deterministic episodes run
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
import contextlib
import importlib
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from rltrain.common.errors import UserError
from rltrain.process.streams import clip_long_words, os_error_text, short
from rltrain.rundir.files import WEIGHT_FILES, write_new

if TYPE_CHECKING:
    from rltrain.assembly.orchestrator import LoadedRun

#: the default evaluation seed is this plus the run's seed; the run's own env seeds are
#: ``[seed, seed + num_train_envs + num_test_envs)``, far below it
SEED_OFFSET = 10_000


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
    from rltrain.config.schemas import MAX_SEED

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


@contextlib.contextmanager
def refusals(prog: str) -> Iterator[None]:
    """What the user can fix, raised in the block (a ConfigError, a UserError, a path the
    system refuses), ends the command ``prog`` with one line on stderr and exit status 2;
    the companion commands share it."""
    from rltrain.config.schemas import ConfigError

    try:
        yield
    except (ConfigError, UserError) as e:
        print(f"{prog}: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"{prog}: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)


def default_seed(run_seed: int) -> int:
    return SEED_OFFSET + run_seed


def make_video_env(env_cfg: Any, quotas: np.ndarray, folder: Path) -> Any:
    """The run's env from the one env factory (same-step sync vector env, its wrappers),
    with sub-env i wrapped last in gymnasium's RecordVideo, recording its first
    ``quotas[i]`` episodes, i.e. exactly the episodes that count:
    ``env{i}-episode-{k}.mp4`` in ``folder``."""
    import gymnasium as gym
    from gymnasium.wrappers import RecordVideo

    from rltrain.envs.vector import make_vector_env
    from rltrain.envs.wrappers import watchable

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
    from rltrain.assembly.build import seed_everything
    from rltrain.data.collector import Collector, episode_quotas
    from rltrain.envs.vector import make_vector_env

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
    from rltrain.assembly.orchestrator import open_run

    loaded = open_run(args.run_dir, args.weights, consent=args.trust)
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
    try:
        with refusals("rltrain-eval"):
            r = run(args)
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
