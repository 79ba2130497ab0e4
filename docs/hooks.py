"""MkDocs hook (named in mkdocs.yml): reference content read from the live source at build time.

A page asks for it with a line of its own, ``<!-- live: WHAT [ARG] -->``:

- ``help TOOL``: what ``TOOL --help`` prints (rltrain or a companion command), run now;
- ``algorithms``: the algorithm registry (``rltrain.algorithms``): name, trainer, actions,
  whether it honours action masks and takes ``buffer=prioritized``, the console's stats, the
  paper, and the first sentence of ``conf/algo/<name>.yaml``;
- ``envs``: the ``env`` group's options with their gymnasium id, extra and reward threshold;
- ``group NAME``: the options of ``conf/NAME/`` with the first sentence of each file's comment;
- ``file PATH``: a file of the repository, verbatim.

So the lists of algorithms, envs and groups, and the ``--help`` texts, cannot go stale in the
docs: they are what the code says when the site is built. A ``live:`` line the hook does not
understand, a tool that is not installed or a command that fails stops the build with an error
naming the page, so a misspelt or outdated include fails ``mkdocs build --strict`` (and the
test suite, tests/project/test_docs.py) instead of vanishing from the page as an HTML comment would.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

#: the package of an env's entry point -> the rltrain extra it needs (rltrain.envs.vector.EXTRAS)
ENV_EXTRAS = (("gymnasium.envs.mujoco", "mujoco"), ("gymnasium.envs.box2d", "box2d"),
              ("ale_py", "atari"), ("minatar", "minatar"), ("minigrid", "minigrid"))

#: a whole line ``<!-- live: WHAT [ARG] -->``
DIRECTIVE = re.compile(r"^<!--\s*live:\s*(?P<what>\S+)(?:[ \t]+(?P<arg>[^\n]*?))?\s*-->[ \t]*$",
                       re.MULTILINE)
#: anything that looks like a live include, well formed or not
ANY_LIVE = re.compile(r"<!--\s*live\b")

#: argparse wraps help to the terminal's width: one width, so that the text is the same on
#: every machine
HELP_COLUMNS = "100"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace each ``live:`` line of a page by what it names, read now."""
    where = page.file.src_uri

    def replace(match: re.Match[str]) -> str:
        what, arg = match.group("what"), (match.group("arg") or "").strip()
        try:
            return render(what, arg)
        except PluginError as e:
            raise PluginError(f"{where}: <!-- live: {what} {arg} -->: {e}") from None

    out = DIRECTIVE.sub(replace, markdown)
    left = ANY_LIVE.search(out)
    if left is not None:
        line = out.count("\n", 0, left.start()) + 1
        raise PluginError(f"{where}: a live include the docs hook cannot read (line {line} after "
                          "expansion); write it alone on its line as <!-- live: WHAT [ARG] -->")
    return out


def render(what: str, arg: str) -> str:
    """The Markdown that a ``live:`` line stands for."""
    if what == "help":
        return fenced(tool_help(arg))
    if what == "algorithms" and not arg:
        return algorithms_table()
    if what == "envs" and not arg:
        return envs_table()
    if what == "group" and arg:
        return group_table(arg)
    if what == "file" and arg:
        path = (ROOT / arg).resolve()
        if ROOT not in path.parents or not path.is_file():
            raise PluginError(f"{arg} is not a file of the repository")
        return fenced(path.read_text(encoding="utf-8"), "yaml" if path.suffix == ".yaml" else "")
    raise PluginError("unknown include; one of: help TOOL, algorithms, envs, group NAME, "
                      "file PATH")


