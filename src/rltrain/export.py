"""``rltrain-export RUN_DIR``: a run's policy as an ONNX graph, checked against torch.

The graph is the run's deployable policy (``Algorithm.deployable``), whatever the algorithm: a
batch of raw observations ``obs`` (float32 ``[batch, *obs_shape]``; an image as the env gives
it, uint8; a Dict observation as one input per key, named after it) through the observation
normaliser (when the run normalised observations), the actor network and its head, to the
deterministic actions ``action`` the env receives: the argmax for discrete actions (int64,
``[batch]``), the actor's output clipped to [-1, 1] and scaled to the env's bounds for
continuous ones (float32, ``[batch, *action_shape]``). It is written with torch.onnx's
TorchScript exporter (``dynamo=False``), which needs ``onnx`` but not ``onnxscript``;
onnxruntime then runs it on random observations and the actions are compared with the torch
policy's.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rltrain.config import ConfigError
from rltrain.evaluate import (
    TRUST_HELP,
    WEIGHT_FILES,
    ArgumentParser,
    LoadedRun,
    UserError,
    load_run,
    require,
)
from rltrain.files import fresh
from rltrain.observations import TORCH_DTYPES, layout, raw_tensors
from rltrain.streams import clip_long_words, os_error_text

OPSET = 17
#: random check observations are drawn uniformly from the observation space, with
#: infinite (or huge) bounds clamped to +-OBS_BOUND
OBS_BOUND = 10.0
NUM_CHECK = 256
#: float32 maths differs slightly between torch and onnxruntime
RTOL, ATOL = 1e-4, 1e-5


def graph_inputs(info: Any) -> list[tuple[str, tuple[int, ...], np.dtype, gym.Space]]:
    """The graph's inputs: ``obs`` (float32 vectors; images as the env gives them, uint8), or
    one input per key of a Dict observation, named after the key, at its stored dtype."""
    space = info.obs_space
    packing = layout(space)
    if packing is None:
        dtype = np.dtype(np.uint8) if raw_tensors(space) else np.dtype(np.float32)
        return [("obs", tuple(info.obs_shape), dtype, space)]
    out = []
    for key in packing.keys:
        field = packing.dtype.fields[key][0]  # type: ignore[index]
        out.append((key, tuple(field.shape), field.base, packing.spaces[key]))
    return out


def export_onnx(loaded: LoadedRun, out: Path) -> None:
    """Write the deterministic actor to ``out`` (atomically), with run metadata."""
    import onnx  # the export extra, checked by main() with a message before this runs
    import torch  # 0.9 s to import, which rltrain-export --help and argument errors skip

    actor = loaded.policy.cpu().eval()
    inputs = graph_inputs(loaded.info)
    example = tuple(torch.zeros((2, *shape), dtype=TORCH_DTYPES[np.dtype(dtype)])
                    for _, shape, dtype, _ in inputs)
    names = [name for name, *_ in inputs]
    kwargs: dict[str, Any] = dict(
        input_names=names,
        output_names=["action"],
        dynamic_axes={**{name: {0: "batch"} for name in names}, "action": {0: "batch"}},
        opset_version=OPSET,
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        # torch >= 2.9 defaults to the torch.export-based exporter, which also needs onnxscript
        kwargs["dynamo"] = False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = fresh(out.with_name(f".{out.name}.tmp"))
    with warnings.catch_warnings():
        # "legacy TorchScript-based ONNX export" deprecation notices
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(actor, example, str(tmp), **kwargs)
    model = onnx.load(str(tmp))
    s, info = loaded.settings, loaded.info
    meta = {
        "producer": "rltrain-export",
        "algo": loaded.settings.algo.name,
        "env_id": s.env.id,
        "weights": loaded.weights,
        "weights_path": str(loaded.weights_path),
        "obs_shape": str(list(info.obs_shape)),
        "inputs": ", ".join(describe(i) for i in inputs),
        "action": f"Discrete({info.num_actions})" if info.discrete else
                  f"Box{info.action_shape} in [{info.action_low.tolist()}, "
                  f"{info.action_high.tolist()}]",
    }
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    onnx.save(model, str(fresh(tmp)))
    os.replace(tmp, out)


def describe(graph_input: tuple[str, tuple[int, ...], np.dtype, gym.Space]) -> str:
    name, shape, dtype, _ = graph_input
    return f"{name} {np.dtype(dtype).name}[{', '.join(['batch', *map(str, shape)])}]"


def _draw(space: gym.Space, shape: tuple[int, ...], dtype: np.dtype, n: int,
          rng: np.random.Generator) -> np.ndarray:
    """``n`` values of one input drawn uniformly from its space (bounds clamped)."""
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, size=n).astype(dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return rng.integers(space.start, space.start + space.nvec, size=(n, *shape)).astype(dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return rng.integers(0, 2, size=(n, *shape)).astype(dtype)
    if not isinstance(space, gym.spaces.Box):
        raise UserError(f"the check cannot draw observations from {space}")
    if np.dtype(dtype).kind in "ub":  # images: every integer in the bounds, the env's dtype
        low, high = (np.broadcast_to(b, shape).astype(np.int64) for b in (space.low, space.high))
        return rng.integers(low, high + 1, size=(n, *shape)).astype(dtype)
    low = np.clip(np.asarray(space.low, dtype=np.float64), -OBS_BOUND, OBS_BOUND)
    high = np.clip(np.asarray(space.high, dtype=np.float64), -OBS_BOUND, OBS_BOUND)
    return rng.uniform(low, high, size=(n, *shape)).astype(dtype)


def check_observations(loaded: LoadedRun, n: int = NUM_CHECK, seed: int = 0
                       ) -> dict[str, np.ndarray]:
    """``n`` observations drawn uniformly from the run's observation space, per graph input."""
    rng = np.random.default_rng(seed)
    return {name: _draw(space, shape, dtype, n, rng)
            for name, shape, dtype, space in graph_inputs(loaded.info)}


