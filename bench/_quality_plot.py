"""Running (rolling-window) prequential curves of every learner, one panel per stream."""

from __future__ import annotations

import math
from pathlib import Path

from bench._quality_learners import Outcome
from bench._quality_streams import Stream
from streamlearn.online.evaluate import rolling

STYLE = {  # learner -> (label, colour, width)
    "linear": ("River linear", "tab:blue", 1.0),
    "hat": ("River HAT", "tab:green", 1.0),
    "arf": ("River ARF", "tab:olive", 1.0),
    "knn": ("River kNN", "tab:purple", 1.0),
    "inproc": ("streamlearn in-process", "tab:orange", 1.6),
    "service": ("streamlearn service", "tab:red", 2.0),
}


def plot(curves: dict[str, tuple[Stream, dict[str, Outcome]]], window: int, path: Path) -> Path:
    """One panel per stream; abrupt concept changes as dotted lines. Returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    cols = min(4, max(1, len(curves)))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (name, (stream, outcomes)) in zip(axes.flat, curves.items(), strict=False):
        w = max(10, min(window, stream.n // 5))
        for kind, outcome in outcomes.items():
            label, colour, width = STYLE[kind]
            ax.plot(rolling(outcome.scores, w), label=label, color=colour, linewidth=width)
        for at in stream.changes:
            ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        metric = "accuracy" if stream.classification else "MAE"
        ax.set_title(f"{name} ({metric}, last {w})", fontsize=9)
        ax.tick_params(labelsize=7)
        if not stream.classification:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
    for ax in list(axes.flat)[len(curves) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))  # room for the legend
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
