"""``rltrain-collect``: offline-RL datasets from trained policies, random policies, replay
buffers, or other datasets.

::

    rltrain-collect RUN_DIR --episodes N [--weights best|final|last] [--noise X] --out data.h5
    rltrain-collect RUN_DIR --steps N ... --out data.h5
    rltrain-collect --random --env ENV_ID [--env-kwargs JSON] --episodes N --out random.h5
    rltrain-collect RUN_DIR --random --steps N --out random.h5
    rltrain-collect RUN_DIR --buffer --out replay.h5
    rltrain-collect --merge a.h5 b.npz --out mixed.h5

A trained policy is the run's deployable policy (what ``rltrain-eval`` runs: raw
observations in, the env's actions out), rebuilt from the run's config; it acts on fresh
envs from the one env factory (the run's id, kwargs and wrappers), seeded with ``--seed``
(default ``20000 +`` the run's seed, apart from its train, test and eval seeds). The same
command gives the same transitions. The collector writes the transitions, so an episode's
last ``next_obs`` is its true final observation under either autoreset mode.

``--episodes N`` splits the episodes over the envs in fixed quotas (as a test step does) and
keeps each env's first episodes whole; ``--steps N`` keeps each env's first transitions, its
last episode marked truncated where the collection cut it.

rltrain's own modules are imported inside the functions that need them, after the arguments
are parsed: they import torch and gymnasium (1.1 s here), and ``rltrain-collect --help`` or a
wrong argument then answers in 0.08 s.

The package: this module is the command (arguments, their checks, the report, signals);
``sources`` makes the dataset from what the arguments name, ``recording`` collects and writes
it. Each imports only those after it.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rltrain.commands.collect.sources import (
    DEFAULT_NUM_ENVS,
    SEED_OFFSET,
    from_buffer,
    from_merge,
    from_policy,
)
from rltrain.commands.evaluate import (
    TRUST_HELP,
    ArgumentParser,
    _int_at_least,
    positive_int,
    refusals,
    seed_int,
)
from rltrain.common.errors import UserError
from rltrain.process.streams import short
from rltrain.rundir.files import WEIGHT_FILES


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="rltrain-collect",
        description="Write an offline-RL dataset (.h5, .hdf5 or .npz): episodes of a trained "
        "run's policy (optionally noisy) or of a random policy on fresh seeded envs, an "
        "off-policy run's replay buffer, or several datasets merged.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  rltrain-collect RUN_DIR --episodes 100 --noise 0.1 --out expert.h5\n"
        "  rltrain-collect RUN_DIR --steps 100000 --weights last --out medium.h5\n"
        "  rltrain-collect --random --env Pendulum-v1 --steps 100000 --out random.h5\n"
        "  rltrain-collect RUN_DIR --buffer --out replay.h5\n"
        "  rltrain-collect --merge expert.h5 random.h5 --out mixed.h5",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, nargs="?",
                   help="a run directory written by rltrain (holds .hydra/config.yaml)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the dataset to write: .h5 or .hdf5 (HDF5, compressed) or .npz")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--trust", action="store_true", help=TRUST_HELP)
    size = p.add_argument_group("how much (one of)")
    size.add_argument("--episodes", type=positive_int, default=None, metavar="N",
                      help="N whole episodes, in fixed per-env quotas")
    size.add_argument("--steps", type=positive_int, default=None, metavar="N",
                      help="N transitions (each env's last episode may be cut: marked "
                      "truncated)")
    pol = p.add_argument_group("policy")
    pol.add_argument("--weights", choices=tuple(WEIGHT_FILES), default=None,
                     help="the run's best/policy.pt, final/policy.pt, or the policy in "
                     "checkpoints/last.pt (default: best)")
    pol.add_argument("--noise", type=non_negative_float, default=0.0, metavar="X",
                     help="exploration: Gaussian noise of std X times half the action range "
                     "(continuous, clipped to the bounds) or epsilon-greedy with epsilon X "
                     "(discrete); default 0: the deterministic policy")
    pol.add_argument("--random", action="store_true",
                     help="a uniform random policy, on RUN_DIR's env or on --env")
    pol.add_argument("--env", metavar="ENV_ID", default=None,
                     help="with --random and no RUN_DIR: any gymnasium env id "
                     "(module:Env-v0 imports the module first)")
    pol.add_argument("--env-kwargs", metavar="JSON", default=None,
                     help="with --env: the env's keyword arguments as a JSON object")
    pol.add_argument("--seed", type=seed_int, default=None, metavar="S",
                     help=f"seed of the envs and the noise (default: {SEED_OFFSET} + the run's "
                     "seed; 20000 with --env)")
    pol.add_argument("--num-envs", type=_int_at_least(1, "positive"), default=None,
                     metavar="M", help="envs stepped together (default: the run's "
                     f"env.num_train_envs, {DEFAULT_NUM_ENVS} with --env; at most --episodes)")
    other = p.add_argument_group("other sources")
    other.add_argument("--buffer", action="store_true",
                       help="export RUN_DIR's replay buffer from its newest checkpoint "
                       "(off-policy runs with trainer.checkpoint_buffer=true)")
    other.add_argument("--merge", nargs="+", metavar="DATASET", default=None,
                       help="concatenate datasets of the same spaces (files or minari:ID)")
    return p


def check_args(p: ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations of flags that do not go together: the parser's one-line error."""
    given = [flag for flag, on in (("--episodes", args.episodes is not None),
                                   ("--steps", args.steps is not None),
                                   ("--weights", args.weights is not None),
                                   ("--noise", bool(args.noise)), ("--random", args.random),
                                   ("--env", args.env is not None),
                                   ("--env-kwargs", args.env_kwargs is not None),
                                   ("--seed", args.seed is not None),
                                   ("--num-envs", args.num_envs is not None)) if on]
    if args.merge is not None or args.buffer:
        mode = "--merge" if args.merge is not None else "--buffer"
        if args.merge is not None and args.buffer:
            p.error("--merge and --buffer are different sources; pass one")
        if args.merge is not None and args.run_dir is not None:
            p.error(f"--merge takes datasets, not RUN_DIR ({args.run_dir}); put every dataset "
                    "after --merge")
        if args.buffer and args.run_dir is None:
            p.error("--buffer needs RUN_DIR, the off-policy run whose replay buffer to export")
        if given:
            p.error(f"{given[0]} does not apply to {mode}")
        return
    if args.env_kwargs is not None and args.env is None:
        p.error("--env-kwargs goes with --env")
    if args.env is not None:
        if not args.random:
            p.error("--env collects with a random policy: add --random (a trained policy "
                    "acts on its own run's env: pass RUN_DIR)")
        if args.run_dir is not None:
            p.error("pass RUN_DIR or --env, not both (with RUN_DIR, --random uses the run's env)")
    if args.run_dir is None and args.env is None:
        p.error("pass RUN_DIR (a trained run), --random --env ENV_ID, or --merge DATASET ...")
    if args.random and (args.weights is not None or args.noise):
        p.error(f"{'--weights' if args.weights is not None else '--noise'} does not apply to "
                "--random")
    if (args.episodes is None) == (args.steps is None):
        p.error("pass exactly one of --episodes N and --steps N")