def compare(loaded: LoadedRun, path: Path, obs: dict[str, np.ndarray]) -> tuple[bool, str]:
    """Run the ONNX graph with onnxruntime and compare with the torch policy's actions."""
    import onnxruntime as ort  # the export extra, checked by main() with a message first
    import torch

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["action"], obs)[0]
    with torch.inference_mode():
        want = loaded.policy(*(torch.from_numpy(a) for a in obs.values())).numpy()
    info = loaded.info
    n = len(next(iter(obs.values())))
    if got.shape != want.shape:
        return False, f"action shape {got.shape} from ONNX, {want.shape} from torch"
    if info.discrete:
        same = int((got == want).sum())
        return same == n, f"argmax actions identical on {same}/{n}"
    close = np.isclose(got, want, rtol=RTOL, atol=ATOL).reshape(n, -1).all(-1)
    diff = float(np.abs(got - want).max())
    return bool(close.all()), (f"actions allclose on {int(close.sum())}/{n} "
                               f"(max |diff| {diff:.1e}, rtol {RTOL:g}, atol {ATOL:g})")


def check_out(out: Path, run_dir: Path) -> None:
    """Refuse an ``--out`` that would overwrite something that is not an ONNX graph: above
    all, the run's own weights, checkpoints and records."""
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; pass a file path such as "
                        f"{out / 'policy.onnx'}")
    inside_run = run_dir.is_dir() and out.resolve().is_relative_to(run_dir.resolve())
    if out.suffix != ".onnx" and (out.exists() or inside_run):
        what = "a file of the run" if inside_run else "an existing file"
        raise UserError(f"--out {out} is {what}, not an .onnx file; refusing to overwrite it "
                        "(name the output PATH.onnx)")


def parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="rltrain-export",
        description="Export a run's policy to ONNX (observations -> deterministic actions) and "
        "check it with onnxruntime against the torch policy. Needs the 'export' extra.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                   help="a run directory written by rltrain (holds .hydra/config.yaml)")
    p.add_argument("--weights", choices=tuple(WEIGHT_FILES), default="best",
                   help="best/policy.pt, final/policy.pt or the policy in checkpoints/last.pt "
                   "(default: best)")
    p.add_argument("--out", type=Path, default=None, metavar="PATH",
                   help="the ONNX file to write (default: next to the weights: "
                   "RUN_DIR/best/policy.onnx, RUN_DIR/final/policy.onnx or "
                   "RUN_DIR/checkpoints/last.onnx)")
    p.add_argument("--trust", action="store_true", help=TRUST_HELP)
    return p


def default_out(run_dir: Path, weights: str) -> Path:
    """Where an export goes unless ``--out`` says: next to the weights it was made from, so
    that the best policy's graph is never taken for the final one's."""
    return run_dir / WEIGHT_FILES[weights].with_suffix(".onnx")


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    out = args.out if args.out is not None else default_out(args.run_dir, args.weights)
    try:
        require(["onnx", "onnxruntime"], "rltrain-export", "export")
        check_out(out, args.run_dir)
        loaded = load_run(args.run_dir, args.weights, device="cpu", consent=args.trust)
        try:
            export_onnx(loaded, out)
        except OSError as e:
            hint = "" if args.out is not None else "; pass --out PATH to write it elsewhere"
            raise UserError(f"could not write {out}: {e.strerror or e}{hint}") from None
        ok, detail = compare(loaded, out, check_observations(loaded))
    except (ConfigError, UserError) as e:
        print(f"rltrain-export: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"rltrain-export: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)
    info = loaded.info
    action = (f"int64[batch] (argmax of {info.num_actions})" if info.discrete else
              f"float32[batch, {', '.join(map(str, info.action_shape))}] (in the env's "
              "bounds)")
    print(f"exported the {loaded.settings.algo.name} policy for {info.env_id} "
          f"({args.weights} weights, {loaded.weights_path}) to {out} "
          f"(ONNX opset {OPSET}, {out.stat().st_size:,} bytes)")
    inputs = ", ".join(describe(i) for i in graph_inputs(info))
    print(f"graph: {inputs} -> action {action}")
    if not ok:
        print(f"rltrain-export: error: onnxruntime check failed on {NUM_CHECK} random "
              f"observations: {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"onnxruntime check on {NUM_CHECK} random observations: ONNX matches torch, {detail}")


if __name__ == "__main__":
    main()
