"""`rltrain-eval` and `rltrain-export`: the installed console scripts in real processes where
a process shows what is checked (an export as a user runs it, the one-line error and exit
status, a missing extra, what a video's encoder prints), their own functions in this process
for the rest; on smoke runs made once, in this process.

The 'export' and 'video' extras are part of the 'test' extra, so a missing onnx,
onnxruntime, moviepy or pygame makes these tests fail, never skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import command, run_in_process, tmpfs
from rltrain.commands import evaluate, export

BIN = Path(sys.executable).parent
EVAL = BIN / "rltrain-eval"
EXPORT = BIN / "rltrain-export"

#: run name -> rltrain overrides: a discrete (DQN, CartPole) and a continuous (PPO, Pendulum) run
RUNS = {
    "cartpole": ("algo=dqn", "env=cartpole"),
    "pendulum": ("algo=ppo", "env=gym", "env.id=Pendulum-v1"),
}
SUMMARY = re.compile(r"return (-?\d+\.\d+) ± (\d+\.\d+) .*mean episode length (\d+\.\d+)")


def tool(script: Path, *args: str | Path, cwd: Path, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(script), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=full_env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    for name, args in RUNS.items():
        run_in_process(root / name, "experiment=smoke", *args, "logger.tensorboard=false")
    return {name: root / name for name in RUNS}


def assert_one_line_error(result: subprocess.CompletedProcess, prog: str, *needles: str) -> None:
    assert result.returncode != 0
    err = result.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: "), err
    for needle in needles:
        assert needle in err, err


# ---- rltrain-eval


def test_eval_best_final_last(runs: dict[str, Path], tmp_path: Path) -> None:
    run = runs["cartpole"]
    reports = {}
    for weights in ("best", "final", "last"):
        result = command(evaluate.main, run, "--weights", weights, "--episodes", "3")
        assert result.returncode == 0, result.stderr
        match = SUMMARY.search(result.stdout)
        assert match, result.stdout
        report = json.loads((run / "eval.json").read_text())
        assert report["weights"] == weights
        assert report["episodes"] == len(report["returns"]) == len(report["lengths"]) == 3
        assert report["seed"] == 10_000  # 10_000 + the run's seed (0)
        assert report["return_mean"] == pytest.approx(np.mean(report["returns"]))
        assert report["return_std"] == pytest.approx(np.std(report["returns"]))
        assert report["length_mean"] == pytest.approx(np.mean(report["lengths"]))
        # CartPole pays 1 per step
        assert report["returns"] == [float(n) for n in report["lengths"]]
        assert float(match[1]) == pytest.approx(report["return_mean"], abs=0.005)
        assert float(match[2]) == pytest.approx(report["return_std"], abs=0.005)
        reports[weights] = report
    # the run ended normally: checkpoints/last.pt holds the final policy
    assert reports["last"]["returns"] == reports["final"]["returns"]


def test_eval_continuous_seed(runs: dict[str, Path], tmp_path: Path) -> None:
    run = runs["pendulum"]
    result = command(evaluate.main, run, "--weights", "last", "--episodes", "2", "--seed", "7")
    assert result.returncode == 0, result.stderr
    assert SUMMARY.search(result.stdout), result.stdout
    report = json.loads((run / "eval.json").read_text())
    assert (report["episodes"], report["seed"], report["weights"]) == (2, 7, "last")
    assert report["lengths"] == [200, 200]  # Pendulum-v1's time limit
    assert all(r < 0 for r in report["returns"])


def test_eval_video(runs: dict[str, Path], tmp_path: Path) -> None:
    """A process of its own: the video encoder's output would reach its stderr."""
    videos = tmp_path / "videos"
    result = tool(EVAL, runs["cartpole"], "--episodes", "3", "--video", videos, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    # 3 episodes on the smoke run's 2 test envs: quotas 2 and 1, one video per episode
    files = sorted(p.name for p in videos.iterdir())
    assert files == ["env0-episode-0.mp4", "env0-episode-1.mp4", "env1-episode-0.mp4"]
    assert all((videos / f).stat().st_size > 0 for f in files)


# ---- rltrain-export


@pytest.mark.parametrize("name", ["cartpole", "pendulum"])
def test_export(runs: dict[str, Path], tmp_path: Path, name: str) -> None:
    import onnxruntime as ort  # part of the test extra: missing means failing, not skipping

    run = runs[name]
    if name == "cartpole":  # the default output path: next to the (best) weights; a process
        result = tool(EXPORT, run, cwd=tmp_path)
        out = run / "best" / "policy.onnx"
        assert not (run / "final" / "policy.onnx").exists()  # best weights were once put there
    else:
        out = tmp_path / "sub" / "pendulum.onnx"
        result = command(export.main, run, "--weights", "final", "--out", out)
    assert result.returncode == 0, result.stderr
    assert out.is_file()
    assert "ONNX matches torch" in result.stdout
    assert ("identical on 256/256" if name == "cartpole" else "allclose on 256/256"
            ) in result.stdout

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    obs_dim = 4 if name == "cartpole" else 3
    obs = np.random.default_rng(1).uniform(-1, 1, size=(5, obs_dim)).astype(np.float32)
    (act,) = session.run(None, {"obs": obs})
    if name == "cartpole":
        assert act.dtype == np.int64 and act.shape == (5,)
        assert set(act.tolist()) <= {0, 1}
    else:
        assert act.dtype == np.float32 and act.shape == (5, 1)
        assert np.all(np.abs(act) <= 2.0)  # Pendulum's torque bound


# ---- errors: one line on stderr naming the file or flag, non-zero exit


@pytest.mark.parametrize("script", [EVAL, EXPORT], ids=["eval", "export"])
def test_missing_run_dir(tmp_path: Path, script: Path) -> None:
    """In a process of its own: the message alone on stderr, a non-zero exit."""
    missing = tmp_path / "no-such-run"
    assert_one_line_error(tool(script, missing, cwd=tmp_path), script.name, str(missing))


MAINS = {EVAL: evaluate.main, EXPORT: export.main}


@pytest.mark.parametrize("script", [EVAL, EXPORT], ids=["eval", "export"])
def test_truncated_weights(runs: dict[str, Path], tmp_path: Path, script: Path) -> None:
    run = shutil.copytree(runs["cartpole"], tmp_path / "run")
    (run / "eval.json").unlink(missing_ok=True)
    weights = run / "best" / "policy.pt"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    result = command(MAINS[script], run)
    assert_one_line_error(result, script.name, str(weights), "truncated or corrupt")
    assert not (run / "eval.json").exists()


def test_missing_weights_file(runs: dict[str, Path], tmp_path: Path) -> None:
    run = shutil.copytree(runs["cartpole"], tmp_path / "run")
    (run / "final" / "policy.pt").unlink()
    result = command(evaluate.main, run, "--weights", "final")
    assert_one_line_error(result, "rltrain-eval", str(run / "final" / "policy.pt"), "best, last")


@pytest.mark.parametrize(
    ("script", "args", "flag"),
    [
        (EVAL, ("--weights", "worst"), "--weights"),
        (EXPORT, ("--weights", "worst"), "--weights"),
        (EVAL, ("--episodes", "0"), "--episodes"),
    ],
    ids=["eval-weights", "export-weights", "eval-episodes"],
)
def test_bad_flag(tmp_path: Path, script: Path, args: tuple[str, ...], flag: str) -> None:
    result = command(MAINS[script], tmp_path, *args)
    assert result.returncode == 2
    assert_one_line_error(result, script.name, flag)


@pytest.mark.parametrize(
    ("script", "args", "module", "extra"),
    [(EVAL, ("--video", "videos"), "moviepy", "video"), (EXPORT, (), "onnxruntime", "export")],
    ids=["eval-video", "export"],
)
def test_missing_extra(runs: dict[str, Path], tmp_path: Path, script: Path,
                       args: tuple[str, ...], module: str, extra: str) -> None:
    """Without the extra's packages: a one-line error naming the extra, before any work (in
    a process whose path hides them)."""
    shadow = tmp_path / "shadow" / module
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    result = tool(script, runs["cartpole"], *args, cwd=tmp_path,
                  env={"PYTHONPATH": str(shadow.parent)})
    assert_one_line_error(result, script.name, module, f'pip install -e ".[{extra}]"')
    assert not (tmp_path / "videos").exists()


def test_export_onto_a_full_disk_leaves_nothing_partial(runs: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """A real full disk (a tmpfs smaller than the graph): one line naming the problem, and
    neither the 0-byte ``.policy.onnx.tmp`` it left before nor a change to an earlier
    export."""
    with tmpfs(tmp_path / "fs", "16k") as fs:
        earlier = fs / "policy.onnx"
        earlier.write_bytes(b"an earlier export\n")
        result = command(export.main, runs["cartpole"], "--out", earlier)
        assert result.returncode == 2, result.stdout + result.stderr
        assert_one_line_error(result, "rltrain-export", "No space left on device")
        assert sorted(p.name for p in fs.iterdir()) == ["policy.onnx"]
        assert earlier.read_bytes() == b"an earlier export\n"
    out = tmp_path / "policy.onnx"  # with room, the same command writes it
    assert command(export.main, runs["cartpole"], "--out", out).returncode == 0
    assert out.stat().st_size > 16 * 1024 and not list(tmp_path.glob(".*.tmp"))