def check_paths(args: argparse.Namespace) -> None:
    """--out and RUN_DIR, checked before any work."""
    from rltrain.data.datasets.files import SUFFIXES

    out: Path = args.out
    if out.suffix.lower() not in SUFFIXES:
        shown = f"suffix {out.suffix!r}" if out.suffix else "no suffix"
        raise UserError(f"--out {out} has {shown}; a dataset is written as .h5, .hdf5 (HDF5) "
                        "or .npz (numpy)")
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; name the dataset file to write")
    if out.exists() and not args.force:
        raise UserError(f"--out {out} exists; pass --force to replace it, or choose another "
                        "file")
    run_dir = args.run_dir
    if run_dir is not None and not (run_dir / ".hydra" / "config.yaml").is_file():
        # what load_run_settings says, before the seconds it takes to import torch
        what = "is not a directory" if not run_dir.is_dir() else "has no .hydra/config.yaml"
        raise UserError(f"{run_dir} {what}; pass a run directory written by rltrain")


def report(ds: Any, how: str, out: Path) -> None:
    """One screen: what was collected, the returns, the fields beside each transition (where
    it holds any), the file."""
    from rltrain.data.datasets.dataset import fields_text
    from rltrain.data.datasets.files import size_text

    s = ds.summary()
    cut = int((ds.truncated & ~ds.terminated).sum())
    print(f"{ds.meta.get('env_id')}: {s['transitions']:,} transitions, {s['episodes']:,} "
          f"episodes ({s['terminated']:,} terminated, {cut:,} truncated), from {how}")
    if s["episodes"]:
        print(f"return {s['return_mean']:.2f} ± {s['return_std']:.2f} (min "
              f"{s['return_min']:.2f}, max {s['return_max']:.2f}), mean episode length "
              f"{s['length_mean']:.1f}")
    if ds.fields:
        print(f"fields beside each transition: {fields_text(ds.declared)}")
    print(f"wrote {out} ({size_text(out.stat().st_size)})")


def run(args: argparse.Namespace) -> None:
    from rltrain.common.errors import NonFiniteError
    from rltrain.data.datasets.files import save_dataset

    check_paths(args)
    try:
        if args.merge is not None:
            ds, how = from_merge(args)
        elif args.buffer:
            ds, how = from_buffer(args)
        else:
            ds, how = from_policy(args)
    except NonFiniteError as e:
        raise UserError(f"collection stopped: {e}") from None
    # compressing a large dataset takes a while: say what is going on
    print(f"writing {args.out} ({len(ds):,} transitions)", flush=True)
    try:
        save_dataset(ds, args.out)
    except OSError as e:
        raise UserError(f"could not write {args.out}: {e.strerror or short(e)}") from None
    report(ds, how, args.out)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop as Ctrl-C does, removing what was half written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(signum)


def main(argv: Sequence[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    check_args(p, args)
    # the default action of SIGTERM ends the process at once, leaving a half-written file
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _stop)
    try:
        with refusals("rltrain-collect"):
            run(args)
    except KeyboardInterrupt as e:
        try:
            kept = f" ({args.out} is as it was)" if args.out.is_file() else ""
        except OSError:
            kept = ""
        print(f"rltrain-collect: interrupted; nothing was written{kept}", file=sys.stderr)
        sys.exit(128 + (e.signum if isinstance(e, Stopped) else signal.SIGINT))


if __name__ == "__main__":
    main()
