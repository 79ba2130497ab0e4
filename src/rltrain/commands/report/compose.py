"""From runs to the report's files: runs.csv, figures, report.md and report.html."""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rltrain import __version__
from rltrain.commands.report import early, plots, render, stats
from rltrain.commands.report.runs import Group, Run, group_runs, natural, show
from rltrain.commands.report.stats import METRICS, Estimate, Reference

#: what a score of one seed shows instead of an interval
ONE_SEED = "1 seed: no interval"


@dataclasses.dataclass
class Settings:
    last: int = 3
    reps: int = 2000
    references: dict[str, Reference] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Outcome:
    """What the console summary tells: the groups per task and where the files are."""

    tasks: dict[str, list[Group]]
    files: list[Path]
    #: warnings for the console: runs that stopped early, whose final scores do not compare
    warnings: list[str] = dataclasses.field(default_factory=list)


def build(runs: Sequence[Run], out: Path, settings: Settings, skipped: Sequence[str] = (),
          inputs: Sequence[Path] = ()) -> Outcome:
    """Write the whole report into ``out`` (which exists); ``skipped`` names the damaged run
    directories that were left out, for the notes."""
    groups, keys = group_runs(runs)
    tasks: dict[str, list[Group]] = {}
    for g in sorted(groups, key=lambda g: (g.task, natural(g.name))):
        if g.usable:
            tasks.setdefault(g.task, []).append(g)
    references = {t: stats.reference_for([r for g in gs for r in g.runs],
                                         settings.references.get(t)) for t, gs in tasks.items()}
    doc = render.Doc("rltrain report")
    used = sum(len(g.usable) for gs in tasks.values() for g in gs)
    where = f" from {', '.join(f'`{p}`' for p in inputs)}" if inputs else ""
    doc.para(f"{used} of {len(runs)} runs{where}: "
             f"{len(tasks)} task{_s(len(tasks))}, {sum(map(len, tasks.values()))} group"
             f"{_s(sum(map(len, tasks.values())))}. Final score: the mean of each run's last "
             f"{settings.last} test returns (`test.return_mean` in `epochs.jsonl`); a run that "
             "stopped early at its stop score is carried forward: its last test return. Intervals: "
             f"95% percentile CIs from rliable's stratified bootstrap over seeds "
             f"({settings.reps:,} resamples). Written {datetime.datetime.now():%Y-%m-%d %H:%M} "
             f"by rltrain-report {__version__}.")
    stopped = early.find(tasks)
    warnings = _early_stop_section(doc, stopped, tasks)
    notes = _notes(groups, skipped)
    files: list[Path] = []
    sections = render.Doc("")
    for task, task_groups in tasks.items():
        files += _task_section(sections, notes, task, task_groups, references[task], settings,
                               out, any(s.task == task for s in stopped))
    if len(tasks) > 1:
        files += _cross_task_section(sections, notes, tasks, references, settings, out)
    doc.heading("Notes")
    doc.bullets(notes or ["none: every run was read, none failed, none was carried forward"])
    doc.heading("Groups")
    doc.para("Runs with the same config but for the seed (and logging or checkpoint settings) "
             "form a group" + (f", named by the keys that differ: {', '.join(map(_code, keys))}."
                               if keys else "."))
    doc.table(["task", "group", "seeds", "runs"],
              [[g.task, g.name, ", ".join(show(r.seed) for r in g.usable) or "none",
                f"{len(g.usable)} of {len(g.runs)}"]
               for g in sorted(groups, key=lambda g: (g.task, natural(g.name)))])
    doc.blocks += sections.blocks
    doc.heading("Runs")
    doc.para("One row per run, failed ones included, in `runs.csv`.")
    files = [out / "runs.csv", out / "report.md", out / "report.html", *files]
    _write_runs_csv(out / "runs.csv", groups, keys, settings.last)
    (out / "report.md").write_text(render.markdown(doc))
    (out / "report.html").write_text(render.page(doc, out))
    return Outcome(tasks, files, warnings)


def _early_stop_section(doc: render.Doc, stopped: list[early.Stopped],
                        tasks: dict[str, list[Group]]) -> list[str]:
    """The report's first section when counted runs stopped early at their stop score (their
    final scores do not compare: :mod:`rltrain.commands.report.early`); returns the same as console
    warnings."""
    if not stopped:
        return []
    headline = early.headline(stopped, tasks)
    doc.heading("Runs stopped early: their final scores do not compare")
    doc.para(f"Warning: {headline}. Their learning curves still show how soon each reached "
             "its stop score.")
    doc.bullets([f"`{r.path}`: {s.task}, {s.group.name}, seed {show(r.seed)}: stopped at "
                 f"epoch {r.epochs}" + (f" of {r.max_epochs}" if r.max_epochs else "")
                 + f", last test return {r.scores[-1]:.4g}, stop score "
                 + ("unknown" if r.stop_score is None else f"{r.stop_score:g}")
                 for s in stopped for r in s.runs])
    doc.para(f"What to do instead: {early.advice(stopped, tasks, code=_code)}.")
    return ["early stop: " + line for line in
            (headline, *(early.group_line(s) for s in stopped), early.advice(stopped, tasks))]


