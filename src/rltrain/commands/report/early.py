"""Runs that stopped early at their stop score: why their final scores do not compare, said
where it cannot be missed (stderr, and the top of the report), with the runs, where they
stopped, and what to run instead.

A run stops as soon as a test reaches ``trainer.stop_score`` (``auto``, the default: the env's
reward threshold), and its summary.json records ``stopped_early``. Each such run ends at about
its stop score, whatever the rest of its budget would have brought: the final scores of groups
whose runs stopped early are alike by construction, and a probability of improvement between
them measures noise around the threshold (SAC against TD3 on Pendulum, 3 seeds each, all
stopped at -200: P(SAC > TD3) = 0.56 [0.00, 1.00]). Their learning curves still show how soon
each reached it. Runs for a comparison train their whole budget: ``trainer.stop_score=null``,
which the ``compare`` experiment preset sets.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from rltrain.commands.report.runs import Group, Run, natural, show

#: the preset that trains every run for its whole budget (conf/experiment/compare.yaml)
PRESET = "experiment=compare"
#: the override that does the same
NO_STOP = "trainer.stop_score=null"
#: overrides left out of a suggested command: the stop score is what changes, -q is a choice
_LEFT_OUT = ("trainer.stop_score", "logger.quiet")
#: an override that can be repeated on a command line without quoting
_PLAIN_OVERRIDE = re.compile(r"[+]{0,2}[A-Za-z0-9_./@-]+=[A-Za-z0-9_.:/@+-]+")


@dataclasses.dataclass
class Stopped:
    """The runs of one group (counted in the statistics) that stopped early."""

    task: str
    group: Group
    runs: list[Run]


def find(tasks: dict[str, list[Group]]) -> list[Stopped]:
    """Per group, its counted runs that stopped early at their stop score."""
    return [Stopped(task, g, stopped) for task, groups in tasks.items() for g in groups
            if (stopped := [r for r in g.usable if r.stopped_early])]


def headline(found: Sequence[Stopped], tasks: dict[str, list[Group]]) -> str:
    """What stopping early does to the statistics, in one sentence."""
    counted = sum(len(g.usable) for groups in tasks.values() for g in groups)
    stopped = sum(len(s.runs) for s in found)
    compared = any(len(tasks[task]) > 1 for task in {s.task for s in found})
    return (f"{stopped} of the {counted} runs counted stopped early, as soon as a test reached "
            "their stop score (trainer.stop_score), so their final scores are about that "
            "score, not what the runs would reach" + (
                ": the final-score tables and the probabilities of improvement compare where "
                "runs stopped, not how well they learn" if compared else ""))


def group_line(s: Stopped) -> str:
    """``TASK, GROUP: seed 0 at epoch 2 of 19 (last test return -142.6), ...; stop score X``."""
    stops = {_score(r.stop_score) for r in s.runs}
    each = [f"seed {show(r.seed)} at epoch {_epochs(r)} (last test return "
            f"{r.scores[-1]:.4g}" + (f", stop score {_score(r.stop_score)})" if len(stops) > 1
                                     else ")") for r in s.runs]
    tail = f"; stop score {stops.pop()}" if len(stops) == 1 else ""
    return f"{s.task}, {s.group.name}: {', '.join(each)}{tail}"


def advice(found: Sequence[Stopped], tasks: dict[str, list[Group]],
           code: Callable[[str], str] = str) -> str:
    """What to run instead: the runs' own command with the preset, when it can be told
    (``code`` marks it up, as a code span in Markdown)."""
    runs = [r for task in dict.fromkeys(s.task for s in found) for g in tasks[task]
            for r in g.usable]
    command = rerun_command(runs)
    why = (f"for a comparison, train runs that use their whole budget ({NO_STOP}, which "
           f"{PRESET} sets)")
    if command is None:
        return f"{why}: repeat their command with {code(PRESET)} added"
    return f"{why}: {code(command)}"


def rerun_command(runs: Sequence[Run]) -> str | None:
    """The command that trains ``runs`` again without stopping early: their overrides (a key
    that differs between runs swept over its values), the stop score left out and the preset
    added; None when their overrides do not make one command (a key some runs lack, a value
    that would need quoting)."""
    values: dict[str, list[str]] = {}
    keys_per_run = []
    for run in runs:
        keys = set()
        for override in run.overrides:
            if not _PLAIN_OVERRIDE.fullmatch(override):
                return None
            key, _, value = override.partition("=")
            if key.lstrip("+") in _LEFT_OUT:
                continue
            keys.add(key)
            if value not in values.setdefault(key, []):
                values[key].append(value)
        keys_per_run.append(keys)
    if not values or any(keys != set(values) for keys in keys_per_run):
        return None
    sweep = any(len(v) > 1 for v in values.values())
    parts = [f"{k}={','.join(sorted(v, key=natural))}" for k, v in values.items()]
    preset = NO_STOP if any(k.lstrip("+") == "experiment" for k in values) else PRESET
    return " ".join(["rltrain", *(["--multirun"] if sweep else []), *parts, preset])


def _epochs(run: Run) -> str:
    return f"{run.epochs} of {run.max_epochs}" if run.max_epochs else str(run.epochs)


def _score(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g}"
