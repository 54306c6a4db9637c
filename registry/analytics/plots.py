"""Figures for `registry clusters --plot` and `registry map --plot` (matplotlib, Agg backend).

Imported only when a plot is asked for, so the CLI starts without matplotlib. Figures scale with the
number of models (font size and figure size), names stay readable, and every axis says its units.
"""
from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["dendrogram_heatmap", "scatter_map"]

DPI = 150
_MISSING = "#b0b0b0"
_BRANCH_GREYS = ("#4d4d4d", "#a6a6a6")  # dendrogram clusters: greys, as family colours label the leaves


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _one_glyph_warning(draw):
    """`draw` with matplotlib's "Glyph N (...) missing from font(s)" warnings (one per character per text
    drawn: ten lines for one CJK name) said once: which characters the font lacks, shown as boxes."""

    @functools.wraps(draw)
    def quietly(*args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = draw(*args, **kwargs)
        missing, other = [], []
        for w in caught:
            found = re.match(r"Glyph (\d+) .*missing from", str(w.message))
            if found:
                missing.append(chr(int(found.group(1))))
            else:
                other.append(w)
        for w in other:  # as they came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if missing:
            shown = "".join(dict.fromkeys(missing))
            warnings.warn(f"the plot's font has no glyph for {len(shown)} character(s) of the names ({shown[:20]}"
                          f"{'...' if len(shown) > 20 else ''}): they show as boxes", UserWarning, stacklevel=2)
        return result

    return quietly


def _font_size(n: int) -> float:
    return float(max(4.5, min(9.0, 300.0 / max(n, 1))))


def _palette(n: int) -> list:
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    cmap = colormaps["tab20"]  # its dark shades first: the pale ones are hard to read as text
    shades = [cmap(i) for i in range(0, 20, 2)] + [cmap(i) for i in range(1, 20, 2)]
    return [shades[i % 20] for i in range(n)]


def _save(fig, path: Path) -> None:
    from registry.errors import InputError

    try:
        fig.savefig(path, dpi=DPI)
    except ValueError as err:  # an extension matplotlib cannot write
        raise InputError(str(err), field="plot") from None
    except OSError as err:  # a folder that exists but cannot be written (read-only, no permission, full)
        raise InputError(f"cannot write the plot at {path} ({err.strerror or err})", field="plot") from None
    finally:
        _pyplot().close(fig)


@_one_glyph_warning
def dendrogram_heatmap(path: Path, names: list[str], d: np.ndarray, tree: dict[str, Any], *,
                       families: list[str | None], linkage: str, heights_label: str,
                       where: str | None = None, what: str = "LOCUS embeddings",
                       distance: str = "cosine distance") -> None:
    """One figure: the dendrogram (left, leaves labelled and coloured by family, branches coloured by
    cluster, the cut marked) beside the distance heatmap in dendrogram order (clusters boxed)."""
    from matplotlib.patches import Patch, Rectangle
    from scipy.cluster import hierarchy

    plt = _pyplot()
    n = len(names)
    fs = _font_size(n)
    height = max(5.5, 0.2 * n + 3.0)
    fig = plt.figure(figsize=(max(10.0, 0.2 * n + 8.0), height), layout="constrained")
    grid = fig.add_gridspec(1, 3, width_ratios=[1.0, 2.2, 0.07])
    ax_d, ax_h, ax_c = fig.add_subplot(grid[0]), fig.add_subplot(grid[1]), fig.add_subplot(grid[2])

    k, cut = tree["k"], tree["cut_height"]
    # Branches inside a cluster alternate between two greys (black above the cut): colour is kept for
    # the families in the leaf names, so that one colour never means two things.
    hierarchy.set_link_color_palette(list(_BRANCH_GREYS))
    try:
        with plt.rc_context({"lines.linewidth": 1.2}):
            dendro = hierarchy.dendrogram(tree["Z"], orientation="left", labels=names, ax=ax_d, leaf_font_size=fs,
                                          color_threshold=cut if k > 1 else 0, above_threshold_color="#000000")
    finally:
        hierarchy.set_link_color_palette(None)
    order = [names.index(leaf) for leaf in dendro["ivl"]]
    handles = []
    if 1 < k < n:
        handles.append(ax_d.axvline(cut, color="#000000", linestyle="--", linewidth=1, label=f"cut: {k} clusters"))
    # square-root axis: low merges (inside clusters) stay visible beside the root's height
    ax_d.set_xscale("function", functions=(lambda x: np.sqrt(np.maximum(x, 0.0)), lambda x: np.square(x)))
    top = float(tree["Z"][:, 2].max())
    if top > 0:
        ticks = sorted({float(f"{top * (i / 4) ** 2:.2g}") for i in range(5)})
        ax_d.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
    unit = heights_label if len(heights_label) < 40 else distance
    ax_d.xaxis.tick_top()
    ax_d.xaxis.set_label_position("top")
    ax_d.set_xlabel(f"merge height, \u221a scale\n({unit})", fontsize=8)
    for side in ("left", "bottom"):
        ax_d.spines[side].set_visible(False)

    # names coloured by family: the clusters (branches) against the metadata (labels)
    known = sorted({f for f in families if f is not None})
    colour_of = dict(zip(known, _palette(len(known)))) if known and len(known) <= 20 else {}
    if colour_of:
        for label in ax_d.get_yticklabels():
            family = families[names.index(label.get_text())]
            label.set_color(colour_of.get(family, "#333333"))
        handles += [Patch(color=colour_of[f], label=f) for f in known]
    if handles:
        ax_d.legend(handles=handles, title="family (name colour)" if colour_of else None, fontsize=min(fs, 8),
                    title_fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.005), frameon=False,
                    ncol=max(1, min(3, (len(handles) + 5) // 6)))

    # Rows follow the dendrogram's leaves (bottom to top, aligned with it); columns run top leaf to
    # bottom leaf, so that the diagonal (each model against itself) runs top-left to bottom-right.
    matrix = d[np.ix_(order, order[::-1])]
    off = d[np.ix_(order, order)][~np.eye(n, dtype=bool)]
    top_d = float(off.max()) if off.size and off.max() > 0 else 1.0
    image = ax_h.imshow(matrix, cmap="viridis_r", vmin=0.0, vmax=top_d,
                        origin="lower", aspect="auto", interpolation="nearest", extent=(0, n, 0, 10 * n))
    ax_h.set_ylim(ax_d.get_ylim())
    ax_h.set_yticks([])
    ax_h.set_xticks(np.arange(n) + 0.5, [names[i] for i in order[::-1]], rotation=90, fontsize=fs)
    ax_h.set_xlim(0, n)
    labels = tree["labels"]
    start = 0
    for i in range(1, n + 1):
        if i == n or labels[order[i]] != labels[order[start]]:
            if i - start > 1:  # black on a white halo: visible on every shade of the colour map
                for colour, width in (("#ffffff", 2.6), ("#000000", 1.2)):
                    ax_h.add_patch(Rectangle((n - i, 10 * start), i - start, 10 * (i - start), fill=False,
                                             edgecolor=colour, linewidth=width))
            start = i
    ax_h.set_title(f"{distance} between the models (dendrogram order; clusters boxed)", fontsize=10)
    bar = fig.colorbar(image, cax=ax_c)
    bar.set_label(distance, fontsize=9)

    subtitle = f"; models where {where}" if where else ""
    sil, coph = tree["silhouette"], tree["cophenetic_correlation"]
    fig.suptitle(f"Model families: hierarchical clustering ({linkage} linkage) of {n} {what}{subtitle}\n"
                 f"{k} clusters" + (f" (mean silhouette {sil:.2f})" if sil is not None else "")
                 + (f", cophenetic correlation {coph:.2f}" if coph is not None else ""), fontsize=11)
    _save(fig, path)


def _is_numeric(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return (bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
            and len(set(present)) > 2)


def _place_labels(ax, fig, coords: np.ndarray, names: list[str], fs: float) -> list:
    """Names beside their points, none covering another: each label takes the nearest free spot among
    positions around its point at growing distances (a leader line joins it to a far spot). Boxes are
    measured by the renderer, not estimated. Returns the annotations (their boxes are what a test checks)."""
    from matplotlib.font_manager import FontProperties

    fig.canvas.draw()  # fixes the layout (colourbar, legend) so that data -> pixels is final
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    to_points = 72.0 / fig.dpi
    xy = ax.transData.transform(coords) * to_points
    frame = ax.get_window_extent(renderer)
    x0, y0, x1, y1 = (frame.x0 * to_points, frame.y0 * to_points, frame.x1 * to_points, frame.y1 * to_points)
    font = FontProperties(size=fs)
    sizes = []
    for name in names:
        w, h, _ = renderer.get_text_width_height_descent(name, font, ismath=False)
        sizes.append((w * to_points + 2.0, max(h * to_points, fs) + 2.0))  # 1 pt of air on each side
    placed: list[tuple[float, float, float, float]] = []
    dots = [(x - 3.0, y - 3.0, x + 3.0, y + 3.0) for x, y in xy]

    def overlap(box, others) -> float:
        total = 0.0
        for o in others:
            w = min(box[2], o[2]) - max(box[0], o[0])
            h = min(box[3], o[3]) - max(box[1], o[1])
            if w > 0 and h > 0:
                total += w * h
        return total

    annotations = []
    order = np.lexsort((xy[:, 0], -xy[:, 1]))
    for i in order:
        w, h = sizes[i]
        candidates = []  # (dx, dy) of the box's lower-left corner from the point, nearest first
        for ring in range(12):
            r = ring * h
            for ux, uy in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1)):
                dx = 4.0 + r if ux > 0 else -4.0 - w - r if ux < 0 else -w / 2
                dy = 3.0 + r if uy > 0 else -h - 3.0 - r if uy < 0 else -h / 2
                candidates.append((dx, dy))
        best, best_cost = None, None
        for dx, dy in candidates:
            box = (xy[i, 0] + dx, xy[i, 1] + dy, xy[i, 0] + dx + w, xy[i, 1] + dy + h)
            outside = (max(0.0, x0 - box[0]) + max(0.0, box[2] - x1)) * h + (
                max(0.0, y0 - box[1]) + max(0.0, box[3] - y1)) * w
            cost = 100.0 * overlap(box, placed) + overlap(box, dots[:i] + dots[i + 1:]) + 10.0 * outside
            if best_cost is None or cost < best_cost - 1e-9:
                best, best_cost = (dx, dy, box), cost
            if cost == 0:
                break
        dx, dy, box = best
        placed.append(box)
        far = abs(dx) > w + 8.0 or abs(dy) > 1.5 * h
        annotations.append(ax.annotate(
            names[i], coords[i], xytext=(dx + 1.0, dy + 1.0), textcoords="offset points", fontsize=fs,
            ha="left", va="bottom", color="#222222",
            arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.5, "shrinkA": 0, "shrinkB": 2}
            if far else None))
    return annotations


@_one_glyph_warning
def scatter_map(path: Path, names: list[str], coords: np.ndarray, explained: dict[str, float], *,
                field: str | None, values: list[Any] | None, where: str | None = None,
                what: str = "LOCUS model embeddings",
                projection: str = "PCA of L2-normalised embeddings (classical MDS of cosine geometry)",
                share_of: str = "the variance") -> dict[str, Any]:
    """The labelled 2-D map; categorical fields get a legend, numeric ones a colour map and bar.
    Returns how points were coloured."""
    from matplotlib.colors import LogNorm, Normalize

    plt = _pyplot()
    n = len(names)
    fs = max(4.5, min(7.5, 260.0 / max(n, 1)))
    fig, ax = plt.subplots(figsize=(11, 8), layout="constrained")
    colouring: dict[str, Any] = {"kind": "none"}
    missing = np.array([v is None for v in values]) if values is not None else np.zeros(n, dtype=bool)
    if values is None:
        ax.scatter(coords[:, 0], coords[:, 1], s=36, color="tab:blue", edgecolor="white", linewidth=0.6, zorder=3)
    elif _is_numeric(values):
        present = np.array([float(v) for v in values if v is not None])
        log = bool(present.min() > 0 and present.max() / present.min() >= 10)
        norm = (LogNorm if log else Normalize)(vmin=float(present.min()), vmax=float(present.max()))
        have = ~missing
        points = ax.scatter(coords[have, 0], coords[have, 1], c=present, cmap="viridis", norm=norm, s=40,
                            edgecolor="white", linewidth=0.6, zorder=3)
        bar = fig.colorbar(points, ax=ax, shrink=0.8)
        bar.set_label(field + (" (log scale)" if log else ""), fontsize=9)
        if log:
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

            lo, hi = float(present.min()), float(present.max())
            nice = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
                    for m in (1, 2, 5)]
            bar.ax.yaxis.set_major_locator(FixedLocator([t for t in nice if lo <= t <= hi] or [lo, hi]))
            bar.ax.yaxis.set_minor_locator(NullLocator())
            bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if missing.any():
            ax.scatter(coords[missing, 0], coords[missing, 1], s=36, facecolor="none", edgecolor=_MISSING,
                       linewidth=1.0, zorder=3, label=f"no {field}")
            ax.legend(fontsize=8, loc="best")
        colouring = {"kind": "numeric", "scale": "log" if log else "linear", "missing": int(missing.sum())}
    else:
        counts: dict[str, int] = {}
        for v in values:
            if v is not None:
                counts[str(v)] = counts.get(str(v), 0) + 1
        categories = sorted(counts, key=lambda c: (-counts[c], c))
        colours = _palette(len(categories))
        markers = "osD^v<>ph*"
        for j, category in enumerate(categories):
            rows = np.array([v is not None and str(v) == category for v in values])
            marker = markers[(j // 20) % len(markers)]  # past 20 colours, shapes tell categories apart
            ax.scatter(coords[rows, 0], coords[rows, 1], s=44, color=colours[j], marker=marker,
                       edgecolor="white", linewidth=0.6, zorder=3, label=f"{category} ({counts[category]})")
        if missing.any():
            ax.scatter(coords[missing, 0], coords[missing, 1], s=36, facecolor="none", edgecolor=_MISSING,
                       linewidth=1.0, zorder=3, label=f"no {field} ({int(missing.sum())})")
        ax.legend(title=field, fontsize=8, title_fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  frameon=False, ncol=1 if len(categories) <= 25 else 2)
        colouring = {"kind": "categorical", "categories": categories, "missing": int(missing.sum())}

    span = np.ptp(coords, axis=0)
    span = np.where(span > 0, span, 1.0)
    ax.set_xlim(coords[:, 0].min() - 0.1 * span[0], coords[:, 0].max() + 0.2 * span[0])
    ax.set_ylim(coords[:, 1].min() - 0.08 * span[1], coords[:, 1].max() + 0.08 * span[1])
    ax.set_xlabel(f"axis 1: {100 * explained['x']:.1f}% of {share_of}", fontsize=9)
    ax.set_ylabel(f"axis 2: {100 * explained['y']:.1f}% of {share_of}", fontsize=9)
    ax.grid(True, color="#eeeeee", zorder=0)
    scope = f" (models where {where})" if where else ""
    by = f", coloured by {field}" if field else ""
    ax.set_title(f"Map of {n} {what}{scope}{by}\n{projection}; the two axes keep "
                 f"{100 * explained['total']:.1f}% of {share_of}",
                 fontsize=10)
    _place_labels(ax, fig, coords, names, fs)
    _save(fig, path)
    return colouring


def plot_path(plot) -> Path:
    """Where a plot goes: `plot` with `.png` when it has no suffix, its folder created."""
    from registry.checks import check_path
    from registry.errors import InputError

    path = Path(check_path(plot, "plot")).expanduser()
    if path.suffix == "":
        path = path.with_suffix(".png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a parent that is a file, a read-only or missing mount
        raise InputError(f"cannot write the plot at {path}: its folder {path.parent} cannot be made "
                         f"({err.strerror or err})", field="plot") from None
    if path.is_dir():
        raise InputError(f"cannot write the plot at {path}: it is a folder", field="plot")
    return path