def _task_section(doc: render.Doc, notes: list[str], task: str, groups: list[Group],
                  ref: Reference | None, settings: Settings, out: Path,
                  stopped_early: bool = False) -> list[Path]:
    doc.heading(task)
    if stopped_early:
        doc.para("Warning: runs of this task stopped early at their stop score (see \"Runs "
                 "stopped early\" above): their final scores below are about that score" + (
                     " and do not tell the groups apart." if len(groups) > 1 else
                     ", not what the runs would reach."))
    doc.para(f"Reference score: {ref}." if ref else "No reward threshold and no `--reference`: "
             "scores are not normalised and the optimality gap is not computed.")
    at = stats.grid(groups)
    curves = {g.name: stats.curve(g, at, settings.reps) for g in groups}
    for g in groups:
        c = curves[g.name]
        stopped = sum(r.stopped_early for r in g.usable)
        if stopped:
            notes.append(f"{task}, {g.name}: {stopped} of {len(g.usable)} runs stopped early "
                         "at their stop score; their curves are carried forward with their "
                         "last test return")
        if c.short:
            notes.append(f"{task}, {g.name}: {c.short} of {len(g.usable)} runs end before the "
                         "group's last env step (interrupted or still running); past their "
                         "end the curve averages the other seeds")
    stem = f"curves_{_slug(task)}"
    offline = [any(r.offline for r in g.usable) for g in groups]
    x_label = ("gradient steps" if all(offline) else
               "env steps (offline runs: gradient steps)" if any(offline) else "env steps")
    files = plots.curves_figure(out / stem, task, at, curves,
                                {g.name: len(g.usable) for g in groups}, ref.high if ref else None,
                                x_label)
    doc.figure(stem, f"{task}: mean test return over seeds by {x_label.split(' (')[0][:-1]}, "
                     "95% CI band")
    table = stats.task_table(groups, settings.last, ref.high if ref else None, settings.reps)
    header = ["group", "seeds", *METRICS[: 4 if ref else 3]]
    doc.table(header, [[g.name, str(len(g.usable)),
                        *(_with_ci(table[g.name], i, seeds=len(g.usable))
                          for i in range(len(header) - 2))]
                       for g in groups])
    _one_seed_note(notes, task, [g.name for g in groups if len(g.usable) == 1], len(groups))
    doc.para("Final scores over seeds. IQM: the mean of the middle 50% of runs. Optimality "
             "gap: how far runs fall short of the reference on average (scores above it count "
             "as the reference; lower is better)." if ref else
             "Final scores over seeds. IQM: the mean of the middle 50% of runs.")
    pairs = stats.improvement(groups, settings.last, settings.reps)
    if pairs:
        seeds = {g.name: len(g.usable) for g in groups}
        doc.subheading(f"{task}: probability of improvement")
        doc.table(["X", "Y", "P(X > Y)"], [[x, y, _with_ci(e, 0, 2, min(seeds[x], seeds[y]))]
                                           for x, y, e in pairs])
        doc.para("P(X > Y): the probability that a seed of X ends with a higher final score "
                 "than a seed of Y (ties count half); 0.5 is no difference.")
    return files


def _cross_task_section(doc: render.Doc, notes: list[str], tasks: dict[str, list[Group]],
                        references: dict[str, Reference | None], settings: Settings,
                        out: Path) -> list[Path]:
    scaled = {t: r for t, r in references.items() if stats.normalisable(r)}
    for task, ref in references.items():
        if task not in scaled:
            why = ("has no reward threshold and no `--reference`" if ref is None else
                   f"has reference {ref}, which cannot scale scores (a threshold of zero or "
                   f"below turns their order around; give `--reference {task}=LOW:HIGH`)")
            notes.append(f"{task} {why}: it is reported unnormalised and left out of the "
                         "cross-task aggregates")
    doc.heading("Across tasks")
    if len(scaled) < 2:
        doc.para(f"Cross-task aggregates need two tasks with a reference score; "
                 f"{len(scaled)} {'has' if len(scaled) == 1 else 'have'} one.")
        return []
    doc.para("Scores normalised per task as (score - low) / (reference - low), so that the "
             "reference scores 1: " + "; ".join(f"{t}: {r}" for t, r in scaled.items()) + ".")
    matrices, left_out = stats.cross_task_scores({t: tasks[t] for t in scaled}, scaled,
                                                 settings.last)
    notes += left_out
    if not matrices:
        doc.para("No group has runs on every normalised task.")
        return []
    found = stats.estimates(matrices, stats.aggregate_metrics, settings.reps)
    doc.table(["group", "runs x tasks", *METRICS],
              [[name, f"{m.shape[0]} x {m.shape[1]}", *(_with_ci(found[name], i, 3, m.shape[0])
                                                       for i in range(4))]
               for name, m in matrices.items()])
    _one_seed_note(notes, "across tasks", [name for name, m in matrices.items()
                                           if m.shape[0] == 1], len(matrices))
    doc.para("rliable's aggregates of normalised final scores: mean and median over tasks of "
             "the per-task mean, IQM over all runs and tasks, optimality gap below 1.")
    taus, profiles = stats.profiles(matrices, settings.reps)
    files = plots.profile_figure(out / "performance_profiles", taus, profiles, list(matrices))
    doc.figure("performance_profiles", "Performance profiles: the fraction of runs (all tasks) "
               "whose normalised final score exceeds tau, 95% CI band")
    return files


