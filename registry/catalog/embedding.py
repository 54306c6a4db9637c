"""Training the LOCUS encoder on the store, and embedding the store's models with it.

Checkpoints live in `<home>/encoders/<encoder id>/` (weights.safetensors, config.json, and
training.json: which query encoder, split, models and settings produced it). `config.json` of the
home names the active one. An embedding is one forward pass over a model's evaluations: no training.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from encoder.data import EvalData, sample_per_model, split_queries
from indexing.store import HEAVY_MODEL_COLUMNS, MODEL_SCHEMA, MODELS, Store, now_utc
from registry.catalog.dataset import GETS_A_VECTOR, load_eval_data
from registry.errors import InputError, RegistryError
from registry.results import EmbedReport, TrainReport

__all__ = ["TrainReport", "train_encoder", "embed_all", "active_encoder", "ActiveEncoder", "MIN_TRAIN_MODELS",
           "embedding_evals", "models_on_other_encoders", "unembedded_models", "write_embeddings", "progress_printer"]

MIN_TRAIN_MODELS = 3
MIN_EVALS_PER_MODEL = 16
# A model's vector is built from all its evaluations by default: the encoder trains on sets of up to
# 1024, attention pooling carries over to larger sets, and the vector's sampling noise falls
# (scripts/bench_copy_search.py measures it).
DEFAULT_MAX_EMBED_EVALS: int | None = None


@dataclass
class ActiveEncoder:
    encoder_id: str
    locus: Any  # encoder.locus.Locus
    config: Any  # encoder.locus.LocusConfig
    query_encoder: str
    directory: Path
    blend: Any = None  # encoder.blend.Blend of LOCUS, the item table and kNN for routing; None: LOCUS alone
    pool: frozenset = frozenset()  # the models it was trained on (training.json): the blend's reference rows


ROUTER_BLEND = "router_blend.json"


def _fit_router_blend(locus, data: EvalData, train_evals: np.ndarray, split):
    """The router's blend of LOCUS, the item table and kNN over the stored queries
    (`encoder.blend.fit_routing_blend`), fitted on the validation queries from predictions that never saw
    them: LOCUS trained on the training queries, an item table fitted on the training evaluations alone
    (the one stored beside the encoder also learns the validation queries, so its predictions there would
    be in-sample), and the kNN router over the training evaluations, its k, pseudo-count and mode chosen on
    the validation queries (they travel in the blend's settings; a route's kNN reads every stored
    evaluation). New texts reach the item table through its text map, as the validation queries do here.
    None when no validation cell is scored."""
    import dataclasses

    from encoder.blend import fit_routing_blend
    from encoder.data import truth_on
    from encoder.inference import embed_models
    from encoder.router import router_part_predictions

    truth = truth_on(data, split.val)
    if not (~np.isnan(truth)).any():
        return None
    z = embed_models(locus, data, train_evals)
    (val,), knn = router_part_predictions(locus, z, data, train_evals, split.val, (split.val,))
    return dataclasses.replace(fit_routing_blend(val, truth), settings={"knn": knn.settings})


ROUTER_COMPONENTS = ({"locus", "item"}, {"locus", "item", "knn"})  # the second since router kNN


def load_router_blend(directory):
    """The router blend stored beside an encoder (a local or an s3 home's directory), or None (an encoder
    trained before router blends). Encoders trained before the router read kNN blend LOCUS and the item
    table alone."""
    from encoder.blend import Blend
    from encoder.knn import KNNRouter

    path = directory / ROUTER_BLEND
    if not path.is_file():
        return None
    try:
        blend = Blend.from_json(path.read_text("utf-8"))
    except (ValueError, KeyError, TypeError) as err:
        raise RegistryError(f"{path}: {err}") from err
    if set(blend.components) not in ROUTER_COMPONENTS:
        raise RegistryError(f"{path}: a router blend of locus and item (and knn), not {', '.join(blend.components)}")
    if "knn" in blend.components:
        try:
            KNNRouter(tune=False, **blend.settings["knn"])
        except (KeyError, TypeError, ValueError) as err:
            raise RegistryError(f"{path}: its knn settings are not a kNN router's ({err})") from err
    return blend


def _encoders_dir(store: Store) -> Path:
    return store.home / "encoders"


def progress_printer(echo: Callable[[str], None], *, every_seconds: float = 5.0):
    """A train_locus progress callback writing one line per new best, and otherwise at most one line
    every `every_seconds`: epoch, validation loss, best so far, elapsed time."""
    last = [-math.inf]

    def report(p) -> None:
        if not p.improved and p.seconds - last[0] < every_seconds:
            return
        last[0] = p.seconds
        v = p.validation
        echo(f"epoch {p.epoch}/{p.epochs}  train loss {p.loss:.4f}  val loss {v.loss:.4f} (chance "
             f"{v.chance_loss:.4f})  val AUC {v.auc:.3f}  best {p.best_loss:.4f} @ epoch {p.best_epoch}  "
             f"{p.seconds:.0f} s")

    return report


def train_encoder(
    store: Store,
    *,
    query_encoder: str,
    models: list[str] | None = None,
    evals_per_model: int | None = 1024,
    seed: int = 0,
    config: Any = None,
    progress: Callable | None = None,
) -> TrainReport:
    """Train F and G on the training split of the store's queries and make the result active.
    config: an encoder.training.TrainConfig (None: its defaults). progress: a train_locus progress
    callback (see `progress_printer`)."""
    from encoder.checkpoint import save_checkpoint
    from encoder.data import evals_by_model
    from encoder.training import TrainConfig, TrainingError, collapse_warnings, embedding_spread, train_locus

    config = config or TrainConfig()
    store.check_writable()  # before minutes of training, not when its checkpoint is written
    store.check_format()  # before the minutes of training, not after them
    data = load_eval_data(store, query_encoder, models=models)
    split = split_queries(data.n_queries, seed=seed)
    train_evals = sample_per_model(data, split.train, n_per_model=evals_per_model, seed=seed)
    counts = np.bincount(data.model_index[train_evals], minlength=data.n_models)
    usable = [m for m, c in zip(data.models, counts) if c >= MIN_EVALS_PER_MODEL]
    if len(usable) < MIN_TRAIN_MODELS:
        raise RegistryError(
            f"training needs at least {MIN_TRAIN_MODELS} models with {MIN_EVALS_PER_MODEL}+ evaluations on "
            f"training queries; the registry has {len(usable)} ({', '.join(usable) or 'none'})"
        )
    if len(usable) < data.n_models:
        data = data.select_models(usable)
        train_evals = sample_per_model(data, split.train, n_per_model=evals_per_model, seed=seed)
    if config.nproc > min(len(usable), config.models_per_batch):
        raise InputError(f"{config.nproc} training processes for {len(usable)} models (at most "
                         f"{config.models_per_batch} per step): every process needs a model per step; use at most "
                         f"{min(len(usable), config.models_per_batch)}", field="nproc")
    try:
        result = train_locus(data, train_evals, split.val, config=config, seed=seed, progress=progress)
    except TrainingError as err:
        raise RegistryError(f"training failed: {err}") from err
    spread = embedding_spread(result.locus, data, evals_by_model(data, train_evals), seed=seed)
    warnings = collapse_warnings(result.best, spread)
    best = result.best
    nan = float("nan")

    staging = _encoders_dir(store) / f".staging-{time.time_ns()}"
    encoder_id = save_checkpoint(result.locus, result.config, staging)
    # the pool's item table (behaviour fingerprints) on the queries the encoder saw, never its test queries
    from encoder.fingerprint import fit_on_data, save_item_table

    save_item_table(fit_on_data(data, exclude={data.query_ids[q] for q in split.test}), staging)
    blend = _fit_router_blend(result.locus, data, train_evals, split)
    if blend is not None:
        (staging / ROUTER_BLEND).write_text(blend.to_json(), encoding="utf-8")
    (staging / "training.json").write_text(json.dumps({
        "query_encoder": query_encoder, "seed": seed, "evals_per_model": evals_per_model,
        "models": data.models, "n_train_queries": int(len(split.train)), "n_val_queries": int(len(split.val)),
        "test_query_ids": [data.query_ids[q] for q in split.test],
        "best_epoch": result.best_epoch, "epochs_run": len(result.history), "stopped": result.stopped,
        "val_routing_accuracy": result.best_val_routing, "validation": asdict(best) if best else None,
        "embedding_spread": spread, "warnings": warnings,
        "seconds": result.seconds, "train_config": config.to_dict(),
        "router_blend": None if blend is None else {"components": blend.components, "weights": blend.weights,
                                                     "validation_cells": blend.cells, "settings": blend.settings},
    }, indent=2, default=str))
    final = _encoders_dir(store) / encoder_id
    # training.json is written last (and copied last on an s3 home, which has no rename): a directory
    # holding it is a whole checkpoint
    if (final / "training.json").is_file():  # same seed, same data: the same checkpoint is already there
        from indexing.home import remove_tree

        remove_tree(staging)
    else:
        staging.rename(final)
    store.update_config(active_encoder=encoder_id)
    from registry.catalog.fingerprint_store import load_item_table, rewrite_fingerprints

    rewrite_fingerprints(store, load_item_table(store, encoder_id))  # its new item table reads every model afresh
    stale = models_on_other_encoders(store, encoder_id)
    if stale:  # search and route fallbacks read them until then, and an add-model would mix two encoders
        warnings = [*warnings, f"{stale} model(s) keep the previous encoder's vectors until `registry embed --all`"]
    return TrainReport(
        encoder_id=encoder_id, models=data.models, n_train_queries=int(len(split.train)),
        n_val_queries=int(len(split.val)), evals_per_model=evals_per_model, best_epoch=int(result.best_epoch),
        epochs_run=len(result.history), stopped=result.stopped, val_routing_accuracy=float(result.best_val_routing),
        val_loss=best.loss if best else nan, val_chance_loss=best.chance_loss if best else nan,
        val_auc=best.auc if best else nan, embedding_spread=float(spread["ratio"]), warnings=warnings,
        seconds=float(result.seconds), checkpoint=str(final))


def active_encoder(store: Store, encoder_id: str | None = None) -> ActiveEncoder:
    """The checkpoint named by the home's config (or `encoder_id`), loaded and verified."""
    from encoder.checkpoint import load_checkpoint

    return _load_active(store, encoder_id, load_checkpoint)


