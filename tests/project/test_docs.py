"""The documentation is part of the suite: the site (docs/, mkdocs.yml) builds in strict mode,
its reference content is the live code's, its error examples are what rltrain prints, and every
command line of README.md's tour is one rltrain accepts."""

from __future__ import annotations

import html
import importlib
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import BIN, TESTS, cli_env, compose_run, refusal
from rltrain.algorithms import ALGORITHMS
from rltrain.assembly.checked_config import settings
from rltrain.commands.command_line import prepare
from rltrain.commands.train import conf_dir

ROOT = TESTS.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: the set-up commands CI runs (.ci/run) and the README must show as they are
SET_UP = ('python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[test]" && '
          '.venv/bin/rltrain algo=ppo env=cartpole',
          'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[test]" && '
          '.venv/bin/python -m pytest')


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` as a user runs it (warnings fail it)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(config), "--site-dir", str(site)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def page_text(site: Path, page: str) -> str:
    """A built page's text, tags removed and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page).read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- the site
def test_site_builds_with_every_page_in_the_nav(site: Path) -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert pages == {p.stem for p in site.glob("*.html")} - {"404"}
    assert not (site / "hooks.py").exists(), "the hook is code the build runs, not a page"
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = set(re.findall(r"([\w-]+)\.md", str(nav)))
    assert listed == pages, f"pages outside the nav: {pages - listed}"


def test_help_texts_are_those_of_the_installed_commands(site: Path) -> None:
    built = page_text(site, "commands.html")
    tools = [e.name for e in entry_points(group="console_scripts")
             if e.value.startswith("rltrain.")]
    assert len(tools) >= 5, tools
    for tool in tools:
        res = subprocess.run([str(BIN / tool), "--help"], capture_output=True, text=True,
                             env={**cli_env(), "COLUMNS": "100"}, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() in built, f"{tool} --help differs from the built page"


def table_rows(site: Path, page: str) -> list[list[str]]:
    """The cells of each body row of a built page's tables, as text."""
    built = (site / page).read_text(encoding="utf-8")
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", built, re.S) if "<td" in row]


def test_reference_lists_are_the_registry_and_conf(site: Path) -> None:
    rows = {row[0]: row for row in table_rows(site, "algorithms.html")}
    for name, spec in ALGORITHMS.items():
        assert name in rows, f"algo={name} is not in the algorithms table"
        assert rows[name][2] == ", ".join(spec.trainers) and rows[name][7] == spec.paper
        # the columns the README's table has: masks, buffer=prioritized
        assert rows[name][4:6] == ["yes" if spec.masks else "no",
                                   "yes" if spec.prioritized else "no"], name
    shown = {row[0] for row in table_rows(site, "envs.html")}
    for path in (ROOT / "conf" / "env").glob("*.yaml"):
        assert f"env={path.stem}" in shown
    slurm = (ROOT / "conf" / "hydra" / "launcher" / "slurm.yaml").read_text()
    assert slurm.strip() in page_text(site, "sweeps.html")


def small_site(tmp_path: Path, pages: dict[str, str]) -> Path:
    """A site with rltrain's mkdocs.yml settings (hook, strict validation) over ``pages``."""
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    for name, text in pages.items():
        (tmp_path / "docs" / name).write_text(text)
    cfg.update(docs_dir=str(tmp_path / "docs"), hooks=[str(DOCS / "hooks.py")],
               nav=[{name.removesuffix(".md"): name} for name in pages])
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump(cfg))
    return config


@pytest.mark.parametrize("include, named", [
    ("<!-- live: help rltrain-nonesuch -->", "'rltrain-nonesuch' is not a command of rltrain"),
    ("<!-- live: algorithm -->", "unknown include"),
    ("see <!-- live: envs --> inline", "a live include the docs hook cannot read"),
    ("<!-- live: file conf/experiment/nonesuch.yaml -->", "is not a file of the repository"),
])
def test_an_include_that_cannot_be_read_fails_the_build(tmp_path: Path, include: str,
                                                        named: str) -> None:
    config = small_site(tmp_path, {"index.md": f"# Home\n\n{include}\n"})
    res = mkdocs_build(config, tmp_path / "site")
    assert res.returncode != 0
    assert named in res.stderr and "index.md" in res.stderr, res.stderr


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    config = small_site(tmp_path, {
        "index.md": "# Home\n\n[gone](gone.md), [no anchor](other.md#nowhere)\n",
        "other.md": "# Other\n\n## Somewhere\n"})
    res = mkdocs_build(config, tmp_path / "site")
    assert res.returncode != 0
    assert "gone.md" in res.stderr and "#nowhere" in res.stderr, res.stderr


# --------------------------------------------------------------------------- error examples
def error_examples() -> list:
    """A case (page, command, the lines it prints) for each ``$ rltrain ...`` line of a text
    block of the docs that is followed by ``rltrain: error: ...``: the examples that say what
    rltrain prints when it refuses an input."""
    found: dict[str, tuple[str, str, list[str]]] = {}
    for page in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"^```text\n(.*?)^```", page.read_text(), re.M | re.S):
            for command, output in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block, re.M):
                lines = output.splitlines()
                if lines and lines[0].startswith("rltrain: error:"):
                    found.setdefault(command, (page.name, command, lines))
    return [pytest.param(*case, id=case[1]) for case in found.values()]


#: what the CLI refuses itself, before Hydra composes a run: said by a real process
BEFORE_COMPOSING = ("-", "hparams_search=")


@pytest.mark.parametrize("page, command, expected", error_examples())
def test_error_examples_are_what_rltrain_prints(tmp_path: Path, page: str, command: str,
                                                expected: list[str]) -> None:
    """A refusal of a run's config is found in this process (the CLI prints ``rltrain:
    error: `` and the message, exit 2: tests/commands/test_cli.py); what the CLI refuses before
    composing, by a real ``rltrain``."""
    words = shlex.split(command)
    # PYTHONPATH=tests: cli_env, and this process, have the tests' env package on the path
    if words[0] == "PYTHONPATH=tests":
        words = words[1:]
    assert words[0] == "rltrain", f"{page}: {command}"
    if not any(w.startswith(BEFORE_COMPOSING) for w in words[1:]):
        said = [f"rltrain: error: {refusal(tmp_path / 'run', *words[1:])}"]
        assert said == expected, f"{page} shows another message for {command}"
        return
    res = subprocess.run([str(BIN / "rltrain"), *words[1:]], cwd=tmp_path, capture_output=True,
                         text=True, env=cli_env(), timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == expected, f"{page} shows another message for {command}"


def test_the_docs_show_the_refusals_they_promise() -> None:
    assert len(error_examples()) >= 10


# --------------------------------------------------------------------------- README
def readme_commands() -> list[list[str]]:
    """Each command line of the README's bash blocks that runs an rltrain command."""
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].startswith("rltrain"):
                lines.append(words)
    return lines


def test_readme_keeps_the_two_set_up_commands() -> None:
    text = README.read_text()
    for command in SET_UP:
        assert f"\n{command}\n" in text
    assert SET_UP[1].rpartition(" && ")[0] in (ROOT / ".ci" / "run").read_text()


def test_readme_links_point_at_pages_of_the_site() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_readme_algorithm_table_follows_the_registry() -> None:
    """Each registered algorithm has one row of the README's table, saying the action spaces,
    masks and prioritised replay the registry says."""
    from rltrain.algorithms import ALGORITHMS, CONTINUOUS, DISCRETE, MULTIDISCRETE

    letters = {DISCRETE: "D", MULTIDISCRETE: "M", CONTINUOUS: "C"}
    section = README.read_text().split("## Algorithms", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")][2:]
    seen: dict[str, list[str]] = {}
    for row in rows:
        for name in re.findall(r"`(\w+)`", row[1].split(" (", 1)[0]):
            seen[name] = row
    assert set(seen) == set(ALGORITHMS)
    for name, spec in ALGORITHMS.items():
        _, _, actions, masks, prioritized = seen[name]
        assert actions.split() == [letters[a] for a in (DISCRETE, MULTIDISCRETE, CONTINUOUS)
                                   if a in spec.actions], name
        assert masks == ("yes" if spec.masks else "no"), name
        assert prioritized.rstrip(" |") == ("yes" if spec.prioritized else "no"), name


@pytest.mark.parametrize("words", readme_commands(), ids=" ".join)
def test_readme_command_lines_are_accepted(words: list[str]) -> None:
    """Each tour command's options and keys exist: a companion command's arguments parse; an
    ``rltrain`` line's overrides pass rltrain's own checks and compose into settings rltrain
    accepts (a sweep's first job), as ``rltrain --cfg job`` would; --help and --version run."""
    tool, args = words[0], words[1:]
    if tool != "rltrain":
        main = next(e for e in entry_points(group="console_scripts") if e.name == tool).load()
        # the module that defines the command's main() holds its argparse parser()
        importlib.import_module(main.__module__).parser().parse_args(args)  # exits 2 if wrong
        return
    if {"--help", "-h", "--version"} & set(args):
        res = subprocess.run([str(BIN / "rltrain"), *args], capture_output=True, text=True,
                             env=cli_env(), cwd=ROOT)
        assert res.returncode == 0 and res.stdout, res.stderr
        return
    checked = prepare(args, conf_dir())
    overrides = [a for a in checked if not a.startswith("-") and a != "job"]
    first_job = []
    for override in OverridesParser.create().parse_overrides(overrides):
        line = override.input_line
        if override.is_sweep_override():
            try:
                value = next(iter(override.sweep_string_iterator()))
            except Exception:  # noqa: BLE001 - an interval: the sweeper samples it; prepare checked its key
                continue
            line = f"{override.get_key_element()}={value}"
        first_job.append(line)
    settings(compose_run(*first_job))
