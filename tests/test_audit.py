"""The duplicate audit: the calibrated decision on synthetic pools, and the command over a registry."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import own_evaluations, synthetic_registry
from registry import Registry
from registry.analytics.audit_stats import MIN_EVIDENCE, PoolEvals, calibrate, evidence, holm_level, label, prefer_best_match


# ------------------------------------------------------------------ the decision, from evaluations alone
def _pool(abilities: np.ndarray, n_queries: int, seed: int, *, tasks: int = 4, spread: float = 1.5,
          shift: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores (M, Q), task (Q,), P(right) (M, Q)): distinct models, independent given the query."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(shift, spread, n_queries)
    task = rng.integers(0, tasks, n_queries)
    bias = rng.normal(0, 0.3, (len(abilities), tasks))  # each model has its own task profile
    p = 1 / (1 + np.exp(-(abilities[:, None] + bias[:, task] - difficulty[None, :])))
    return (rng.random(p.shape) < p).astype(float), task, p


def _copy(y: np.ndarray, p: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """`y` with about `rate` of its scores changed as re-sampling would: a right answer turns wrong
    with probability c (1 - p), a wrong one right with probability c p, c set for the rate."""
    rng = np.random.default_rng(seed)
    change = y * (1 - p) + (1 - y) * p
    c = min(1.0, rate * len(y) / change.sum())
    flip = rng.random(len(y)) < c * change
    return np.where(flip, 1.0 - y, y)


def _labels(scores, task, names, pairs, *, alpha=0.01, max_noise=0.12):
    pool = PoolEvals.from_dense(names, scores, task)
    cal = calibrate(pool)
    decided = {(a, b): evidence(cal, names[a], *pool.rows[a], names[b], *pool.rows[b], max_noise=max_noise)
               for a, b in pairs}
    level = holm_level([d.p_excess for d in decided.values() if d.p_excess is not None], alpha)
    out = {(names[a], names[b]): label(cal, d, names[a], names[b], level=level, alpha=alpha, max_noise=max_noise)
           for (a, b), d in decided.items()}
    prefer_best_match(out)
    return out


def _fixed_tolerance_flags(scores, pairs, tolerance=0.10, alpha=0.01):
    """What the audit did before: flag unless disagreement is significantly above a fixed 10%."""
    from scipy.stats import binom

    flagged = set()
    for a, b in pairs:
        d = np.abs(scores[a] - scores[b])
        if binom.sf(int(d.sum()) - 1, len(d), tolerance) >= alpha:
            flagged.add((a, b))
    return flagged


@pytest.mark.parametrize("kind", ["strong", "skewed"])
def test_calibrated_decision_flags_copies_and_not_distinct_models(kind):
    """Strong pool: distinct models ~90% right, disagreeing on ~10%. Skewed: ~11% positives, weak
    models agreeing on ~90%+. Copies with 3-8% of answers changed are flagged as duplicates and no
    distinct pair is, where a fixed 10% tolerance flags distinct pairs wholesale."""
    m, q = 24, 4000
    rng = np.random.default_rng(1)
    if kind == "strong":
        abilities, spread, shift = rng.normal(3.6, 0.4, m), 2.5, 0.0
    else:
        abilities, spread, shift = rng.normal(-4.0, 0.5, m), 3.0, 0.0
    scores, task, p = _pool(abilities, q, seed=2, spread=spread, shift=shift)
    copies = []
    for c, (orig, rate) in enumerate([(0, 0.03), (5, 0.05), (11, 0.08)]):
        scores = np.vstack([scores, _copy(scores[orig], p[orig], rate, seed=c)])
        p = np.vstack([p, p[orig]])
        copies.append((orig, m + c))
    names = [f"m{i}" for i in range(len(scores))]
    acc = np.nanmean(scores[:m])
    assert (0.85 < acc < 0.95) if kind == "strong" else (0.07 < acc < 0.15)
    pairs = [(a, b) for a in range(len(names)) for b in range(a + 1, len(names))]
    labels = _labels(scores, task, names, pairs)
    flagged = {key for key, d in labels.items() if d.label != "cleared"}
    assert flagged == {(names[a], names[b]) for a, b in copies}
    assert all(labels[(names[a], names[b])].label == "duplicate" for a, b in copies)
    dup = labels[(names[0], names[m])]
    assert dup.stats.kappa > 0.5 and "far beyond chance" in dup.reason and dup.null_pairs >= 40
    # today's fixed tolerance: many distinct pairs pass as one model
    distinct = [(a, b) for a, b in pairs if b < m]
    assert len(_fixed_tolerance_flags(scores, distinct)) > 20


def test_many_copies_of_one_model_are_flagged_and_leave_distinct_pairs_alone():
    """A model behind many resellers: 8 copies, each with 3% of its answers re-drawn. Their 36 pairs were
    a quarter of the null's sample and set the distinct models' spread (every copy pair cleared); pairs the
    audit cannot tell from one model answering twice are no sample of distinct models now."""
    m, q = 16, 2000
    abilities = np.random.default_rng(7).normal(0.5, 0.8, m)
    scores, task, p = _pool(abilities, q, seed=8)
    group = [3] + list(range(m, m + 8))
    scores = np.vstack([scores] + [_copy(scores[3], p[3], 0.03, seed=20 + c) for c in range(8)])
    names = [f"m{i}" for i in range(len(scores))]
    pairs = [(a, b) for a in range(len(names)) for b in range(a + 1, len(names))]
    labels = _labels(scores, task, names, pairs)
    copy_pairs = {(names[a], names[b]) for a in group for b in group if a < b}
    assert all(labels[key].label != "cleared" for key in copy_pairs), \
        {key: labels[key].label for key in copy_pairs if labels[key].label == "cleared"}
    assert all(d.label == "cleared" for key, d in labels.items() if key not in copy_pairs)


def test_a_model_replaced_since_the_calibration_is_judged_by_its_new_answers():
    """The cached calibration kept a replaced model's fitted abilities: a weak model replaced by another's
    independent answers then looked like that model's copy (p 5e-12 against 0.11 when calibrated afresh)."""
    m, q = 16, 2000
    abilities = np.linspace(-1.5, 1.5, m)
    scores, task, p = _pool(abilities, q, seed=9)
    names = [f"m{i}" for i in range(m)]
    pool = PoolEvals.from_dense(names, scores, task)
    cal = calibrate(pool)
    np.testing.assert_array_equal(cal.theta_of("m0", *pool.rows[0]), cal.theta[0])  # unchanged: the fitted ones
    idx, y = pool.rows[0]
    swapped = y.copy()
    right, wrong = np.flatnonzero(y == 1)[0], np.flatnonzero(y == 0)[0]
    swapped[[right, wrong]] = swapped[[wrong, right]]  # as many right, on other queries: not the calibrated answers
    assert not np.array_equal(cal.theta_of("m0", idx, swapped), cal.theta[0])
    strong = (np.random.default_rng(10).random(q) < p[m - 1]).astype(float)  # m0 replaced: m15's abilities
    replaced = PoolEvals.from_dense(["m0"], strong[None], task).rows[0]
    refit = cal.theta_of("m0", *replaced)
    assert refit.mean() > cal.theta[0].mean() + 1.5  # its new abilities, not the weak model's
    stale = evidence(cal, "m0", *replaced, "m15", *pool.rows[m - 1], max_noise=0.12)
    fresh = calibrate(PoolEvals.from_dense(names, np.vstack([strong, scores[1:]]), task))
    judged = evidence(fresh, "m0", *replaced, "m15", *pool.rows[m - 1], max_noise=0.12)
    assert stale.p_excess > 1e-3 and abs(stale.stats.kappa - judged.stats.kappa) < 0.1


