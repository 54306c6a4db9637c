"""A labelled 2-D map of the models (`registry map`): the distances `registry clusters` cuts, drawn flat.

By LOCUS: PCA of the L2-normalised embeddings (SVD of the centred matrix), which on unit vectors is
exactly classical MDS of the chord distances sqrt(2 * cosine distance). By fingerprint: classical MDS
(Torgerson) of the behaviour distances (`registry.analytics.search.fingerprint_distances`: how often two
models' answers disagree), the same matrix the clusters are cut from, so two models drawn close are two
that answer alike. Either way the map is deterministic and says how much it keeps: the share of each
axis (of the variance; by fingerprint, of the positive eigenvalues) and the correlation between map
distances and the distances it draws.
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

__all__ = ["embedding_map", "map_layout", "available_fields", "pca_2d", "classical_mds"]


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
    coords = _fix_signs(coords)
    var = s ** 2
    total = float(var.sum())
    share = (var / total) if total > 0 else np.zeros_like(var)
    share = np.pad(share, (0, max(0, 2 - len(share))))
    return coords, {"x": float(share[0]), "y": float(share[1]), "total": float(share[0] + share[1])}


def _fix_signs(coords: np.ndarray) -> np.ndarray:
    """Each axis's largest-magnitude coordinate positive: the same map whatever sign the solver returned."""
    for j in range(coords.shape[1]):
        if coords[np.argmax(np.abs(coords[:, j])), j] < 0:
            coords[:, j] = -coords[:, j]
    return coords


def classical_mds(d: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """(n, 2) coordinates whose distances best keep the (n, n) distances `d` (Torgerson's classical MDS:
    the top two eigenvectors of the double-centred -d^2 / 2, scaled by the roots of their eigenvalues),
    and each axis's share of the positive eigenvalues (a non-Euclidean `d` has negative ones too)."""
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    centre = np.eye(n) - 1.0 / n
    gram = -0.5 * centre @ (d ** 2) @ centre
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)  # ascending
    top = values[::-1][:2].clip(min=0.0)
    coords = vectors[:, ::-1][:, :2] * np.sqrt(top)
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
        top = np.pad(top, (0, 2 - len(top)))
    positive = float(values[values > 0].sum())
    share = top / positive if positive > 0 else np.zeros(2)
    return _fix_signs(coords), {"x": float(share[0]), "y": float(share[1]), "total": float(share[0] + share[1])}


def map_layout(store: "Store", *, color_by: str | None = None, where: str | None = None,
               by: str | None = None) -> dict[str, Any]:
    """The map without its drawing: names, (n, 2) coordinates, the colour field's values (None when
    not coloured), the fields there are, the variance each axis keeps and the distance correlation.
    `registry map` draws it; the web UI's map (/v1/map) serves it."""
    from scipy.spatial.distance import pdist
    from scipy.stats import pearsonr

    from scipy.spatial.distance import squareform

    from registry.analytics.search import embedded_subset, fingerprint_distances, likeness_kind, without_vector_note

    by = likeness_kind(store, by)
    without: list[str] = []
    names, z, records = embedded_subset(store, where, need=MIN_MODELS, what="a map", by=by, without=without)
    recs = [records[n] for n in names]
    fields = available_fields(recs)
    values = None
    if color_by is not None:
        if color_by not in fields and color_by != "name":
            scope = "the mapped models" if where else "the registry's models"
            raise InputError(f"no model has a value for {color_by!r}; fields present on {scope}: "
                             f"{', '.join(fields) or '(none)'}", field="color_by")
        values = _field_values(recs, color_by)
    if by == "locus":
        coords, explained = pca_2d(z)
        unit = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
        drawn, metric = pdist(unit.astype(np.float64)), "cosine"
    else:
        d, metric = fingerprint_distances(store, names, z)
        coords, explained = classical_mds(d)
        drawn = squareform(d, checks=False)
    flat = pdist(coords)
    fidelity = float(pearsonr(drawn, flat)[0]) if len(drawn) > 2 and np.ptp(drawn) > 0 and np.ptp(flat) > 0 else None
    return {"names": names, "coords": coords, "values": values, "fields": fields, "explained": explained,
            "fidelity": fidelity, "by": by, "projection": PROJECTIONS[metric][0], "title": PROJECTIONS[metric][1],
            "share_of": "the variance" if by == "locus" else "the positive eigenvalues",
            "without_vector": without, "note": without_vector_note(without, by, "the map")}


# per distance drawn: what the projection is (the result's and the web UI's words), and the figure's title
PROJECTIONS = {
    "cosine": ("PCA of L2-normalised embeddings (= classical MDS of chord distances sqrt(2 * cosine distance))",
               "PCA of L2-normalised embeddings (classical MDS of cosine geometry)"),
    "behaviour": ("classical MDS of the behaviour distances, how often two models' answers disagree: the "
                  "distances registry clusters cuts", "classical MDS of the behaviour distances"),
    "euclidean": ("classical MDS of the fingerprint identity distances (this home's indexes are not of its "
                  "active item table)", "classical MDS of the fingerprint identity distances"),
}


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
    colouring = scatter_map(path, names, coords, explained, field=color_by, values=layout["values"], where=where,
                            what="LOCUS model embeddings" if layout["by"] == "locus" else "models by fingerprint",
                            projection=layout["title"], share_of=layout["share_of"])
    return MapResult.model_validate({
        "plot": str(path), "n_models": len(names), "by": layout["by"], "projection": layout["projection"],
        "explained_variance": explained, "share_of": layout["share_of"], "without_vector": layout["without_vector"],
        "note": layout["note"], "distance_correlation": layout["fidelity"],
        "color_by": color_by,
        "colouring": colouring,
        "coordinates": [{"name": n, "x": float(x), "y": float(y)} for n, (x, y) in zip(names, coords)]})