def active_predictor(store: Store, encoder_id: str | None = None) -> ActiveEncoder:
    """`active_encoder` with the predictor G in numpy (`encoder.predictor`) in place of the torch Locus:
    a route reads only G, and importing torch cost a cold `registry route` about a second. The checkpoint
    is verified alike (its id recomputed from its contents)."""
    from encoder.predictor import load_predictor

    return _load_active(store, encoder_id, load_predictor)


def _load_active(store: Store, encoder_id: str | None, load) -> ActiveEncoder:
    encoder_id = encoder_id or store.config.get("active_encoder")
    if not encoder_id:
        raise RegistryError("no active encoder: run `registry train` first")
    directory = _encoders_dir(store) / encoder_id
    if not directory.is_dir():
        raise RegistryError(f"encoder {encoder_id} is not in {_encoders_dir(store)}")
    model, config, loaded_id = load(directory)
    if loaded_id != encoder_id:
        raise RegistryError(f"checkpoint in {directory} has id {loaded_id}, not {encoder_id}")
    info = json.loads((directory / "training.json").read_text("utf-8"))
    return ActiveEncoder(encoder_id, model, config, info["query_encoder"], directory, load_router_blend(directory),
                         frozenset(info.get("models") or ()))

def unembedded_models(store: Store) -> list[str]:
    """The models without a vector (imported, not yet embedded: `registry embed --all` embeds them)."""
    table = store.read(MODELS, ["name", "encoder_id"])
    return sorted(n for n, e in zip(table.column("name").to_pylist(), table.column("encoder_id").to_pylist()) if not e)


