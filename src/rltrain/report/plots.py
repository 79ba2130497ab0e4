"""Figures (matplotlib, Agg backend): each written as PNG and SVG side by side."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rltrain.report.stats import Curve, Estimate

#: colour-blind-safe (Okabe-Ito), then matplotlib's tab10 for many groups
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
           "#F0E442")


def _pyplot():  # noqa: ANN202 - matplotlib.pyplot, imported on demand
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colour(i: int) -> str:
    if i < len(COLOURS):
        return COLOURS[i]
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def curves_figure(path: Path, task: str, steps: np.ndarray, curves: dict[str, Curve],
                  seeds: dict[str, int], threshold: float | None,
                  x_label: str = "env steps") -> list[Path]:
    """One line per group (mean over seeds) with its 95% CI band; the threshold dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2), layout="constrained")
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
    return _save(plt, fig, path)


def _reference_line(ax, threshold: float, curves: dict[str, Curve]) -> None:  # noqa: ANN001
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
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2), layout="constrained")
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
    return _save(plt, fig, path)


def _legend(fig, ax) -> None:  # noqa: ANN001
    """Below the axes, clear of the curves, in two columns when the names are short."""
    handles, labels = ax.get_legend_handles_labels()
    ncols = 2 if max(map(len, labels)) <= 40 else 1
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize="small",
               frameon=False)


def _save(plt, fig, path: Path) -> list[Path]:  # noqa: ANN001
    written = []
    try:
        for suffix in (".png", ".svg"):
            out = path.parent / f"{path.name}{suffix}"
            fig.savefig(out, dpi=120, metadata={"Date": None} if suffix == ".svg" else None)
            written.append(out)
    finally:
        plt.close(fig)
    return written