def test_a_systematically_different_relative_is_same_product_line_not_duplicate():
    m, q = 20, 3000
    abilities = np.random.default_rng(3).normal(1.0, 0.5, m)
    scores, task, p = _pool(abilities, q, seed=4)
    rng = np.random.default_rng(5)
    successor = scores[0].copy()
    # a new snapshot: better on task 0, worse on task 1, otherwise the same answers
    for t, value in ((0, 0.0), (1, 1.0)):
        idx = np.flatnonzero((task == t) & (successor == value))
        successor[rng.choice(idx, len(idx) // 6, replace=False)] = 1.0 - value
    scores = np.vstack([scores, successor])
    names = [f"m{i}" for i in range(m + 1)]
    d = _labels(scores, task, names, [(0, m), (1, 2)])
    assert d[("m0", f"m{m}")].label == "same product line?" and "lean one way" in d[("m0", f"m{m}")].reason
    assert d[("m1", "m2")].label == "cleared"


def test_no_shared_queries_falls_back_to_task_by_difficulty_homogeneity():
    m, q = 12, 2400
    abilities = np.linspace(-1.5, 1.5, m)
    scores, task, p = _pool(abilities, q, seed=6)
    half = np.random.default_rng(7).permutation(q)
    copy = np.full(q, np.nan)
    copy[half[: q // 2]] = scores[3, half[: q // 2]]
    scores[3, half[: q // 2]] = np.nan  # the original keeps the other half: no query in common
    scores[0, half[: q // 2]] = np.nan  # and so does a weaker distinct model
    scores = np.vstack([scores, copy])
    names = [f"m{i}" for i in range(m + 1)]
    d = _labels(scores, task, names, [(3, m), (0, m)])
    same, other = d[("m3", f"m{m}")], d[("m0", f"m{m}")]
    assert same.stats.shared == 0 and same.label == "duplicate" and same.stats.homogeneity_p > 0.01
    assert "no shared queries" in same.reason and same.split_pass_rate is not None
    assert other.label == "cleared" and "differ across" in other.reason


def test_holm_level_steps_down():
    # sorted p against alpha / (n - i) = 0.0125, 0.0167, 0.025, 0.05: 0.001 and 0.012 pass, 0.03 stops it
    assert holm_level([0.03, 0.5, 0.001, 0.012], 0.05) == 0.012
    assert holm_level([0.2, 0.5], 0.05) == 0.0 and holm_level([], 0.05) == 0.0


# ------------------------------------------------------------------ over a registry: CLI and API
@pytest.fixture(scope="module")
def trained_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("audit") / "home"
    synthetic_registry(home, train_epochs=20, n_families=3, models_per_family=3, queries_per_task=40,
                       tasks=("math", "law", "biology", "code"), n_duplicates=0, seed=2)
    return home


@pytest.fixture
def reg(trained_home, tmp_path) -> Registry:
    copy = tmp_path / "home"
    shutil.copytree(trained_home, copy)
    return Registry.open(copy)


def _run(home, *args, code=0):
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.output


def test_audit_flags_a_planted_copy_and_says_why(reg):
    from registry.analytics.audit import AuditReport

    evals = own_evaluations(reg, "syn-synfam2-13b")
    reg.add_model("mirror-of-13b", evals)
    flipped = [{"query": e["query"], "score": 1.0 - e["score"]} if i % 3 == 0 else e for i, e in enumerate(evals)]
    reg.add_model("noisy-13b", flipped)  # a third of the answers flipped: not one model
    report = reg.audit()
    assert isinstance(report, AuditReport) and report.k == 10 and not report.calibration.cached
    pairs = {frozenset((f.a, f.b)): f for f in report.flags}
    mirror = pairs[frozenset(("mirror-of-13b", "syn-synfam2-13b"))]
    assert mirror.label == "duplicate" and mirror.evidence.disagreement_rate == 0.0
    assert "far beyond chance" in mirror.reason and mirror.evidence.null_pairs > 0
    assert all("noisy-13b" not in (f.a, f.b) or f.label != "duplicate" for f in report.flags)
    assert [(f.a, f.b) for f in report.duplicates] == [(mirror.a, mirror.b)]
    # --model: the CI call for one endpoint, on the cached calibration
    one = reg.audit(model="mirror-of-13b", k=3)
    assert one.model == "mirror-of-13b" and one.calibration.cached
    judged = one.flags + one.cleared + one.untested
    assert all(p.a == "mirror-of-13b" for p in judged)
    # its 3 nearest by embedding and its 3 nearest by fingerprint, each pair once
    assert 3 <= one.candidates == len({p.b for p in judged}) <= 6
    by = {p.b: p.proposed_by for p in judged}
    assert by["syn-synfam2-13b"] == "both" and "fingerprint" in by.values()
    assert sum(v in ("embedding", "both") for v in by.values()) == 3
    # the fingerprint's candidates are the behaviour index's 3 nearest from the model's stored vector
    from registry.analytics.search import behaviour_neighbours
    from registry.catalog.fingerprint_store import load_item_table

    nearest = [n for n, _ in behaviour_neighbours(reg.store, load_item_table(reg.store), "mirror-of-13b", 3)]
    assert {b for b, v in by.items() if v in ("fingerprint", "both")} == set(nearest)
    assert [p.b for p in one.duplicates] == ["syn-synfam2-13b"]
    assert one.by_fingerprint and report.by_fingerprint


def test_without_an_item_table_the_embedding_alone_proposes(reg):
    from encoder.fingerprint import ITEM_TABLE_CONFIG, ITEM_TABLE_WEIGHTS

    reg.add_model("mirror-of-13b", own_evaluations(reg, "syn-synfam2-13b"))
    encoder_dir = reg.store.home / "encoders" / reg.store.config["active_encoder"]
    for name in (ITEM_TABLE_CONFIG, ITEM_TABLE_WEIGHTS):
        (encoder_dir / name).unlink()  # an encoder trained before item tables
    from registry.catalog.fingerprint_store import rewrite_fingerprints

    rewrite_fingerprints(reg.store, None)  # ... whose models therefore have no fingerprint column
    one = reg.audit(model="mirror-of-13b", k=3)
    judged = one.flags + one.cleared + one.untested
    assert not one.by_fingerprint and one.candidates == 3
    assert {p.proposed_by for p in judged} == {"embedding"}
    assert [p.b for p in one.duplicates] == ["syn-synfam2-13b"]
    out = _run(reg.store.home, "audit", "--model", "mirror-of-13b", "-k", "3", code=0)
    assert "(3 nearest neighbours, cosine)" in out


def test_cli_json_validates_and_fail_flags(reg):
    from registry.analytics.audit import AuditReport

    reg.add_model("mirror-of-13b", own_evaluations(reg, "syn-synfam2-13b"))
    out = _run(reg.home, "audit", "--json")
    report = AuditReport.model_validate_json(out)
    assert report.duplicates and json.loads(out)["flags"][0]["evidence"]["disagreement_rate"] == 0.0
    _run(reg.home, "audit", "--fail-on-flag", code=1)
    _run(reg.home, "audit", "--fail-on-related", code=1)
    text = _run(reg.home, "audit", "--model", "mirror-of-13b", "-k", "2")
    assert "DUPLICATE mirror-of-13b ~ syn-synfam2-13b" in text and "cached" in text
    reg.remove("mirror-of-13b")
    clean = AuditReport.model_validate_json(_run(reg.home, "audit", "--json", "--fail-on-flag"))
    assert not clean.duplicates


def test_audit_refuses_bad_arguments_naming_the_option(reg):
    from registry import InputError, NotFoundError

    assert "--alpha" in _run(reg.home, "audit", "--alpha", "0", code=2)
    assert "--max-noise" in _run(reg.home, "audit", "--max-noise", "1.5", code=2)
    assert "--neighbours" in _run(reg.home, "audit", "-k", "0", code=2)
    assert "closest: syn-synfam2-13b" in _run(reg.home, "audit", "--model", "syn-synfam2-13", code=2)
    with pytest.raises(InputError, match="field 'alpha'"):
        reg.audit(alpha=1.0)
    with pytest.raises(InputError, match="field 'k'"):
        reg.audit(k=0)
    with pytest.raises(NotFoundError):
        reg.audit(model="nobody")
    assert MIN_EVIDENCE == 30


def test_a_symmetric_pair_no_closer_than_the_pools_distinct_relatives_it_could_miss_is_not_called_duplicate():
    """A successor snapshot of m0 (systematic changes: provably distinct) agrees with m0 far beyond chance. A
    re-served copy that agrees less than such a relative is not told apart from it ("same product line?")
    when its own symmetry test could have missed a lean like the relative's; one that agrees more is a
    duplicate. A relative that leans hard one way (a quantised copy, say) is no ceiling for copies whose
    symmetric answers rule such a lean out: it used to demote every copy below its kappa, so one degraded
    copy in a pool hid its true duplicates."""
    m, q = 20, 3000
    abilities = np.random.default_rng(3).normal(1.0, 0.5, m)
    scores, task, p = _pool(abilities, q, seed=4)
    rng = np.random.default_rng(6)
    strong = scores[0].copy()  # a tenth of task 0's right answers turned wrong, of task 1's wrong ones right
    mild = _copy(scores[0], p[0], 0.06, seed=9)  # re-sampled, then a thirtieth the same way
    for successor, share in ((strong, 10), (mild, 30)):
        for t, value in ((0, 0.0), (1, 1.0)):
            idx = np.flatnonzero((task == t) & (successor == value))
            successor[rng.choice(idx, len(idx) // share, replace=False)] = 1.0 - value
    close, loose = _copy(scores[5], p[5], 0.02, seed=7), _copy(scores[11], p[11], 0.10, seed=8)
    names = [f"m{i}" for i in range(m)] + ["successor", "close", "loose"]
    pairs = [(0, m), (5, m + 1), (11, m + 2)]
    hard = _labels(np.vstack([scores, strong, close, loose]), task, names, pairs)
    soft = _labels(np.vstack([scores, mild, close, loose]), task, names, pairs)
    for d in (hard, soft):
        assert d[("m0", "successor")].label == "same product line?" and d[("m0", "successor")].stats.symmetry_p < 0.01
        dup, relative = d[("m5", "close")], d[("m11", "loose")]
        assert dup.stats.kappa > d[("m0", "successor")].stats.kappa > relative.stats.kappa > 0.3
        assert min(dup.stats.symmetry_p, relative.stats.symmetry_p) >= 0.01  # both symmetric
        assert dup.label == "duplicate"
    assert "above the pool's closest distinct relatives (m0 ~ successor" in soft[("m5", "close")].reason
    # the mild successor's lean could pass as symmetric over loose's 254 discordant answers: not told apart
    assert soft[("m11", "loose")].label == "same product line?"
    assert soft[("m11", "loose")].relatives_pair == ("m0", "successor")
    assert "no more than distinct models of this pool agree" in soft[("m11", "loose")].reason
    # the strong one's could not: loose is a duplicate below it
    assert hard[("m11", "loose")].label == "duplicate" and hard[("m11", "loose")].relatives_pair != ("m0", "successor")
    assert "m0 ~ successor agree more (kappa 0.899) but lean one way" in hard[("m11", "loose")].reason


def test_search_by_behaviour_puts_a_copy_first(reg):
    """A copy with a tenth of its answers re-drawn, under a new name: by behaviour its original is its
    first neighbour, with the agreement that put it there; the CLI prints it and refuses a vector."""
    from registry import InputError

    evals = own_evaluations(reg, "syn-synfam1-7b")
    rng = np.random.default_rng(0)
    changed = [{"query": e["query"], "score": float(rng.random() < 0.5)} if i % 10 == 0 else e
               for i, e in enumerate(evals)]
    reg.add_model("endpoint-x", changed)
    by_behaviour = reg.similar("endpoint-x", k=3, by="behaviour")
    first = by_behaviour.neighbours[0]
    assert by_behaviour.by == "fingerprint" and first.name == "syn-synfam1-7b"
    assert first.shared_queries == len(evals) and first.agreement_kappa > 0.7
    assert all(n.agreement_kappa < first.agreement_kappa for n in by_behaviour.neighbours[1:])
    assert reg.similar("endpoint-x", k=3, by="locus").neighbours[0].agreement_kappa is None  # no evidence read
    text = _run(reg.home, "search", "endpoint-x", "--by", "behaviour", "-k", "2")
    assert text.splitlines()[0] == "by fingerprint (euclidean)"
    assert "kappa" in text.splitlines()[1] and "syn-synfam1-7b" in text.splitlines()[2]
    with pytest.raises(InputError, match="field 'by'"):
        reg.similar(np.zeros(4, dtype=np.float32), by="behaviour")
    with pytest.raises(InputError, match="field 'by'"):
        reg.similar("endpoint-x", by="ability")


def test_behaviour_order_ranks_by_distance_and_keeps_the_rest_in_index_order():
    from registry.analytics.search import behaviour_order

    hits = ["a", "b", "c", "d", "e"]
    assert behaviour_order(hits, [(0.3, 1), None, (0.1, 5), (0.3, 1), None]) == ["c", "a", "d", "b", "e"]  # ties: index order
    assert behaviour_order(hits[:3], [(0.0, 0.2), (0.0, 0.1), (0.1, 0.0)]) == ["b", "a", "c"]  # at 0, by the gap
    assert behaviour_order(hits, [None] * 5) == hits


def test_a_calibration_made_while_a_write_lands_says_it_is_stale(reg, monkeypatch):
    """The calibration records the store's generation it was read in: a write landing while it reads the
    pool (another process; here one from inside the read) leaves it marked stale, not current."""
    import registry.analytics.audit as audit

    real, landed = audit.pool_evaluations, []

    def read_then_write(store, names):
        out = real(store, names)
        if not landed:
            landed.append(None)
            landed[0] = Registry.open(reg.home).add_model("late-arrival", own_evaluations(reg, "syn-synfam0-1b")).version
        return out

    monkeypatch.setattr(audit, "pool_evaluations", read_then_write)
    report = reg.audit()
    assert landed == [1] and not report.calibration.cached and report.calibration.stale