def models_on_other_encoders(store: Store, encoder_id: str) -> int:
    """How many models carry vectors of an encoder other than `encoder_id` (after a train, until `embed --all`)."""
    column = store.read(MODELS, ["encoder_id"]).column("encoder_id").to_pylist()
    return sum(1 for e in column if e and e != encoder_id)


def embedding_evals(data: EvalData, *, max_evals: int | None, seed: int = 0) -> list[np.ndarray]:
    """Per model, the evaluations its embedding is built from: all, or a seeded sample of
    `max_evals` (the encoder was trained on sets up to that size)."""
    from encoder.data import evals_by_model

    rng = np.random.default_rng(seed)
    per_model = evals_by_model(data, np.arange(len(data.scores)))
    if max_evals is None:
        return per_model
    return [np.sort(rng.choice(e, size=max_evals, replace=False)) if len(e) > max_evals else e for e in per_model]


def embed_all(store: Store, *, max_evals: int | None = DEFAULT_MAX_EMBED_EVALS, seed: int = 0) -> EmbedReport:
    """Embed every model with evaluations using the active encoder; write vectors to the models table."""
    from encoder.inference import embed_models

    active = active_encoder(store)
    data = load_eval_data(store, active.query_encoder)
    if data.query_vectors.shape[1] != active.config.query_dim:
        raise RegistryError(f"encoder {active.encoder_id} reads {active.config.query_dim}-d query vectors; "
                            f"{active.query_encoder} gives {data.query_vectors.shape[1]}-d")
    per_model = embedding_evals(data, max_evals=max_evals, seed=seed)
    vectors = embed_models(active.locus, data, per_model)  # (M, d), NaN for a model without evaluations
    report = write_embeddings(store, active.encoder_id, data.models, vectors, [len(e) for e in per_model])
    held = np.bincount(data.model_index, minlength=data.n_models)
    left_out = unvectored_warning(data.unvectored, dict(zip(data.models, held.tolist())), active.query_encoder)
    if left_out:
        report.warnings.append(left_out)
    return report


