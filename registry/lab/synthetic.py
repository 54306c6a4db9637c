"""A synthetic model pool with known ground truth, for tests and the demo. Always labelled synthetic.

Models come in families. Each model has an IRT-style ability per task; each query a difficulty b and
a discrimination a; P(correct) = sigmoid(a * (ability[task] - b)). Bigger models in a family are
better by a task-dependent margin. Planted duplicates are one model behind two endpoints: the copy's
answers are the original's with a few flipped (`duplicate_noise`), and it may be evaluated on
different queries. Query texts are templated per task so a sentence encoder can tell tasks apart.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from registry.records import Evaluation, ModelRecord, Query

__all__ = ["SyntheticPool", "synthetic_pool", "TASK_TEMPLATES"]

SYNTHETIC_TAG = "synthetic"

TASK_TEMPLATES: dict[str, tuple[str, dict[str, list[str]]]] = {
    "math": (
        "Solve for x: {a}x + {b} = {c}. Then report x {op} {d}.",
        {"a": [str(i) for i in range(2, 30)], "b": [str(i) for i in range(1, 90)],
         "c": [str(i) for i in range(100, 400, 7)], "op": ["plus", "minus", "times", "divided by"],
         "d": [str(i) for i in range(2, 12)]},
    ),
    "law": (
        "Under {place} {area} law, is a {thing} signed by a {party} enforceable if {condition}?",
        {"place": ["English", "French", "Delaware", "Californian", "German", "Japanese", "Indian"],
         "area": ["contract", "property", "tort", "employment", "consumer"],
         "thing": ["lease", "promissory note", "non-compete clause", "sales contract", "will"],
         "party": ["minor", "company director", "trustee", "bankrupt debtor", "foreign national"],
         "condition": ["it was never notarised", "consideration was nominal", "it was signed under duress",
                       "the counterparty misrepresented a fact", "it was agreed orally first"]},
    ),
    "biology": (
        "Which {level} process is disrupted when a {organism} {cell} cell lacks functional {molecule}?",
        {"level": ["metabolic", "signalling", "transcriptional", "membrane transport", "cell-cycle"],
         "organism": ["human", "yeast", "plant", "bacterial", "mouse", "zebrafish"],
         "cell": ["liver", "root", "epithelial", "nerve", "muscle", "stem"],
         "molecule": ["ATP synthase", "p53", "insulin receptor", "RNA polymerase II", "aquaporin",
                      "cyclin D", "chlorophyll a", "sodium-potassium pump"]},
    ),
    "history": (
        "What was the main consequence of the {event} of {year} for the {group} of {region}?",
        {"event": ["treaty", "revolt", "famine", "election", "reform act", "trade embargo", "war"],
         "year": [str(y) for y in range(1450, 1990, 11)],
         "group": ["merchants", "peasants", "clergy", "nobility", "workers", "colonists"],
         "region": ["Flanders", "Bengal", "Castile", "Prussia", "the Ottoman Empire", "Peru", "Japan"]},
    ),
    "code": (
        "Write a {lang} function that {action} a {structure} of {item} in {complexity} time.",
        {"lang": ["Python", "Rust", "C++", "Java", "Go", "Haskell"],
         "action": ["sorts", "deduplicates", "reverses", "serialises", "searches", "merges"],
         "structure": ["linked list", "binary tree", "hash map", "array", "priority queue", "graph"],
         "item": ["integers", "strings", "timestamps", "user records", "edges"],
         "complexity": ["linear", "logarithmic", "n log n", "constant amortised"]},
    ),
    "chemistry": (
        "What is the main product when {compound} reacts with {reagent} at {temp} degrees in {solvent}?",
        {"compound": ["ethanol", "benzene", "acetone", "propene", "toluene", "phenol", "acetic acid"],
         "reagent": ["sulfuric acid", "sodium hydroxide", "bromine", "potassium permanganate", "hydrogen"],
         "temp": [str(t) for t in range(0, 200, 15)],
         "solvent": ["water", "ether", "methanol", "hexane", "DMSO"]},
    ),
}


@dataclass
class SyntheticPool:
    queries: list[Query]
    models: list[ModelRecord]
    evaluations: list[Evaluation]
    duplicates: list[tuple[str, str]]  # (original, copy behind another endpoint)
    family_of: dict[str, str]
    ability: dict[str, dict[str, float]]  # model -> task -> ability
    difficulty: dict[str, float] = field(default_factory=dict)  # query id -> b

    def write_triple(self, directory: Path) -> Path:
        """Write queries.csv / models.csv / evals.csv (the triple import format)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        model_id = {m.name: i for i, m in enumerate(self.models)}
        with open(directory / "queries.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["query_id", "task", "text"])
            writer.writerows((q.id, q.task, q.text) for q in self.queries)
        with open(directory / "models.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model_id", "name", "family", "params_b", "provider", "endpoint", "access", "tags"])
            for m in self.models:
                writer.writerow([model_id[m.name], m.name, m.family, m.params_b, m.provider, m.endpoint,
                                 m.access, ",".join(m.tags)])
        with open(directory / "evals.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model_id", "query_id", "score"])
            writer.writerows((model_id[e.model], e.query, int(e.score)) for e in self.evaluations)
        return directory