def fenced(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


# --------------------------------------------------------------------------- --help
def tools() -> dict[str, str]:
    """rltrain's commands (its console scripts), name -> entry point."""
    return {e.name: e.value for e in entry_points(group="console_scripts")
            if e.value.split(".")[0].split(":")[0] == "rltrain"}


#: ``TOOL --help`` of every command, all started by the first page that includes one (each
#: takes a fraction of a second, mostly Python's start-up, so they run side by side)
_HELP: dict[str, Future[subprocess.CompletedProcess[str]]] = {}
_POOL = ThreadPoolExecutor(max_workers=8)


def on_pre_build(**_: Any) -> None:
    """A new build (``mkdocs serve`` rebuilds in one process) reads every text again."""
    _HELP.clear()


def tool_help(tool: str) -> str:
    """What ``TOOL --help`` prints, run from the environment that builds the docs."""
    known = tools()
    if tool not in known:
        raise PluginError(f"{tool!r} is not a command of rltrain (installed: "
                          f"{', '.join(sorted(known)) or 'none; pip install -e .'})")
    if not _HELP:
        env = {**os.environ, "COLUMNS": HELP_COLUMNS}
        env.pop("HYDRA_FULL_ERROR", None)
        for name in known:
            program = Path(sys.executable).parent / name
            _HELP[name] = _POOL.submit(subprocess.run, [str(program), "--help"],
                                       capture_output=True, text=True, env=env, cwd=ROOT,
                                       timeout=60)
    try:
        res = _HELP[tool].result()
    except (OSError, subprocess.SubprocessError) as e:
        raise PluginError(f"{tool} --help could not run: {e}") from None
    if res.returncode != 0 or not res.stdout.strip():
        raise PluginError(f"{tool} --help exited {res.returncode}: "
                          f"{(res.stderr or res.stdout).strip()[:300]}")
    return res.stdout


# --------------------------------------------------------------------------- config groups
def first_sentence(path: Path) -> str:
    """The first sentence of a YAML file's leading comment (Hydra's ``@package`` line aside)."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            words.append(text)
    comment = " ".join(w for w in words if w)
    end = re.search(r"[.;](\s|$)", comment)
    return (comment[:end.start()] if end else comment).replace("|", "\\|")


def options(group: str) -> list[Path]:
    folder = CONF / group
    found = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not found:
        raise PluginError(f"conf/{group}/ holds no options")
    return found


def group_table(group: str) -> str:
    """A group's options; one a command line chooses as ``GROUP=OPTION`` (rltrain --help's
    groups), any other by its path (``tuned/sac_pendulum``, applied automatically)."""
    from rltrain.commands.train import USER_GROUPS  # light: the CLI imports torch only when it runs

    sep = "=" if group in USER_GROUPS else "/"
    rows = [f"| `{group}{sep}{p.stem}` | {first_sentence(p)} |" for p in options(group)]
    return "\n".join([f"| `{group}{sep}` | what it is (its file's comment) |", "| --- | --- |",
                      *rows])


def algorithms_table() -> str:
    from rltrain.algorithms import ALGORITHMS  # the registry: imports torch (about a second)

    order = {"onpolicy": 0, "offpolicy": 1, "offline": 2}
    rows = []
    for spec in sorted(ALGORITHMS.values(), key=lambda s: (order.get(s.trainers[0], 9), s.name)):
        described = CONF / "algo" / f"{spec.name}.yaml"
        if not described.is_file():
            raise PluginError(f"algorithm {spec.name} is registered but has no conf/algo file")
        actions = " and ".join(spec.actions) + (" (bounded)" if spec.bounded_actions and
                                                "continuous" in spec.actions else "")
        shows = " ".join(label for _, label in spec.console)
        masks, prioritized = ("yes" if flag else "no" for flag in (spec.masks, spec.prioritized))
        rows.append(f"| `{spec.name}` | {first_sentence(described)} | "
                    f"{', '.join(spec.trainers)} | {actions} | {masks} | {prioritized} | "
                    f"{shows} | {spec.paper} |")
    return "\n".join(["| `algo=` | what it is | trainer | actions | masks | "
                      "`buffer=prioritized` | console | paper |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |", *rows])


def envs_table() -> str:
    import gymnasium

    rows = []
    for path in options("env"):
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        env_id = cfg.get("id")
        if env_id == "???":  # conf/env/gym.yaml: any id
            rows.append(f"| `env={path.stem}` | any id: `env.id=...` | | the env's registered "
                        "threshold, or `env.reward_threshold` |")
            continue
        try:
            for module in cfg.get("imports") or []:  # they register their ids (ale_py...)
                importlib.import_module(module)
            spec = gymnasium.spec(env_id)
        except Exception as e:  # noqa: BLE001 - any lookup failure names the file
            raise PluginError(f"conf/env/{path.name}: gymnasium does not know {env_id!r}: "
                              f"{e}") from None
        entry = str(spec.entry_point)
        extra = next((f"`{name}`" for package, name in ENV_EXTRAS
                      if entry == package or entry.startswith((f"{package}.", f"{package}:"))),
                     "")
        own = cfg.get("reward_threshold")
        if own is not None:
            solved = f"{own:,g} (rltrain's: none registered; `conf/env/{path.name}` says why)"
        elif spec.reward_threshold is not None:
            solved = f"{spec.reward_threshold:,g} (gymnasium's)"
        else:
            solved = "none: set `env.reward_threshold`"
        rows.append(f"| `env={path.stem}` | {env_id} | {extra} | {solved} |")
    return "\n".join(["| `env=` | gymnasium id | extra | solved at (`trainer.stop_score=auto`) |",
                      "| --- | --- | --- | --- |", *rows])