def _write_runs_csv(path: Path, groups: list[Group], keys: list[str], last: int) -> None:
    header = ["run_dir", "group", *keys, "algo", "env_id", "seed", "status", "final_score",
              "best_score", "env_steps", "wall_time_s", "stopped_early", "in_statistics"]
    rows = []
    for g in groups:
        counted = {id(r) for r in g.usable}
        for r in g.runs:
            summary = r.summary or {}
            best = summary.get("best_score", max(r.scores) if r.scores else None)
            rows.append([str(r.path.resolve()), g.name, *(show(g.config.get(k)) for k in keys),
                         r.algo, r.env_id, show(r.seed), r.status,
                         _csv_num(r.final_score(last) if r.scores else None), _csv_num(best),
                         summary.get("env_step", int(r.steps[-1]) if r.steps else ""),
                         _csv_num(summary.get("wall_time")), str(r.stopped_early).lower(),
                         "yes" if id(r) in counted else "no"])
    render.write_csv(path, header, sorted(rows, key=lambda row: natural(row[0])))


def _notes(groups: list[Group], skipped: Sequence[str]) -> list[str]:
    notes = [f"skipped, cannot be read: {s}" for s in skipped]
    for g in groups:
        for r in g.runs:
            if r.status == "failed":
                error = (r.summary or {}).get("error") or "no error recorded"
                notes.append(f"failed, listed in runs.csv and left out of the statistics: "
                             f"`{r.path}` ({g.name}, seed {show(r.seed)}): {error}")
            elif r.status == "unknown":
                notes.append(f"`{r.path}` has no readable summary.json (still running, or "
                             "killed): its epochs so far are used")
        for r in g.repeats:
            notes.append(f"`{r.path}` repeats seed {show(r.seed)} of {g.name} (same config): "
                         "listed in runs.csv and left out of the statistics, which count one "
                         "run per seed")
    return notes


def _with_ci(est: Estimate, i: int, digits: int | None = None, seeds: int = 2) -> str:
    """``value [low, high]``, all three with the same decimals: ``digits``, else 1 from 100
    up, 2 from 1 up, 3 below. Of one seed (``seeds``) the bootstrap can only draw that seed
    again, an "interval" of the value twice: ``value (1 seed: no interval)`` instead."""
    value, low, high = est.point[i], est.ci[0][i], est.ci[1][i]
    if not np.isfinite(value):
        return "n/a"
    if digits is None:
        size = max(abs(value), abs(low), abs(high))
        digits = 1 if size >= 100 else 2 if size >= 1 else 3
    if seeds == 1:
        return f"{value:,.{digits}f} ({ONE_SEED})"
    return f"{value:,.{digits}f} [{low:,.{digits}f}, {high:,.{digits}f}]"


def _one_seed_note(notes: list[str], where: str, names: list[str], of: int) -> None:
    """A note on the groups of ``where`` (of ``of``) with one seed: what they lack, and how
    to get it."""
    if not names:
        return
    who = (("every group has" if of > 1 else "its group has") if len(names) == of else
           f"{_code(names[0])} has" if len(names) == 1 else
           f"{', '.join(map(_code, names))} have")
    its, curve = ("their", "curves have") if 1 < len(names) < of else ("its", "curve has")
    notes.append(f"{where}: {who} one seed, and one seed gives no confidence interval: {its} "
                 f"scores are shown alone (\"{ONE_SEED}\") and {its} {curve} no band; train "
                 "more seeds of the same config (`rltrain --multirun ... seed=0,1,2`) for "
                 "intervals")


def _csv_num(x: object) -> str:
    return "" if x is None else f"{x:.6g}" if isinstance(x, float) else str(x)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _code(text: str) -> str:
    return f"`{text}`"


def _s(n: int) -> str:
    return "" if n == 1 else "s"