def _texts(task: str, n: int, rng: np.random.Generator) -> list[str]:
    template, slots = TASK_TEMPLATES[task]
    texts: set[str] = set()
    ordered: list[str] = []
    for _ in range(n * 50):
        text = template.format(**{k: v[rng.integers(len(v))] for k, v in slots.items()})
        if text not in texts:
            texts.add(text)
            ordered.append(text)
            if len(ordered) == n:
                return ordered
    raise ValueError(f"task {task!r} cannot make {n} distinct texts")


def synthetic_pool(
    *,
    n_families: int = 4,
    models_per_family: int = 3,
    tasks: tuple[str, ...] = ("math", "law", "biology", "history", "code", "chemistry"),
    queries_per_task: int = 60,
    n_duplicates: int = 2,
    duplicate_noise: float = 0.05,
    coverage: float = 1.0,
    seed: int = 0,
    family_spread: float = 1.0,
    size_gain: tuple[float, float] = (0.2, 0.6),
    model_noise: float = 0.3,
    family_query_effect: float = 0.0,
) -> SyntheticPool:
    """Build a pool; `coverage` < 1 gives each model a random subset of the queries.

    A model's ability on a task is its family's skill (normal, sd `family_spread`: what the family's
    data taught it) + a size gain per doubling of parameters (uniform in `size_gain`, per family and
    task) + its own noise (sd `model_noise`). A large `family_spread` against small size gains and
    noise makes families that differ in what they are good at, and whose members resemble each other.
    `family_query_effect` > 0 adds a per-query offset shared within a family (normal, that sd): what
    one lineage's training data happened to teach it, question by question."""
    rng = np.random.default_rng(seed)
    unknown = [t for t in tasks if t not in TASK_TEMPLATES]
    if unknown:
        raise ValueError(f"unknown synthetic task(s): {unknown}; known: {sorted(TASK_TEMPLATES)}")

    queries: list[Query] = []
    for task in tasks:
        for i, text in enumerate(_texts(task, queries_per_task, rng)):
            queries.append(Query(id=f"syn-{task}-{i:04d}", text=text, task=task))
    difficulty = rng.normal(0.0, 1.0, len(queries))
    discrimination = rng.lognormal(0.3, 0.3, len(queries))
    task_of = np.array([tasks.index(q.task) for q in queries])

    sizes = [1.0, 7.0, 13.0, 34.0, 70.0]
    models: list[ModelRecord] = []
    abilities: list[np.ndarray] = []
    query_offsets: list[np.ndarray] = []
    family_of: dict[str, str] = {}
    for f in range(n_families):
        family = f"synfam{f}"
        family_skill = rng.normal(0.0, family_spread, len(tasks))  # what this family's data taught it
        gain = rng.uniform(size_gain[0], size_gain[1], len(tasks))  # how much scale helps per task
        offsets = (rng.normal(0.0, family_query_effect, len(queries)) if family_query_effect > 0
                   else np.zeros(len(queries)))
        for k in range(models_per_family):
            params = sizes[k % len(sizes)]
            ability = family_skill + gain * np.log2(params / 7.0) + rng.normal(0.0, model_noise, len(tasks))
            name = f"syn-{family}-{params:g}b"
            models.append(ModelRecord(name=name, family=family, params_b=params, provider=f"lab{f}",
                                      endpoint=f"https://lab{f}.example/{name}", access="open",
                                      tags=[SYNTHETIC_TAG]))
            abilities.append(ability)
            query_offsets.append(offsets)
            family_of[name] = family

    def answers(ability: np.ndarray, offset: np.ndarray) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-discrimination * (ability[task_of] + offset - difficulty)))
        return (rng.random(len(queries)) < p).astype(np.float32)

    outcomes = [answers(a, o) for a, o in zip(abilities, query_offsets)]
    duplicates: list[tuple[str, str]] = []
    for original in rng.choice(len(models), size=min(n_duplicates, len(models)), replace=False):
        source = models[int(original)]
        copy_name = f"{source.name}-mirror"
        flips = rng.random(len(queries)) < duplicate_noise
        outcomes.append(np.where(flips, 1.0 - outcomes[int(original)], outcomes[int(original)]))
        abilities.append(abilities[int(original)])
        models.append(source.model_copy(update={"name": copy_name, "provider": "reseller",
                                                "endpoint": f"https://reseller.example/{copy_name}"}))
        family_of[copy_name] = source.family or ""
        duplicates.append((source.name, copy_name))

    evaluations: list[Evaluation] = []
    for model, scores in zip(models, outcomes):
        seen = rng.random(len(queries)) < coverage if coverage < 1.0 else np.ones(len(queries), bool)
        evaluations.extend(
            Evaluation(model=model.name, query=queries[j].id, score=float(scores[j])) for j in np.flatnonzero(seen)
        )
    return SyntheticPool(
        queries=queries,
        models=models,
        evaluations=evaluations,
        duplicates=duplicates,
        family_of=family_of,
        ability={m.name: dict(zip(tasks, map(float, a))) for m, a in zip(models, abilities)},
        difficulty={q.id: float(b) for q, b in zip(queries, difficulty)},
    )
