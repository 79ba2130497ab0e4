"""Figures (matplotlib): each written as PNG and SVG side by side.

Figures are made with ``matplotlib.figure.Figure`` rather than pyplot: no backend to choose,
no global figure registry to close them in, and a report's figures are files only.
``matplotlib.figure`` is imported where a figure is made (:func:`_figure`): it takes 0.34 s,
which ``rltrain-report --help`` should not pay, and it belongs to the ``report`` extra, whose
absence the command reports in one line before it computes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rltrain.commands.report.stats import Curve, Estimate

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: colour-blind-safe (Okabe-Ito), then matplotlib's tab10 for many groups
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
           "#F0E442")
#: matplotlib's tab10 palette, as hex
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
         "#7f7f7f", "#bcbd22", "#17becf")


def _figure() -> tuple[Figure, Axes]:
    """A figure of one axes, laid out to leave room for the legend below it."""
    from matplotlib.figure import Figure  # 0.34 s to import: see the module's text

    fig = Figure(figsize=(8, 5.2), layout="constrained")
    return fig, fig.subplots()


def colour(i: int) -> str:
    return COLOURS[i] if i < len(COLOURS) else TAB10[i % 10]


def curves_figure(path: Path, task: str, steps: np.ndarray, curves: dict[str, Curve],
                  seeds: dict[str, int], threshold: float | None,
                  x_label: str = "env steps") -> list[Path]:
    """One line per group (mean over seeds) with its 95% CI band; the threshold dashed."""
    fig, ax = _figure()
    for i, (name, c) in enumerate(curves.items()):
        label = f"{name} ({seeds[name]} seed{'s' if seeds[name] != 1 else ''})"
        if c.carried:
            label += f", {c.carried} carried forward"
        if len(steps) == 1:
            ax.errorbar(steps, c.mean, yerr=[c.mean - c.low, c.high - c.mean], fmt="o",
                        color=colour(i), label=label, capsize=4)
            continue
        ax.plot(steps, c.mean, color=colour(i), lw=2, label=label)
        ax.fill_between(steps, c.low, c.high, color=colour(i), alpha=0.2, lw=0)
    if threshold is not None:
        _reference_line(ax, threshold, curves)
    ax.set_title(f"{task}: test return, mean over seeds (95% bootstrap CI)")
    ax.set_xlabel(x_label)
    ax.set_ylabel("test return")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useMathText=True)
    ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _save(fig, path)


def _reference_line(ax: Axes, threshold: float, curves: dict[str, Curve]) -> None:
    """The reference score, dashed; named only in the legend when it lies so far from the
    curves that drawing it would flatten them."""
    values = np.concatenate([np.concatenate([c.low, c.high]) for c in curves.values()])
    low, high = np.nanmin(values), np.nanmax(values)
    margin = max(high - low, abs(high) * 0.1, 1e-9)
    if low - margin <= threshold <= high + margin:
        ax.axhline(threshold, color="0.4", ls="--", lw=1, label=f"reference {threshold:g}")
    else:
        where = "above" if threshold > high else "below"
        ax.plot([], [], color="0.4", ls="--", lw=1,
                label=f"reference {threshold:g} ({where} the chart)")


def profile_figure(path: Path, taus: np.ndarray, found: dict[str, Estimate],
                   order: Sequence[str]) -> list[Path]:
    """Performance profiles: the fraction of runs whose normalised score exceeds tau."""
    fig, ax = _figure()
    for i, name in enumerate(order):
        est = found[name]
        ax.plot(taus, est.point, color=colour(i), lw=2, label=name)
        ax.fill_between(taus, est.ci[0], est.ci[1], color=colour(i), alpha=0.2, lw=0)
    ax.axvline(1.0, color="0.4", ls="--", lw=1, label="reference (1)")
    ax.set_title("Performance profiles over tasks (95% bootstrap CI)")
    ax.set_xlabel(r"normalised score $\tau$")
    ax.set_ylabel(r"fraction of runs with score $> \tau$")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _save(fig, path)


def _legend(fig: Figure, ax: Axes) -> None:
    """Below the axes, clear of the curves, in two columns when the names are short."""
    handles, labels = ax.get_legend_handles_labels()
    ncols = 2 if max(map(len, labels)) <= 40 else 1
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize="small",
               frameon=False)


def _save(fig: Figure, path: Path) -> list[Path]:
    written = []
    for suffix in (".png", ".svg"):
        out = path.parent / f"{path.name}{suffix}"
        fig.savefig(out, dpi=120, metadata={"Date": None} if suffix == ".svg" else None)
        written.append(out)
    return written
