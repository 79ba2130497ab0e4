"""``rltrain-export RUN_DIR``: a run's policy as an ONNX graph, checked against torch.

The graph is the run's deployable policy (``Algorithm.deployable``), whatever the algorithm: a
batch of raw observations ``obs`` (float32 ``[batch, *obs_shape]``; an image as the env gives
it, uint8; a Dict observation as one input per key, named after it) through the observation
normaliser (when the run normalised observations), the actor network and its head, to the
deterministic actions ``action`` the env receives: the argmax for discrete actions (int64,
``[batch]``; of each entry for MultiDiscrete and MultiBinary ones, ``[batch, *action_shape]``),
the actor's output clipped to [-1, 1] and scaled to the env's bounds for continuous ones
(float32, ``[batch, *action_shape]``). It is written with torch.onnx's TorchScript exporter
(``dynamo=False``), which needs ``onnx`` but not ``onnxscript``; onnxruntime then runs it on
random observations and the actions are compared with the torch policy's.

A policy with memory (``algo=ppo_lstm``) takes and returns its state as well: inputs the
observation(s), then ``h`` (and an LSTM's ``c``), float32 ``[batch, hidden]``, zeros at an
episode's start; outputs ``action``, then ``h_next`` (and ``c_next``), to feed back at the next
step. Its check runs whole episodes of the run's env instead: torch and onnxruntime each
thread their own state through every step (zeros at each episode's start), and their actions
and states must agree at every step, so that an error that only builds up over steps shows.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rltrain.commands.evaluate import TRUST_HELP, ArgumentParser, refusals, require
from rltrain.common.errors import UserError
from rltrain.process import signals
from rltrain.rundir.files import WEIGHT_FILES, fresh, replacing
from rltrain.spaces.observations import TORCH_DTYPES, layout, raw_tensors

if TYPE_CHECKING:
    from rltrain.assembly.orchestrator import LoadedRun

OPSET = 17
#: random check observations are drawn uniformly from the observation space, with
#: infinite (or huge) bounds clamped to +-OBS_BOUND
OBS_BOUND = 10.0
NUM_CHECK = 256
#: float32 maths differs slightly between torch and onnxruntime
RTOL, ATOL = 1e-4, 1e-5
#: a recurrent policy's check: episodes over CHECK_ENVS envs, at most CHECK_STEPS vector steps
CHECK_EPISODES, CHECK_ENVS, CHECK_STEPS = 4, 2, 2000


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


def state_inputs(loaded: LoadedRun) -> list[tuple[str, int]]:
    """A recurrent policy's state inputs (name, width), after the observations; none for a
    policy without memory."""
    if not loaded.recurrent:
        return []
    policy = loaded.policy
    return [(name, policy.state_size) for name in policy.state_names]


def state_outputs(loaded: LoadedRun) -> list[str]:
    """The next state's outputs, after ``action``: each state input's name + ``_next``."""
    return [f"{name}_next" for name, _ in state_inputs(loaded)]


def export_onnx(loaded: LoadedRun, out: Path) -> None:
    """Write the deterministic actor to ``out`` (atomically), with run metadata."""
    import onnx  # the export extra, checked by main() with a message before this runs
    import torch  # 0.9 s to import, which rltrain-export --help and argument errors skip

    actor = loaded.policy.cpu().eval()
    inputs = graph_inputs(loaded.info)
    state = state_inputs(loaded)
    example = tuple(torch.zeros((2, *shape), dtype=TORCH_DTYPES[np.dtype(dtype)])
                    for _, shape, dtype, _ in inputs)
    example += tuple(torch.zeros(2, width) for _, width in state)
    names = [name for name, *_ in inputs] + [name for name, _ in state]
    outputs = ["action", *state_outputs(loaded)]
    if state:  # the graph of one step: observations and state in, action and next state out
        actor = stepping(actor)
    kwargs: dict[str, Any] = dict(
        input_names=names,
        output_names=outputs,
        dynamic_axes={name: {0: "batch"} for name in names + outputs},
        opset_version=OPSET,
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        # torch >= 2.9 defaults to the torch.export-based exporter, which also needs onnxscript
        kwargs["dynamo"] = False
    out.parent.mkdir(parents=True, exist_ok=True)
    # written to .NAME.tmp beside out and renamed over it when whole: a full disk, an error
    # or a signal on the way removes the temporary file, and out is as it was
    with replacing(out) as tmp:
        with warnings.catch_warnings():
            # "legacy TorchScript-based ONNX export" deprecation notices
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(actor, example, str(tmp), **kwargs)
        model = onnx.load(str(tmp))
        onnx.helper.set_model_props(model, graph_metadata(loaded, inputs, state))
        onnx.checker.check_model(model)
        onnx.save(model, str(fresh(tmp)))


def graph_metadata(loaded: LoadedRun, inputs: list[tuple[str, tuple[int, ...], np.dtype,
                                                        gym.Space]],
                   state: list[tuple[str, int]]) -> dict[str, str]:
    """What the exported graph says about itself: the run it comes from, its inputs, the
    state a recurrent policy threads, its action."""
    s, info = loaded.settings, loaded.info
    return {
        "producer": "rltrain-export",
        "algo": loaded.settings.algo.name,
        "env_id": s.env.id,
        "weights": loaded.weights,
        "weights_path": str(loaded.weights_path),
        "obs_shape": str(list(info.obs_shape)),
        "inputs": ", ".join([*(describe(i) for i in inputs),
                             *(f"{name} float32[batch, {width}]" for name, width in state)]),
        **({"state": f"{', '.join(name for name, _ in state)}: zeros at an episode's start; "
                     f"feed {', '.join(state_outputs(loaded))} back at the next step"}
           if state else {}),
        "action": info.actions_text if info.discrete else
                  f"Box{info.action_shape} in [{info.action_low.tolist()}, "
                  f"{info.action_high.tolist()}]",
    }


def stepping(policy: Any) -> Any:
    """A recurrent deployable policy as a module whose forward is its ``step`` (what the
    exporter traces: observations and state in, action and next state out)."""
    from torch import nn  # imported here, as torch is everywhere in this module

    class Stepping(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy

        def forward(self, *inputs: Any) -> Any:
            return self.policy.step(*inputs)

    return Stepping()


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
    if info.discrete:  # an action is identical when every entry is
        same = int((got == want).reshape(n, -1).all(-1).sum())
        return same == n, f"argmax actions identical on {same}/{n}"
    close = np.isclose(got, want, rtol=RTOL, atol=ATOL).reshape(n, -1).all(-1)
    diff = float(np.abs(got - want).max())
    return bool(close.all()), (f"actions allclose on {int(close.sum())}/{n} "
                               f"(max |diff| {diff:.1e}, rtol {RTOL:g}, atol {ATOL:g})")


def compare_episodes(loaded: LoadedRun, path: Path, episodes: int = CHECK_EPISODES,
                     max_steps: int = CHECK_STEPS, seed: int = 0) -> tuple[bool, str]:
    """A recurrent policy's graph against torch over whole episodes of the run's env (its
    test envs, ``CHECK_ENVS`` of them, seeded): torch and onnxruntime each thread their own
    state through every step, a collector zeroing both at each episode's start, and torch's
    actions step the envs. Every step's actions must agree (discrete: identical; continuous:
    allclose) and so must the next states (allclose)."""
    import onnxruntime as ort  # the export extra, checked by main() with a message first
    import torch

    from rltrain.algorithms.base import policy_inputs
    from rltrain.data.collector import CollectionStopped, Collector
    from rltrain.envs.vector import make_vector_env
    from rltrain.nets.recurrent import RecurrentPolicy

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    policy, info = loaded.policy, loaded.info
    names = [name for name, *_ in graph_inputs(info)]
    size, width = policy.state_size, policy.state_size * len(policy.state_names)
    tally = {"steps": 0, "same": 0, "ended": 0, "action": 0.0, "state": 0.0, "states_ok": True}

    def step(obs: np.ndarray, state: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        inputs = policy_inputs(info, obs)
        action, *after = policy.step(*inputs, *state[:, :width].split(size, -1))
        feed = {name: x.numpy() for name, x in zip(names, inputs, strict=True)}
        feed.update({name: np.ascontiguousarray(part.numpy()) for name, part in
                     zip(policy.state_names, state[:, width:].split(size, -1), strict=True)})
        got, *got_after = session.run(None, feed)
        want, want_after = action.numpy(), torch.cat(after, -1).numpy()
        got_state = np.concatenate(got_after, -1)
        n = len(obs)
        if info.discrete:
            same = (got == want).reshape(n, -1).all(-1)
        else:
            same = np.isclose(got, want, rtol=RTOL, atol=ATOL).reshape(n, -1).all(-1)
            tally["action"] = max(tally["action"], float(np.abs(got - want).max()))
        tally["same"] += int(same.sum())
        tally["steps"] += n
        tally["state"] = max(tally["state"], float(np.abs(got_state - want_after).max()))
        tally["states_ok"] = tally["states_ok"] and bool(
            np.isclose(got_state, want_after, rtol=RTOL, atol=ATOL).all())
        return want, torch.cat((torch.from_numpy(want_after), torch.from_numpy(got_state)), -1)

    def ended(rew: np.ndarray, done: np.ndarray, valid: np.ndarray | None) -> None:
        tally["ended"] += int((done if valid is None else done & valid).sum())

    num_envs = min(CHECK_ENVS, episodes)
    envs = make_vector_env(loaded.settings.env, num_envs)
    try:
        collector = Collector(envs, on_step=ended)
        collector.reset(seed=seed)
        with contextlib.suppress(CollectionStopped):  # at the step cap: what ran is checked
            collector.collect(RecurrentPolicy(step, 2 * width), n_episodes=episodes, quota=True,
                              should_stop=lambda: tally["steps"] >= max_steps * num_envs)
    finally:
        envs.close()
    vector_steps = tally["steps"] // num_envs
    same, total = tally["same"], tally["steps"]
    what = ("argmax actions identical" if info.discrete else
            f"actions allclose (max |diff| {tally['action']:.1e})")
    ok = same == total and bool(tally["states_ok"])
    return ok, (f"{vector_steps:,} steps of {num_envs} envs ({tally['ended']} episodes ended, "
                f"each env's state threaded by each side): {what} on {same:,}/{total:,}, "
                f"states max |diff| {tally['state']:.1e} (rtol {RTOL:g}, atol {ATOL:g})")


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
    # Ctrl-C, SIGTERM and SIGHUP end the command by an exception, so that a graph being
    # written is removed on the way out (SIGTERM's default would end it on the spot)
    signals.startup()
    try:
        _export(args)
    except signals.EarlyStop as e:
        print(f"rltrain-export: stopped by {signals.name(e.signum)} (nothing half-written is "
              "left)", file=sys.stderr)
        sys.exit(128 + e.signum)


def _export(args: argparse.Namespace) -> None:
    out = args.out if args.out is not None else default_out(args.run_dir, args.weights)
    with refusals("rltrain-export"):
        require(["onnx", "onnxruntime"], "rltrain-export", "export")
        check_out(out, args.run_dir)
        from rltrain.assembly.orchestrator import open_run

        loaded = open_run(args.run_dir, args.weights, device="cpu", consent=args.trust)
        try:
            export_onnx(loaded, out)
        except OSError as e:
            hint = "" if args.out is not None else "; pass --out PATH to write it elsewhere"
            raise UserError(f"could not write {out}: {e.strerror or e}{hint}") from None
        if loaded.recurrent:
            ok, detail = compare_episodes(loaded, out)
        else:
            ok, detail = compare(loaded, out, check_observations(loaded))
    info = loaded.info
    action = (f"int64[batch] (argmax of {info.num_actions})" if info.num_actions else
              f"int64[batch, {', '.join(map(str, info.action_shape))}] (argmax per entry of "
              f"{info.actions_text})" if info.discrete else
              f"float32[batch, {', '.join(map(str, info.action_shape))}] (in the env's "
              "bounds)")
    print(f"exported the {loaded.settings.algo.name} policy for {info.env_id} "
          f"({args.weights} weights, {loaded.weights_path}) to {out} "
          f"(ONNX opset {OPSET}, {out.stat().st_size:,} bytes)")
    state = state_inputs(loaded)
    inputs = ", ".join([*(describe(i) for i in graph_inputs(info)),
                        *(f"{name} float32[batch, {width}]" for name, width in state)])
    nexts = "".join(f", {name} float32[batch, {width}]"
                    for name, (_, width) in zip(state_outputs(loaded), state, strict=True))
    print(f"graph: {inputs} -> action {action}{nexts}"
          + (" (the state: zeros at an episode's start, then the step's next state)"
             if state else ""))
    checked = ("over whole episodes" if state else
               f"on {NUM_CHECK} random observations")
    if not ok:
        print(f"rltrain-export: error: onnxruntime check failed {checked}: {detail}",
              file=sys.stderr)
        sys.exit(1)
    print(f"onnxruntime check {checked}: ONNX matches torch, {detail}")


if __name__ == "__main__":
    main()
