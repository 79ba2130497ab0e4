"""rltrain-report: a real sweep through the real command, and hand-made runs for exact numbers
(the command's own function in this process, but where a process shows what is checked: the
whole command on the sweep, a missing or broken extra, a signal).

The sweep is made once by the real CLI (3 seeds x 2 learning rates, 3 smoke epochs each, in
one multirun process). Hand-made runs copy one of its runs and rewrite ``epochs.jsonl``,
``summary.json`` and the config, so that every number the report prints can be worked out
by hand.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from conftest import command, job_dir, run_cli, run_tool, tmpfs, wait_for
from rltrain.commands.report import cli, compose, stats
from rltrain.commands.report.runs import group_runs, load_run

TOOL = "rltrain-report"
REPS = ["--reps", "100"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """multirun/<job>/ of 3 seeds x algo.lr in {1e-3, 3e-3}, 3 epochs each."""
    root = tmp_path_factory.mktemp("report")
    res = run_cli("-q", "--multirun", "experiment=smoke", "seed=0,1,2", "algo.lr=1e-3,3e-3",
                  "trainer.max_epochs=3", f"hydra.sweep.dir={root / 'sweep'}", cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    return root / "sweep"


def make_run(template: Path, dest: Path, scores: list[float], seed: int = 0,
             config: dict[str, Any] | None = None, summary: dict[str, Any] | None = None,
             overrides: list[str] | None = None, step: int = 512, offline: bool = False
             ) -> Path:
    """A copy of a real run whose test returns are ``scores`` (one epoch each, ``step`` env
    steps apart) and whose config and summary carry the given dotted keys and fields."""
    shutil.copytree(template, dest, ignore=shutil.ignore_patterns(
        "checkpoints", "tb", "best", "final", ".rltrain.lock"))
    cfg = yaml.safe_load((dest / ".hydra" / "config.yaml").read_text())
    for key, value in {"seed": seed, **(config or {})}.items():
        *parents, last = key.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        node[last] = value
    (dest / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    if overrides is not None:
        (dest / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    first = json.loads((template / "epochs.jsonl").read_text().splitlines()[0])
    lines = []
    for i, score in enumerate(scores, 1):
        # an offline run takes no env step: its epochs are gradient steps
        first.update(epoch=i, env_step=0 if offline else i * step, gradient_step=i * step)
        first["test"]["return_mean"] = score
        lines.append(json.dumps(first))
    (dest / "epochs.jsonl").write_text("".join(line + "\n" for line in lines))
    full = json.loads((template / "summary.json").read_text())
    full.update({"best_score": max(scores, default=None), "env_step": len(scores) * step,
                 "stopped_early": False, "solved": False, **(summary or {})})
    (dest / "summary.json").write_text(json.dumps(full))
    return dest


def groups_of(*paths: Path):
    groups, keys = group_runs([load_run(p) for p in paths])
    return sorted(groups, key=lambda g: g.name), keys


def assert_one_line_error(res, *needles: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{TOOL}: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_sweep_report(sweep: Path) -> None:
    """The whole command on a real sweep: default directory, every file, HTML offline."""
    res = run_tool(TOOL, sweep, *REPS, cwd=sweep.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    out = sweep / "report"
    assert "6 runs in 2 groups on 1 task" in res.stdout
    assert "algo.lr=0.001 (3 seeds: 0, 1, 2); algo.lr=0.003 (3 seeds: 0, 1, 2)" in res.stdout
    assert str(out / "report.html") in res.stdout
    for name in ("runs.csv", "report.md", "report.html", "curves_CartPole-v1.png",
                 "curves_CartPole-v1.svg"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "curves_CartPole-v1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (out / "curves_CartPole-v1.svg").read_text()
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert len(rows) == 6
    assert {r["group"] for r in rows} == {"algo.lr=0.001", "algo.lr=0.003"}
    assert {r["status"] for r in rows} == {"completed"} and {r["in_statistics"] for r in rows} \
        == {"yes"}
    assert all(r["env_steps"] == "1536" and float(r["final_score"]) > 0 for r in rows)
    page = (out / "report.html").read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert 'src="data:image/png;base64,' in page and "<script" not in page
    md = (out / "report.md").read_text()
    for text in ("## CartPole-v1", "| algo.lr=0.001 | 3 |", "| algo.lr=0.001 | algo.lr=0.003 |",
                 "Reference score: 475 (reward threshold)", "IQM", "optimality gap"):
        assert text in md, text
    assert "early stop" not in res.stderr  # no run stopped early (smoke: stop_score null)
    # never over an earlier report without --force; told in one line, before any work
    assert_one_line_error(command(cli.main, sweep), "not empty", "--force")


def test_iqm_and_metrics_against_hand_computation(sweep: Path, tmp_path: Path) -> None:
    finals = [100, 0, 5, 1, 4, 2, 6, 3]
    runs = [make_run(job_dir(sweep, 0), tmp_path / f"r{i}", [50, f + 1, f, f - 1], seed=i)
            for i, f in enumerate(finals)]
    (group,), keys = groups_of(*runs)
    assert keys == [] and group.name == "ppo on CartPole-v1"
    table = stats.task_table([group], last=3, gamma=5.0, reps=200)[group.name]
    # sorted: 0 1 2 3 4 5 6 100; IQM drops 2 of 8 at each end: (2+3+4+5)/4
    # optimality gap below 5: 5 - mean(5 0 5 1 4 2 5 3) = 5 - 25/8
    np.testing.assert_allclose(table.point, [121 / 8, 3.5, 3.5, 5 - 25 / 8])
    assert np.all(table.ci[0] <= table.point + 1e-12) and np.all(table.point <= table.ci[1] + 1e-12)
    # --last 1: the final score is the last test return alone (f - 1)
    last1 = stats.task_table([group], last=1, gamma=None, reps=50)[group.name]
    np.testing.assert_allclose(last1.point[:3], [113 / 8, 2.5, 2.5])
    assert np.isnan(last1.point[3])
    out = tmp_path / "out"
    out.mkdir()
    compose.build([load_run(r) for r in runs], out, compose.Settings(3, 100))
    assert "| ppo on CartPole-v1 | 8 | 15.1" in (out / "report.md").read_text()


def test_probability_of_improvement_equals_rliables() -> None:
    from rliable import metrics

    rng = np.random.default_rng(0)
    for _ in range(100):
        n, m, tasks = rng.integers(1, 6, size=3)
        x = rng.integers(0, 4, size=(n, tasks)).astype(float)
        y = rng.integers(0, 4, size=(m, tasks)).astype(float)
        assert stats.probability_of_improvement(x, y) == pytest.approx(
            metrics.probability_of_improvement(x, y))


def test_early_stop_is_carried_forward(sweep: Path, tmp_path: Path) -> None:
    runs = [make_run(job_dir(sweep, 0), tmp_path / "a", [10, 20, 30, 40], seed=0),
            make_run(job_dir(sweep, 0), tmp_path / "b", [10, 20, 30, 60], seed=1),
            make_run(job_dir(sweep, 0), tmp_path / "solved", [100, 480], seed=2,
                     summary={"stopped_early": True, "solved": True})]
    (group,), _ = groups_of(*runs)
    at = np.array([512, 1024, 1536, 2048])
    curve = stats.curve(group, at, reps=50)
    np.testing.assert_allclose(curve.mean, [40, (40 + 480) / 3, (60 + 480) / 3, (100 + 480) / 3])
    assert (curve.carried, curve.short) == (1, 0)
    # a run that ends early without having reached the threshold is not carried forward
    short = make_run(job_dir(sweep, 0), tmp_path / "short", [0, 0], seed=3)
    (group,), _ = groups_of(*runs[:2], short)
    curve = stats.curve(group, at, reps=50)
    np.testing.assert_allclose(curve.mean, [20 / 3, 40 / 3, 30, 50])
    assert (curve.carried, curve.short) == (0, 1)
    out = tmp_path / "out"
    out.mkdir()
    compose.build([load_run(r) for r in runs], out, compose.Settings(3, 50))
    md = (out / "report.md").read_text()
    assert "1 of 3 runs stopped early at their stop score; their curves are carried forward" in md
    assert "## Runs stopped early: their final scores do not compare" in md


def test_runs_stopped_early_are_said_not_to_compare(sweep: Path, tmp_path: Path) -> None:
    """Two groups whose runs stopped at the stop score end at about that score: their final
    scores and P(X > Y) compare where they stopped. Said on stderr (labelled, naming each
    run's seed, epoch, last return and the stop score, and the command to run instead) and
    first in report.md (naming each run's directory); the exit stays 0 (the numbers are
    right, their reading is what the warning is about)."""
    runs = []
    for lr, finals in (("0.001", (480, 500, 490)), ("0.003", (476, 495, 481))):
        for seed, final in enumerate(finals):
            runs.append(make_run(
                job_dir(sweep, 0), tmp_path / "runs" / f"lr{lr}-{seed}", [100, final], seed=seed,
                config={"algo.lr": float(lr), "trainer.stop_score": "auto",
                        "trainer.max_epochs": 20},
                summary={"stopped_early": True, "solved": True, "epochs": 2,
                         "reward_threshold": 475.0},
                overrides=["experiment=smoke", f"algo.lr={lr}", f"seed={seed}",
                           "logger.quiet=true"]))
    plain = make_run(job_dir(sweep, 0), tmp_path / "plain", [1, 2], seed=9,
                     config={"env.id": "Acrobot-v1"}, overrides=["seed=9"])
    out = tmp_path / "out"
    res = command(cli.main, tmp_path / "runs", plain, "--out", out, *REPS)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if "early stop" in line]
    assert warnings == [
        f"{TOOL}: warning: early stop: 6 of the 7 runs counted stopped early, as soon as a test "
        "reached their stop score (trainer.stop_score), so their final scores are about that "
        "score, not what the runs would reach: the final-score tables and the probabilities of "
        "improvement compare where runs stopped, not how well they learn",
        f"{TOOL}: warning: early stop: CartPole-v1, algo.lr=0.001: seed 0 at epoch 2 of 20 "
        "(last test return 480), seed 1 at epoch 2 of 20 (last test return 500), seed 2 at "
        "epoch 2 of 20 (last test return 490); stop score 475",
        f"{TOOL}: warning: early stop: CartPole-v1, algo.lr=0.003: seed 0 at epoch 2 of 20 "
        "(last test return 476), seed 1 at epoch 2 of 20 (last test return 495), seed 2 at "
        "epoch 2 of 20 (last test return 481); stop score 475",
        f"{TOOL}: warning: early stop: for a comparison, train runs that use their whole "
        "budget (trainer.stop_score=null, which experiment=compare sets): rltrain --multirun "
        "experiment=smoke algo.lr=0.001,0.003 seed=0,1,2 trainer.stop_score=null"], res.stderr
    md = (out / "report.md").read_text()
    top = md.index("## Runs stopped early: their final scores do not compare")
    assert top < md.index("## Notes") < md.index("## CartPole-v1")
    run = tmp_path / "runs" / "lr0.003-1"
    assert (f"- `{run}`: CartPole-v1, algo.lr=0.003, seed 1: stopped at epoch 2 of 20, last test "
            "return 495, stop score 475") in md
    assert ("What to do instead: for a comparison, train runs that use their whole budget "
            "(trainer.stop_score=null, which experiment=compare sets): `rltrain --multirun "
            "experiment=smoke algo.lr=0.001,0.003 seed=0,1,2 trainer.stop_score=null`.") in md
    cartpole = md[md.index("## CartPole-v1"):]
    assert cartpole.split("\n\n")[1].startswith("Warning: runs of this task stopped early")
    acrobot = md[md.index("## Acrobot-v1"):md.index("## CartPole-v1")]
    assert "Warning: runs of this task" not in acrobot and "Final scores" in acrobot


def test_the_command_to_run_instead(sweep: Path, tmp_path: Path) -> None:
    """The runs' own overrides, swept where they differ, with the compare preset (or the stop
    score off, when they chose another preset); none when they do not make one command."""
    from rltrain.commands.report.early import rerun_command

    def runs(*overrides: list[str]):
        return [load_run(make_run(job_dir(sweep, 0), tmp_path / f"r{len(list(tmp_path.iterdir()))}",
                                  [1], seed=i, overrides=o)) for i, o in enumerate(overrides)]

    # -q's logger.quiet and the stop score are left out
    assert rerun_command(runs(["algo=sac", "env=pendulum", "seed=0", "logger.quiet=True"],
                              ["algo=td3", "env=pendulum", "seed=0", "logger.quiet=True"],
                              ["algo=sac", "env=pendulum", "seed=1", "trainer.stop_score=-150"])
                         ) == ("rltrain --multirun algo=sac,td3 env=pendulum seed=0,1 "
                               "experiment=compare")
    assert rerun_command(runs(["algo=sac", "seed=0"], ["algo=td3"])) is None  # keys differ
    assert rerun_command(runs(["algo=sac", "env=pendulum", "seed=2"],
                              ["algo=td3", "env=pendulum", "seed=10"])) == (
        "rltrain --multirun algo=sac,td3 env=pendulum seed=2,10 experiment=compare")
    assert rerun_command(runs(["algo=ppo", "trainer.stop_score=400"])) == (
        "rltrain algo=ppo experiment=compare")
    assert rerun_command(runs(["algo.hidden_sizes=[64,64]"])) is None  # needs quoting
    assert rerun_command(runs([])) is None


def test_the_compare_preset_trains_every_epoch() -> None:
    """experiment=compare: no stop score; the tuned budget is kept."""
    from conftest import compose_run

    cfg = compose_run("algo=sac", "env=pendulum", "experiment=compare")
    assert cfg.trainer.stop_score is None and cfg.trainer.max_epochs == 19
    assert compose_run("algo=sac", "env=pendulum").trainer.stop_score == "auto"


def test_a_repeated_seed_counts_once(sweep: Path, tmp_path: Path) -> None:
    """Two runs of seed 0 with one config are one run done twice: the statistics keep one
    (the one tested more often), runs.csv lists both, the notes say which was left out."""
    runs = [make_run(job_dir(sweep, 0), tmp_path / "a", [10, 20], seed=0),
            make_run(job_dir(sweep, 0), tmp_path / "b", [10, 20, 30], seed=0),
            make_run(job_dir(sweep, 0), tmp_path / "c", [50, 60], seed=1)]
    (group,), _ = groups_of(*runs)
    assert [r.path.name for r in group.usable] == ["b", "c"]
    assert [r.path.name for r in group.repeats] == ["a"]
    table = stats.task_table([group], last=1, gamma=None, reps=50)[group.name]
    assert table.point[0] == pytest.approx((30 + 60) / 2)  # the mean over seeds 0 and 1
    out = tmp_path / "out"
    out.mkdir()
    compose.build([load_run(r) for r in runs], out, compose.Settings(1, 50))
    rows = {Path(r["run_dir"]).name: r for r in csv.DictReader((out / "runs.csv").open())}
    assert {n: r["in_statistics"] for n, r in rows.items()} == {"a": "no", "b": "yes", "c": "yes"}
    assert "repeats seed 0" in (out / "report.md").read_text()


def test_offline_runs_are_plotted_by_gradient_step(sweep: Path, tmp_path: Path) -> None:
    runs = [make_run(job_dir(sweep, 0), tmp_path / f"off{i}", [10, 20, 30], seed=i, step=1000,
                     offline=True, config={"trainer.name": "offline", "algo.name": "bc"})
            for i in range(2)]
    assert load_run(runs[0]).steps == [1000, 2000, 3000]  # env_step is 0 in every record
    out = tmp_path / "report"
    res = command(cli.main, *runs, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "by gradient step, 95% CI band" in (out / "report.md").read_text()


def test_group_names(sweep: Path, tmp_path: Path) -> None:
    runs = []
    for lr in (0.001, 0.003):
        for envs in (4, 8):
            for seed in (0, 1):
                runs.append(make_run(
                    job_dir(sweep, 0), tmp_path / f"{lr}-{envs}-{seed}", [1, 2], seed=seed,
                    config={"algo.lr": lr, "env.num_train_envs": envs,
                            "logger.quiet": bool(seed)},   # logging never splits a group
                    overrides=["experiment=smoke", f"algo.lr={lr}",
                               f"env.num_train_envs={envs}", f"seed={seed}"]))
    groups, keys = groups_of(*runs)
    assert keys == ["algo.lr", "env.num_train_envs"]
    assert [g.name for g in groups] == [
        "algo.lr=0.001, env.num_train_envs=4", "algo.lr=0.001, env.num_train_envs=8",
        "algo.lr=0.003, env.num_train_envs=4", "algo.lr=0.003, env.num_train_envs=8"]
    assert all(len(g.runs) == 2 for g in groups)
    # a key that differs but was set by no command line still names the groups it separates
    other = make_run(runs[0], tmp_path / "gamma", [1], config={"algo.gamma": 0.9})
    groups, keys = groups_of(runs[0], other)
    assert keys == ["algo.gamma"]
    assert [g.name for g in groups] == ["algo.gamma=0.9", "algo.gamma=0.99"]


def test_damaged_failed_and_torn_runs(sweep: Path, tmp_path: Path) -> None:
    """Damaged: skipped with a warning naming it. Failed: in runs.csv, not in the statistics.
    Torn last line: dropped, the run kept."""
    extra = tmp_path / "extra"
    damaged = make_run(job_dir(sweep, 0), extra / "damaged", [1, 2, 3])
    lines = (damaged / "epochs.jsonl").read_text().splitlines()
    (damaged / "epochs.jsonl").write_text(f"{lines[0]}\n{{not json\n{lines[2]}\n")
    failed = make_run(job_dir(sweep, 0), extra / "failed", [5], seed=7, summary={
        "status": "failed", "error": "the update's v_loss is nan"})
    torn = make_run(job_dir(sweep, 1), extra / "torn", [1, 2], seed=8)
    with (torn / "epochs.jsonl").open("a") as f:
        f.write('{"epoch": 3, "env_st')
    res = command(cli.main, sweep, extra, "--out", tmp_path / "out", *REPS)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"skipping {damaged}: epochs.jsonl line 2 is not an epoch record" in res.stderr
    assert "ignoring its torn last line 3" in res.stderr and "Traceback" not in res.stderr
    assert "7 runs in 2 groups on 1 task (1 skipped)" in res.stdout
    rows = {Path(r["run_dir"]).name: r for r in csv.DictReader((tmp_path / "out" /
                                                               "runs.csv").open())}
    assert "damaged" not in rows and len(rows) == 8
    assert (rows["failed"]["status"], rows["failed"]["in_statistics"]) == ("failed", "no")
    assert rows["torn"]["final_score"] == "1.5"
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"failed, listed in runs.csv and left out of the statistics: `{failed}`" in md
    assert f"skipped, cannot be read: `{damaged}`" in md


def test_bad_inputs(sweep: Path, tmp_path: Path) -> None:
    assert_one_line_error(command(cli.main, tmp_path / "nowhere"),
                          "nowhere does not exist")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(command(cli.main, tmp_path / "empty"), "no runs under")
    bad = make_run(job_dir(sweep, 0), tmp_path / "bad" / "empty-epochs", [1])
    (bad / "epochs.jsonl").write_text("")
    failed = make_run(job_dir(sweep, 0), tmp_path / "bad" / "failed", [1],
                      summary={"status": "failed"})
    res = command(cli.main, tmp_path / "bad")
    assert f"warning: skipping {bad}: epochs.jsonl is empty" in res.stderr
    res.stderr = res.stderr.split("\n", 1)[1]
    assert_one_line_error(res, "no usable runs", "1 cannot be read and 1 failed")
    assert not (tmp_path / "bad" / "report").exists() and failed.exists()
    assert_one_line_error(command(cli.main, sweep, "--reference", "Nope-v0=1", "--out",
                                   tmp_path / "out"), "--reference names Nope-v0")
    res = command(cli.main, sweep, "--reference", "CartPole-v1")
    assert res.returncode == 2 and "expected ENV_ID=SCORE" in res.stderr


def test_missing_extra(sweep: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "rliable"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    res = run_tool(TOOL, sweep, "--out", tmp_path / "out", cwd=tmp_path,
                   env={"PYTHONPATH": str(shadow.parent)})
    assert_one_line_error(res, "rliable", 'pip install -e ".[report]"')
    assert not (tmp_path / "out").exists()


def test_broken_extra(sweep: Path, tmp_path: Path) -> None:
    """An installed rliable whose import raises something else than ImportError (as arch 7 does
    under pandas 3) is named in one line too, not a traceback."""
    shadow = tmp_path / "shadow" / "rliable"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "library.py").write_text("raise TypeError('broken by the test')\n")
    res = run_tool(TOOL, sweep, "--out", tmp_path / "out", cwd=tmp_path,
                   env={"PYTHONPATH": str(shadow.parent)})
    assert_one_line_error(res, "rliable.library is installed but fails to import",
                          "TypeError: broken by the test", 'pip install -e ".[report]"')
    assert not (tmp_path / "out").exists()


def test_across_tasks(sweep: Path, tmp_path: Path) -> None:
    """Several tasks: normalised by threshold or --reference, aggregates and profiles; a task
    whose threshold cannot normalise is reported alone and the report says so."""
    runs = []
    for env_id, threshold, scores in (("CartPole-v1", 400.0, (100, 200, 300, 400)),
                                      ("Acrobot-v1", -100.0, (-400, -300, -200, -100)),
                                      ("Pendulum-v1", -200.0, (-900, -800, -700, -600))):
        for i, lr in enumerate((0.001, 0.003)):
            for seed in (0, 1):
                score = scores[2 * i + seed]
                runs.append(load_run(make_run(
                    job_dir(sweep, 0), tmp_path / f"{env_id}-{lr}-{seed}", [score] * 3, seed=seed,
                    config={"env.id": env_id, "algo.lr": lr},
                    summary={"reward_threshold": threshold},
                    overrides=[f"algo.lr={lr}", f"seed={seed}"])))
    out = tmp_path / "out"
    out.mkdir()
    acrobot = cli._reference("Acrobot-v1=-500:-100")
    assert acrobot == ("Acrobot-v1", stats.Reference(-100.0, -500.0, "--reference"))
    compose.build(runs, out, compose.Settings(3, 100, dict([acrobot])))
    md = (out / "report.md").read_text()
    assert "Pendulum-v1 has reference -200 (reward threshold), which cannot scale scores" in md
    # normalised: CartPole 100/400 .. 400/400, Acrobot (x + 500) / 400: 0.25 .. 1 for both
    assert "| algo.lr=0.001 | 2 x 2 | 0.375 [" in md and "| algo.lr=0.003 | 2 x 2 | 0.875 [" in md
    for name in ("performance_profiles.png", "performance_profiles.svg",
                 "curves_Acrobot-v1.png", "curves_Pendulum-v1.svg"):
        assert (out / name).stat().st_size > 0, name
    assert cli._reference("mypkg.envs:MyEnv-v0=250") == (
        "mypkg.envs:MyEnv-v0", stats.Reference(250.0, 0.0, "--reference"))


def test_force_replaces_only_report_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.md", "curves_X.png", "notes.txt"):
        (out / name).write_text("x")
    with pytest.raises(cli.UserError, match="not empty"):
        cli.output_dir(out, [tmp_path], force=False)
    with pytest.raises(KeyboardInterrupt), cli.staged(out, force=True) as folder:
        (folder / "report.md").write_text("half of a new one")
        raise KeyboardInterrupt  # nothing changes until the new report is whole
    assert sorted(p.name for p in out.iterdir()) == ["curves_X.png", "notes.txt", "report.md"]
    assert (out / "report.md").read_text() == "x"
    with cli.staged(cli.output_dir(out, [tmp_path], force=True), force=True) as folder:
        (folder / "report.md").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
    assert (out / "report.md").read_text() == "new"


def test_one_seed_gives_no_interval(sweep: Path, tmp_path: Path) -> None:
    """Groups of one seed: their scores without an interval (the bootstrap could only draw
    that seed again, "199.4 [199.4, 199.4]"), said in the notes, the HTML and the console."""
    runs = [make_run(job_dir(sweep, 0), tmp_path / "a", [190, 199.4], seed=0),
            make_run(job_dir(sweep, 0), tmp_path / "b", [10, 20], seed=0,
                     config={"algo.lr": 0.01}),
            make_run(job_dir(sweep, 0), tmp_path / "c", [30, 40], seed=1,
                     config={"algo.lr": 0.01})]
    out = tmp_path / "out"
    res = command(cli.main, *runs, "--out", out, "--last", "1", *REPS)
    assert res.returncode == 0, res.stderr
    md = (out / "report.md").read_text()
    assert not re.search(r"(\d[\d,.]*) \[\1, \1\]", md), md
    assert "| 199.4 (1 seed: no interval) | 199.4 (1 seed: no interval) |" in md
    assert "| 30.00 [20.00, 40.00] |" in md  # two seeds: an interval
    notes = md.split("## Notes")[1].split("\n## ")[0]
    assert "CartPole-v1: `algo.lr=0.001` has one seed, and one seed gives no confidence " \
           "interval" in notes and "none:" not in notes
    assert "| 1.00 (1 seed: no interval) |" in md  # P(X > Y) of a one-seed group
    assert "199.4 (1 seed: no interval)" in (out / "report.html").read_text()
    assert "algo.lr=0.001 (1 seed: 0, no interval); algo.lr=0.01 (2 seeds: 0, 1)" in res.stdout


def test_a_full_disk_leaves_no_partial_report(sweep: Path, tmp_path: Path) -> None:
    """A real full disk: one line saying so and how to go on, no report directory (it was
    left half-written), and an earlier report that --force would replace left as it was."""
    with tmpfs(tmp_path / "fs", "64k") as fs:
        res = command(cli.main, job_dir(sweep, 0), "--out", fs / "report", *REPS)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr == (f"{TOOL}: error: could not write the report in {fs / 'report'}: "
                              "No space left on device; nothing was left behind (free space "
                              "there, or pass --out DIR to write it elsewhere)\n")
        assert list(fs.iterdir()) == []
        (fs / "report").mkdir()
        for name in ("report.md", "runs.csv"):
            (fs / "report" / name).write_text(f"an earlier {name}")
        res = command(cli.main, job_dir(sweep, 0), "--out", fs / "report", "--force", *REPS)
        assert res.returncode == 1 and f"{fs / 'report'} is as it was" in res.stderr
        assert {p.name: p.read_text() for p in (fs / "report").iterdir()} == {
            "report.md": "an earlier report.md", "runs.csv": "an earlier runs.csv"}
        assert list(fs.iterdir()) == [fs / "report"]


def test_sigterm_while_writing_leaves_nothing(sweep: Path, tmp_path: Path) -> None:
    """SIGTERM while the report is written (its default would end the process on the spot,
    the directory half-made): one line, exit 143, nothing left."""
    out = tmp_path / "out"
    proc = subprocess.Popen([Path(sys.executable).parent / TOOL, sweep, "--out", out],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for(lambda: proc.poll() is not None or any(tmp_path.glob(".out.partial-*")),
             what="the report's folder")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip() == f"{TOOL}: stopped by SIGTERM; no report was written"
    assert sorted(os.listdir(tmp_path)) == []


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_report_renders_in_headless_chromium(sweep: Path, tmp_path: Path) -> None:
    """report.html, opened offline by a real browser: its tables are in the rendered page,
    its figures are loaded images (decoded, with a width), and a screenshot is drawn."""
    import subprocess

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium)")
    out = tmp_path / "report"
    res = command(cli.main, sweep, "--out", out, *REPS)
    assert res.returncode == 0, res.stderr
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}"]
    url = (out / "report.html").as_uri()
    # a page script records, after load, how many images decoded with a real width
    probe = tmp_path / "probe.html"
    probe.write_text(
        f'<iframe id="r" src="{url}" style="width:1200px;height:900px"></iframe><script>'
        "document.getElementById('r').onload=function(){var d=this.contentDocument;"
        "var ok=[].filter.call(d.images,function(i){return i.complete&&i.naturalWidth>0});"
        "document.title='images '+ok.length+' of '+d.images.length+' tables '+"
        "d.querySelectorAll('table').length;};</script>")
    dom = subprocess.run([*flags, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = re.search(r"<title>images (\d+) of (\d+) tables (\d+)</title>", dom.stdout)
    assert title, dom.stdout[:2000]
    loaded, total, tables = map(int, title.groups())
    assert total > 0 and loaded == total and tables > 0
    shot = tmp_path / "report.png"
    res = subprocess.run([*flags, "--window-size=1200,2400", f"--screenshot={shot}", url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000
