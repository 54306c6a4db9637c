"""A labelled 2-D map of the models' embeddings (`registry map`).

PCA of the L2-normalised embeddings (SVD of the centred matrix). On unit vectors this is exactly
classical MDS of the chord distances sqrt(2 * cosine distance), so the map shows the geometry that
search and clustering use, it is deterministic, and it says how much it keeps: the variance share
of each axis and the correlation between map distances and embedding distances.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from registry.analytics.clusters import MIN_MODELS
from registry.errors import InputError
from registry.records import METADATA_FIELDS, ModelRecord

if TYPE_CHECKING:
    from indexing.store import Store
    from registry.results import MapResult

__all__ = ["embedding_map", "map_layout", "available_fields", "pca_2d"]


def _field_values(records: list[ModelRecord], field: str) -> list[Any]:
    values = []
    for r in records:
        if field == "name":
            values.append(r.name)
            continue
        value = r.metadata().get(field)
        if isinstance(value, list):
            value = ", ".join(sorted(str(v) for v in value)) or None
        values.append(value)
    return values


def available_fields(records: list[ModelRecord]) -> list[str]:
    """Metadata fields at least one of these models has a value for (an empty tag list is no value)."""
    present = [f for f in METADATA_FIELDS
               if any((getattr(r, f) if f != "tags" else r.tags or None) is not None for r in records)]
    extra = sorted({k for r in records for k, v in r.extra.items() if v is not None} - set(present))
    return present + extra


def pca_2d(z: np.ndarray, *, normalise: bool = True) -> tuple[np.ndarray, dict[str, float]]:
    """(n, 2) coordinates: PCA of the L2-normalised rows (= classical MDS of chord distances), signs
    fixed so that each axis's largest-magnitude coordinate is positive."""
    u = np.asarray(z, dtype=np.float64)
    if normalise:
        u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    centred = u - u.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ vt[:2].T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    for j in range(2):
        if coords[np.argmax(np.abs(coords[:, j])), j] < 0:
            coords[:, j] = -coords[:, j]
    var = s ** 2
    total = float(var.sum())
    share = (var / total) if total > 0 else np.zeros_like(var)
    share = np.pad(share, (0, max(0, 2 - len(share))))
    return coords, {"x": float(share[0]), "y": float(share[1]), "total": float(share[0] + share[1])}


def map_layout(store: "Store", *, color_by: str | None = None, where: str | None = None,
               by: str | None = None) -> dict[str, Any]:
    """The map without its drawing: names, (n, 2) coordinates, the colour field's values (None when
    not coloured), the fields there are, the variance each axis keeps and the distance correlation.
    `registry map` draws it; the web UI's map (/v1/map) serves it."""
    from scipy.spatial.distance import pdist
    from scipy.stats import pearsonr

    from registry.analytics.search import embedded_subset, likeness_kind

    by = likeness_kind(store, by)
    names, z, records = embedded_subset(store, where, need=MIN_MODELS, what="a map", by=by)
    recs = [records[n] for n in names]
    fields = available_fields(recs)
    values = None
    if color_by is not None:
        if color_by not in fields and color_by != "name":
            scope = "the mapped models" if where else "the registry's models"
            raise InputError(f"no model has a value for {color_by!r}; fields present on {scope}: "
                             f"{', '.join(fields) or '(none)'}", field="color_by")
        values = _field_values(recs, color_by)
    # fingerprints: PCA of the raw identity vectors (their Euclidean distance is the one that means something)
    coords, explained = pca_2d(z, normalise=by == "locus")
    unit = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12) if by == "locus" else z
    chord, flat = pdist(unit.astype(np.float64)), pdist(coords)
    fidelity = float(pearsonr(chord, flat)[0]) if len(chord) > 2 and np.ptp(chord) > 0 and np.ptp(flat) > 0 else None
    return {"names": names, "coords": coords, "values": values, "fields": fields, "explained": explained,
            "fidelity": fidelity, "by": by,
            "projection": PROJECTION if by == "locus" else "PCA of the behaviour fingerprints (identity vectors)"}


PROJECTION = "PCA of L2-normalised embeddings (= classical MDS of chord distances sqrt(2 * cosine distance))"


def embedding_map(store: "Store", plot, *, color_by: str | None = None, where: str | None = None,
                  by: str | None = None) -> "MapResult":
    """A labelled 2-D map of the embeddings (PCA of unit vectors), coloured by a metadata field."""
    if plot is None:
        raise InputError("the map needs a file to draw to (plot=FILE.png)", field="plot")
    from registry.results import MapResult

    layout = map_layout(store, color_by=color_by, where=where, by=by)
    names, coords, explained = layout["names"], layout["coords"], layout["explained"]
    from registry.analytics.plots import plot_path, scatter_map

    path = plot_path(plot)
    colouring = scatter_map(path, names, coords, explained, field=color_by, values=layout["values"], where=where)
    return MapResult.model_validate({
        "plot": str(path), "n_models": len(names), "by": layout["by"], "projection": layout["projection"],
        "explained_variance": explained, "distance_correlation": layout["fidelity"], "color_by": color_by,
        "colouring": colouring,
        "coordinates": [{"name": n, "x": float(x), "y": float(y)} for n, (x, y) in zip(names, coords)]})