def unvectored_warning(lost: dict[str, int], kept: dict[str, int], query_encoder: str) -> str | None:
    """What an embedding left out because a query had no vector from the query encoder (stored with
    --no-encode, say): the models (`lost`: name -> evaluations left out; `kept`: name -> evaluations
    read), how many of their evaluations, and how to encode them."""
    lost = {name: n for name, n in lost.items() if n}
    if not lost:
        return None
    parts = []
    for name, n in sorted(lost.items()):
        k = int(kept.get(name, 0))
        parts.append(f"{name} ({n} of {n + k}{'' if k else ', not embedded'})")
    shown = ", ".join(parts[:10]) + (f" and {len(parts) - 10} more" if len(parts) > 10 else "")
    return (f"{len(parts)} model(s) have evaluations on queries with no {query_encoder} vector, left out of their "
            f"embeddings: {shown}; {GETS_A_VECTOR}")


def write_embeddings(store: Store, encoder_id: str, names: list[str], vectors: np.ndarray,
                     n_evals: list[int], *, expect_versions: dict[str, int] | None = None) -> EmbedReport:
    """Write one vector per named model (rows of `vectors`, (M, d)) and its fingerprint (the item table
    beside `encoder_id`, `registry.catalog.fingerprint_store`) to the models table and a version row each, in one
    transaction: the generation token changes with it, so the saved FAISS index is
    rebuilt. Every engine (single process, Ray) writes through here. Names no longer in the models
    table, and non-finite vectors, are skipped. `expect_versions` (table -> version the vectors were
    computed from) refuses the write when another writer changed one of those tables meanwhile."""
    from indexing.store import VERSION_SCHEMA, VERSIONS
    from registry.catalog.fingerprint_store import fingerprint_columns, load_item_table
    from registry.catalog.rows import version_row

    now = now_utc()
    with store.transaction():
        if expect_versions:
            current = store.versions()
            moved = sorted(t for t, v in expect_versions.items() if current.get(t) != v)
            if moved:
                raise RegistryError(f"the registry changed while embedding ({', '.join(moved)} written by another "
                                    f"writer); nothing was written: run the embed again")
        rows = {r["name"]: r for r in store.read(MODELS, without=HEAVY_MODEL_COLUMNS).to_pylist()}  # rewritten below
        embedded = []
        for name, z, n in zip(names, vectors, n_evals):
            if name not in rows or not np.isfinite(z).all():
                continue
            row = dict(rows[name])
            row.update(vector=np.asarray(z, dtype=np.float32).tolist(), encoder_id=encoder_id, n_evals=int(n),
                       embedded_at=now)
            embedded.append(row)
        # both vectors in the same transaction: the fingerprint from the evaluations as they are now
        prints = fingerprint_columns(store, load_item_table(store, encoder_id), [r["name"] for r in embedded])
        for row in embedded:
            row.update(prints[row["name"]])
        # a model whose vectors come out as stored keeps its row and gets no history row: running
        # `embed --all` again is not a new version of anything
        updated = [row for row in embedded if not _same_embedding(rows[row["name"]], row)]
        if updated:
            store.upsert(MODELS, updated, MODEL_SCHEMA, "name", insert=False)
            store.append(VERSIONS, [version_row(row, "embed", now) for row in updated], VERSION_SCHEMA)
    from registry.evidence import is_thin, thin_models_warning

    counts = {r["name"]: int(r["n_evals"]) for r in embedded}
    warning = thin_models_warning(counts, embedded=True)
    return EmbedReport(encoder_id=encoder_id, n_embedded=len(embedded), unchanged=len(embedded) - len(updated),
                       n_evals=counts,
                       low_evidence=sorted(n for n, c in counts.items() if is_thin(c)),
                       warnings=[warning] if warning else [])


def _same_embedding(stored: dict, fresh: dict) -> bool:
    """Whether a models-table row already holds `fresh`'s vectors (the same encoder, evaluation count,
    item table, and vectors equal up to float32 rounding: add-model's forward pass of one model and
    embed --all's batches differ in the last bits, 2.4e-6 on a vector of norm 10 in a reviewer's run)."""
    if any(stored.get(k) != fresh.get(k) for k in ("encoder_id", "n_evals", "table_id")):
        return False
    for column in ("vector", "fingerprint"):
        a, b = stored.get(column), fresh.get(column)
        if (a is None) != (b is None):
            return False
        if a is not None and (len(a) != len(b) or not np.allclose(a, b, rtol=1e-5, atol=1e-5)):
            return False
    return True
