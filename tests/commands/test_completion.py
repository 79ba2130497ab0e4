"""Shell completion (``rltrain -sc install=bash``), run for real in bash and zsh: the script
rltrain prints is evaluated by the shell, and the completion function it defines calls back
into ``rltrain -sc query=bash`` as a user's TAB would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, cli_env


def shell(program: str, script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` in a non-interactive ``program`` (bash, zsh) that finds ``rltrain``
    on its PATH, as a user's shell does."""
    env = cli_env({"PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])})
    flags = ["-f"] if program == "zsh" else ["--norc", "--noprofile"]
    return subprocess.run([program, *flags, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


#: complete the words ``$1`` (the line typed so far) with the installed function, the way
#: bash calls it on TAB: COMP_LINE, COMP_POINT and COMP_CWORD set, COMPREPLY read back
BASH_COMPLETE = """
complete_line() {
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; COMP_CWORD=$2
    COMPREPLY=(); hydra_bash_completion; echo "reply: ${COMPREPLY[*]}"
}
"""


def test_hydra_help_advertises_a_completion_command_that_works_in_bash(cli, tmp_path):
    advertised = cli("--hydra-help")
    assert advertised.returncode == 0, advertised.stderr
    install = re.search(r'eval "\$\(rltrain -sc install=bash\)"', advertised.stdout)
    assert install is not None, advertised.stdout
    res = shell("bash", f"""{install.group(0)}
complete -p rltrain
{BASH_COMPLETE}
complete_line "rltrain algo=d" 1
complete_line "rltrain algo=dqn trainer.max_ep" 2
complete_line "rltrain s" 1
eval "$(rltrain -sc uninstall=bash)"
complete -p rltrain || echo "uninstalled"
""", tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"complete .*-F hydra_bash_completion rltrain", lines[0]), lines
    replies = [line for line in lines if line.startswith("reply:")]
    assert replies[0].split()[1:] == ["algo=ddpg", "algo=discrete_sac", "algo=dqn"]
    assert replies[1].split()[1:] == ["trainer.max_epochs="]
    # the keys the user sets, not the groups rltrain composes itself (schema, tuned)
    assert "seed=" in replies[2].split() and "schema" not in replies[2]
    assert lines[-1] == "uninstalled"
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "outputs").exists()  # completing never runs anything


def test_zsh_completion_installs_on_its_own_and_completes(tmp_path):
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here (apt-get install zsh), so its completion "
                    "cannot be run")
    # zsh without any rc file: compinit and bashcompinit are not loaded; the install script
    # loads them. compgen -F runs the function as zsh's completion system does on TAB.
    res = shell("zsh", """eval "$(rltrain -sc install=zsh)"
complete -p
export COMP_LINE="rltrain env=halfch"; COMP_POINT=${#COMP_LINE}; COMP_CWORD=1
words=(rltrain env=halfch); CURRENT=2
compgen -o nospace -o default -F hydra_bash_completion -- env=halfch
""", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "complete -o nospace -o default -F hydra_bash_completion rltrain" in res.stdout
    assert res.stdout.splitlines()[-1] == "env=halfcheetah"
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("words", "says"), [
    ([], "takes one of install=SHELL, uninstall=SHELL or query=SHELL, got nothing"),
    (["install=tcsh"], "no completion for the shell 'tcsh'; shells: bash, zsh, fish"),
    (["query=bash"], "is what the installed completion function runs"),
])
def test_a_wrong_completion_command_is_one_line_and_exit_2(cli, words, says):
    res = cli("-sc", *words)
    assert res.returncode == 2
    assert res.stderr.startswith("rltrain: error: -sc") and says in res.stderr
    assert len(res.stderr.splitlines()) == 1 and res.stdout == ""


def _query(line: str, cache: Path, cwd: Path, importtime: bool = False
           ) -> subprocess.CompletedProcess:
    """``rltrain -sc query=bash`` for ``line``, as the installed function calls it, with the
    schema cache under ``cache``; ``importtime``: under ``python -X importtime``."""
    import sys

    env = cli_env({"COMP_LINE": line, "COMP_POINT": str(len(line)),
                   "XDG_CACHE_HOME": str(cache)})
    argv = ([sys.executable, "-X", "importtime", "-m", "rltrain.commands.train"] if importtime
            else [str(BIN / "rltrain")])
    return subprocess.run([*argv, "-sc", "query=bash"], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


LINES = ["rltrain algo=sac algo.", "rltrain env.", "rltrain logger.", "rltrain algo=dqn tr"]


def test_completion_keeps_the_schemas_and_then_answers_without_torch(tmp_path):
    """The first completion writes the schemas' plain values to the cache; the next ones
    answer the same from it and never import torch (rltrain.commands.completion)."""
    cache = tmp_path / "cache"
    cold = [_query(line, tmp_path / f"cold{i}", tmp_path) for i, line in enumerate(LINES)]
    assert all(r.returncode == 0 and r.stdout.strip() for r in cold), cold
    assert "algo.actor_lr=" in cold[0].stdout.split()
    _query(LINES[0], cache, tmp_path)
    written = list((cache / "rltrain").glob("schemas-*.json"))
    assert len(written) == 1
    warm = [_query(line, cache, tmp_path, importtime=True) for line in LINES]
    assert [r.stdout for r in warm] == [r.stdout for r in cold]
    imported = {line.split("|")[-1].strip() for r in warm for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "rltrain.commands.completion" in imported and "hydra" in imported
    assert "torch" not in imported and "rltrain.algorithms" not in imported


def test_a_broken_or_linked_cache_is_not_trusted_or_written_through(tmp_path):
    cache = tmp_path / "cache"
    _query("rltrain env.", cache, tmp_path)
    path = next((cache / "rltrain").glob("schemas-*.json"))
    expected = _query("rltrain algo=sac algo.", cache, tmp_path).stdout
    path.write_text('{"schema/algo/sac": "not a mapping"')  # cut short
    again = _query("rltrain algo=sac algo.", cache, tmp_path)
    assert again.returncode == 0 and again.stdout == expected and "Traceback" not in again.stderr
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("mine")
    path.unlink()
    path.symlink_to(elsewhere)  # read as JSON, it is no cache; replaced, never written through
    again = _query("rltrain algo=sac algo.", cache, tmp_path)
    assert again.returncode == 0 and again.stdout == expected
    assert elsewhere.read_text() == "mine"
    assert not path.is_symlink() and path.is_file()
