"""The layers are a contract: imports point down only, and go round in no circle, not even
among the modules of one layer or inside a function (``.importlinter``, checked by
import-linter's ``lint-imports``). A contract that could not fail would prove nothing, so a
deliberate upward import, and a circle inside one layer, in a copy of the package must each
break it, naming the import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(src: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), str(ROOT / ".importlinter"), "--no-cache", "--no-logo"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def copy_with(tmp_path: Path, module: str, imported: str) -> Path:
    """A copy of the package in which ``module`` (a path under rltrain/) imports
    ``imported`` inside a function, as a lazy import would."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "rltrain", copy / "rltrain",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "rltrain" / module
    path.write_text(path.read_text() + f"\n\ndef _lazy() -> None:\n    import {imported}  "
                    "# noqa: F401\n")
    return copy


def test_imports_point_down_only_and_go_round_in_no_circle():
    res = lint(ROOT / "src")
    assert res.returncode == 0, res.stdout + res.stderr
    contracts = (ROOT / ".importlinter").read_text().count("[importlinter:contract:")
    assert f"{contracts} kept, 0 broken" in res.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """config/schemas.py (near the bottom) importing the CLI, in a copy of the package."""
    res = lint(copy_with(tmp_path, "config/schemas.py", "rltrain.commands.train"), cwd=tmp_path)
    assert res.returncode != 0
    assert "BROKEN" in res.stdout, res.stdout
    assert "rltrain.config.schemas -> rltrain.commands.train" in res.stdout, res.stdout


@pytest.mark.parametrize(("module", "imported", "named"), [
    # the bottom of rltrain.data.datasets importing the files, above it
    ("spaces.py", "rltrain.data.datasets.files", "spaces -> rltrain.data.datasets.files"),
    # two modules of one layer that are kept apart ("|")
    ("files.py", "rltrain.data.datasets.minari", "files -> rltrain.data.datasets.minari"),
])
def test_an_upward_import_among_the_dataset_modules_breaks_their_contract(tmp_path, module,
                                                                          imported, named):
    """rltrain.data.datasets has layers of its own; the package-wide contract alone would let
    its modules import each other both ways."""
    res = lint(copy_with(tmp_path, f"data/datasets/{module}", imported), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "the dataset modules import down only" in res.stdout
    reported = res.stdout[res.stdout.index("Broken contracts"):]
    assert "the dataset modules import down only" in reported
    assert f"rltrain.data.datasets.{named}" in reported, reported


@pytest.mark.parametrize(("module", "imported", "package", "named"), [
    # the circle issue 45 found: the sweep's callback imports the submitit launcher, which
    # imported the callback back, both in one layer (where the layers contract lets them)
    ("sweeps/submitit_launcher.py", "rltrain.sweeps.callback", "rltrain.sweeps",
     ".callback -> .submitit_launcher"),
    # a circle inside a package: storage.py is what returns.py and samplers.py import
    ("data/storage.py", "rltrain.data.samplers", "rltrain.data", ".samplers -> .storage"),
])
def test_a_circle_within_one_layer_breaks_the_contract(tmp_path, module, imported, package,
                                                       named):
    """The layers contract alone keeps such a circle (its modules share a layer); the
    acyclic contract breaks on it and names an import that closes it."""
    res = lint(copy_with(tmp_path, module, imported), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "rltrain's layers (DESIGN.md, \"Layers\") KEPT" in res.stdout
    assert "no circles among rltrain's modules" in res.stdout and "BROKEN" in res.stdout
    reported = res.stdout[res.stdout.index("Broken contracts"):]
    assert f"No cycles are allowed in {package}." in reported
    assert (named in reported or " -> ".join(reversed(named.split(" -> "))) in reported), \
        reported


@pytest.mark.parametrize(("module", "imported"), [
    # the shared-study protocol reaching up into the trial-to-job translation
    ("sweeps/optuna/shared.py", "rltrain.sweeps.optuna.trials"),
    # the outputs and the trial-to-job translation share a layer, independent of each other
    ("sweeps/optuna/outputs.py", "rltrain.sweeps.optuna.trials"),
])
def test_an_import_against_the_optuna_sweepers_order_breaks_its_contract(tmp_path, module,
                                                                         imported):
    """The package's modules import only those below them (rltrain.sweeps.optuna's text):
    the rltrain-wide contracts keep such an import (one layer, no circle); the package's
    own breaks on it and names it."""
    res = lint(copy_with(tmp_path, module, imported), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "rltrain's layers (DESIGN.md, \"Layers\") KEPT" in res.stdout
    assert "no circles among rltrain's modules" in res.stdout
    reported = res.stdout[res.stdout.index("Broken contracts"):]
    importer = "rltrain." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in reported, reported



@pytest.mark.parametrize(("module", "imported", "contract"), [
    # what storage hands out reaching up to the collector, which writes into storage
    ("data/batch.py", "rltrain.data.collector", "the collector is the data path's top"),
    # the run directory's bounded reader reaching into the directory's lock and snapshot
    ("rundir/stored_data.py", "rltrain.rundir.directory",
     "the run directory's modules import down only"),
    # the networks' optimiser reaching up into the actors
    ("nets/optim.py", "rltrain.nets.actors_critics", "the networks' modules import down only"),
    # the env factory's wrappers reaching up into the factory
    ("envs/wrappers.py", "rltrain.envs.vector", "the envs' modules import down only"),
    # eval reaching up into the rltrain command
    ("commands/evaluate.py", "rltrain.commands.train", "the commands import down only"),
])
def test_an_import_against_a_packages_order_breaks_its_contract(tmp_path, module, imported,
                                                                 contract):
    """Each package's own contract (its docstring's order) breaks on an import against it and
    names it, where the contract of the layers keeps it (one package)."""
    res = lint(copy_with(tmp_path, module, imported), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "rltrain's layers (DESIGN.md, \"Layers\") KEPT" in res.stdout
    reported = res.stdout[res.stdout.index("Broken contracts"):]
    assert contract in reported, reported
    importer = "rltrain." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in reported, reported


@pytest.mark.parametrize(("module", "imported"), [
    # a job's state as its files show it reaching up into the stop file
    ("sweeps/jobs.py", "rltrain.sweeps.stopping"),
    # the sweep's list and the re-attempts share a layer, independent of each other
    ("sweeps/outcome.py", "rltrain.sweeps.attempts"),
])
def test_an_import_against_the_sweeps_order_breaks_its_contract(tmp_path, module, imported):
    """The sweeps package's modules import only those below them (rltrain.sweeps' docstring):
    the rltrain-wide contracts keep such an import (one layer, no circle); the package's own
    breaks on it and names it."""
    res = lint(copy_with(tmp_path, module, imported), cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "rltrain's layers (DESIGN.md, \"Layers\") KEPT" in res.stdout
    assert "no circles among rltrain's modules" in res.stdout
    assert "the sweeps modules import only those below them" in res.stdout
    reported = res.stdout[res.stdout.index("Broken contracts"):]
    importer = "rltrain." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in reported, reported
