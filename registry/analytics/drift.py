"""Drift: does a model's newest version behave like its earlier versions?

An endpoint can change behind one name (a new snapshot, a quantised deployment, another model). Each
version's evaluations are in `evaluation_log` (registry.catalog.evaluation_log); the newest version's
are compared with the model's answers as they stood before it (per query, the latest earlier score:
logged, or an imported row older than the newest version).

The null hypothesis is "the same model, re-run": its answers may change where it is unsure, in both
directions alike, and no more than a re-run does. The tests, each from the audit (one function, not a copy):

- shared queries (at least `MIN_EVIDENCE` answered by both sides), the audit's calibrated evidence
  (registry.analytics.audit_stats.evidence) on the pair (earlier, newest):
  * symmetry: the stratified McNemar test within tasks. A re-run changes right->wrong as often as
    wrong->right (per query both have probability p(1-p)); a quantised copy, or answers taken from a
    model of another task profile, lean one way.
  * noise: more changed answers than `max_noise`, the audit's ceiling for one model re-run (12%).
  * homogeneity: when both sides also answered queries the other did not, the task x difficulty
    homogeneity test on those.
- otherwise (the queries differ), the behaviour fingerprint: the identity distance between the
  fingerprints of the two sides (RMS logit difference over the item table's probe queries) against
  the model's own resampling spread, the distances between random splits of its pooled evaluations
  within each task, each side keeping its task mix (a permutation test: exact when each side's queries
  of a task are alike draws; sides with no task in common are left untested), and the audit's
  homogeneity test.

"moved" when any test run has p <= alpha / (tests run) (Bonferroni): an unchanged model raises a false
alarm with probability at most alpha. One alpha for every pool (`registry.defaults.AUDIT_ALPHA`); nothing is
tuned per data set.
What no test on answers can see: a change that moves answers symmetrically, in the amount a re-run
does, where the model is unsure (e.g. a small share of answers from a model of the same task profile).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

import numpy as np

from indexing.store import EVALUATIONS, MODELS, VERSIONS, Store
from registry.analytics.audit_stats import MIN_EVIDENCE, Calibration, evidence
from registry.catalog.rows import read_evaluations
from registry.checks import check_count, check_fraction
from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE, DRIFT_PERMUTATIONS, MAX_DRIFT_PERMUTATIONS
from registry.results import DriftReport, DriftRun, DriftTest

__all__ = ["drift", "drift_refined", "judge", "MARKER_KEY", "MARKER_ROWS_KEY"]

MARKER_KEY = "last_drift_run"  # config.json: when `audit --drift` last ran
MARKER_ROWS_KEY = "last_drift_log_rows"  # config.json: the evaluation_log rows it had read (see drift_refined)


class FingerprintItems:
    """The item table's parameters of the queries a comparison touches: `f` (n, r), `b` (n,) row i for
    query index `idx[i]` of the calibration (sorted)."""

    def __init__(self, table, idx: np.ndarray, f: np.ndarray, b: np.ndarray) -> None:
        self.table, self.idx, self.f, self.b = table, idx, f, b

    def rows(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(self.idx, q)
        return self.f[at], self.b[at]


def _fingerprint_test(items: FingerprintItems, ia, ya, ib, yb, *, task_a, task_b, permutations: int,
                      seed: int) -> tuple[float, float, float] | None:
    """(distance, p, median null distance) of the two sides' fingerprints against random splits of their
    pooled evaluations within each task, each side keeping its number of evaluations of every task; None
    when fewer than MIN_EVIDENCE evaluations of either side are in tasks both sides answered.

    Within tasks: the factor model does not carry every task's own level, so fingerprints fitted on two
    different task mixes differ even for one model, and a split that ignored tasks reached p = 0.0025 for
    unchanged models refined on tasks they had not answered. Holding each side's task mix in every split
    puts that difference in the null too; sides with no task in common leave nothing to permute."""
    fa, ba = items.rows(ia)
    fb, bb = items.rows(ib)
    f, b, y = np.concatenate([fa, fb]), np.concatenate([ba, bb]), np.concatenate([ya, yb])
    table = items.table
    side = np.concatenate([np.zeros(len(ia), bool), np.ones(len(ib), bool)])
    task = np.concatenate([np.asarray(task_a), np.asarray(task_b)])
    mixed = [g for g in (np.flatnonzero(task == t) for t in np.unique(task)) if 0 < side[g].sum() < len(g)]
    in_mixed = np.concatenate(mixed) if mixed else np.zeros(0, np.int64)
    if min(int((~side[in_mixed]).sum()), int(side[in_mixed].sum())) < MIN_EVIDENCE:
        return None

    def distance(newest: np.ndarray) -> float:
        a, c = np.flatnonzero(~newest), np.flatnonzero(newest)
        theta = np.stack([table.fingerprint(f[a], b[a], y[a]), table.fingerprint(f[c], b[c], y[c])])
        v = table.identity_vectors(theta)
        return float(np.linalg.norm(v[0] - v[1]))

    observed = distance(side)
    rng = np.random.default_rng(seed)
    null = np.empty(permutations)
    split = side.copy()
    for i in range(permutations):
        for g in mixed:
            split[g] = side[g][rng.permutation(len(g))]
        null[i] = distance(split)
    p = (1.0 + float((null >= observed).sum())) / (permutations + 1.0)
    return observed, p, float(np.median(null))


def judge(cal: Calibration, name: str, before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray],
          *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE, items: FingerprintItems | None = None,
          calibrated_rows: dict | None = None, permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> dict:
    """The drift decision from evaluations alone (no store): `before` / `after` are (query index into
    `cal`'s queries, sorted and unique; score). Returns DriftReport's fields other than the versions'."""
    ia, ya = before
    ib, yb = after
    d = evidence(cal, f"{name}@earlier", ia, ya, f"{name}@newest", ib, yb, max_noise=max_noise, alpha=alpha,
                 calibrated_rows=calibrated_rows)
    s = d.stats
    tests: list[DriftTest] = []
    because = None  # why the fingerprint test could not run, when that leaves no test
    out: dict = {"shared_queries": s.shared, "newest_evaluations": int(len(ib)), "earlier_evaluations": int(len(ia)),
                 "alpha": alpha}
    if s.shared >= MIN_EVIDENCE:
        out.update(method="shared queries", changed_rate=s.disagreement, right_to_wrong=s.a_right_b_wrong,
                   wrong_to_right=s.b_right_a_wrong, kappa=s.kappa, accuracy_before=s.accuracy_a,
                   accuracy_after=s.accuracy_b)
        if s.symmetry_p is not None:
            stat = float(_chi2_isf(s.symmetry_p, s.symmetry_strata))
            tests.append(DriftTest(test="symmetry", statistic=stat, p_value=s.symmetry_p, detail=(
                f"{s.a_right_b_wrong} answers went right->wrong and {s.b_right_a_wrong} wrong->right, over "
                f"{s.symmetry_strata} task {'stratum' if s.symmetry_strata == 1 else 'strata'} (a re-run changes both ways alike)")))
        tests.append(DriftTest(test="noise", statistic=s.disagreement, p_value=d.p_above_max_noise, detail=(
            f"{s.disagreement:.1%} of {s.shared} shared answers changed (a re-run changes at most "
            f"{max_noise:.0%})")))
        # not the audit's per-task noise test (p_task_above_max_noise): as a third test it cost power on changes
        # spread over tasks (alpha split three ways) and alarmed on an honest re-run whose changes gathered in a task
        # the model is unsure of (docs/results/drift.md's rerun-fp-5% on BFCL, 1 of 71; note 30)
    elif items is not None and min(len(ia), len(ib)) >= MIN_EVIDENCE:
        fingerprint = _fingerprint_test(items, ia, ya, ib, yb, task_a=cal.task[ia], task_b=cal.task[ib],
                                        permutations=permutations, seed=seed)
        if fingerprint is None:
            because = (f"the two sides have fewer than {MIN_EVIDENCE} evaluations each in tasks both "
                                       "answered: a fingerprint from other tasks cannot tell a change from the task mix")
        else:
            dist, p, null = fingerprint
            out.update(method="fingerprint", fingerprint_distance=dist, fingerprint_null_median=null)
            tests.append(DriftTest(test="fingerprint", statistic=dist, p_value=p, detail=(
                f"fingerprint distance {dist:.3f} between the two sides; random splits of the model's own "
                f"{len(ia) + len(ib)} evaluations within tasks: median {null:.3f} ({permutations} splits)")))
    if s.homogeneity_p is not None:
        out.setdefault("method", "fingerprint" if s.shared < MIN_EVIDENCE else "shared queries")
        tests.append(DriftTest(test="homogeneity", statistic=float(_chi2_isf(s.homogeneity_p, s.homogeneity_strata)),
                               p_value=s.homogeneity_p, detail=(
            f"on the {s.only_a} / {s.only_b} queries only one side answered, accuracies by task x difficulty "
            f"over {s.homogeneity_strata} {'stratum' if s.homogeneity_strata == 1 else 'strata'}")))
    out["tests"] = tests
    if not tests:
        out.update(status="untested", moved=None, sentence=(
            f"{name}: no test could run ({s.shared} shared queries, {len(ia)} earlier and {len(ib)} newest "
            + (f"evaluations; {because})" if because else
               f"evaluations; a test needs {MIN_EVIDENCE} shared, or {MIN_EVIDENCE} each side and an item table)")))
        return out
    level = alpha / len(tests)
    deciding = min(tests, key=lambda t: t.p_value)
    moved = deciding.p_value <= level
    out.update(level=level, statistic=deciding.statistic, p_value=deciding.p_value, moved=moved,
               status="moved" if moved else "not moved")
    if moved:
        out["sentence"] = (f"{name} moved: {deciding.detail}; p={deciding.p_value:.2g} <= {level:.2g}, which an "
                           f"unchanged model reaches with probability at most {alpha:g}.")
    else:
        # the resampling spread is the fingerprint test's yardstick only; each other test says its own in `detail`
        beyond = " beyond its own resampling spread" if deciding.test == "fingerprint" else ""
        out["sentence"] = (f"{name} did not move{beyond}: {deciding.detail}; smallest "
                           f"p={deciding.p_value:.2g} > {level:.2g} ({len(tests)} test(s) at alpha {alpha:g}).")
    return out


def _chi2_isf(p: float, df: int) -> float:
    from scipy.special import chdtri

    return float(chdtri(df, min(max(p, 1e-300), 1.0)))


# ---------------------------------------------------------------- from the store
def _versions_of(store: Store, name: str):
    """(newest version, its (query ids, scores), earlier (query ids, scores), earlier version numbers),
    or None when there is nothing to compare."""
    from registry.catalog.evaluation_log import read_log

    log = read_log(store, name).to_pylist()
    if not log:
        return None, None, None, []
    newest = max(r["version"] for r in log)
    mine = [r for r in log if r["version"] == newest]
    since = min(r["time"] for r in mine)
    after = {r["query_id"]: float(r["score"]) for r in sorted(mine, key=lambda r: r["time"])}
    earlier: dict[str, float] = {}
    # imported rows older than the newest version (not logged), then logged earlier versions in order
    stored = store.read_in(EVALUATIONS, ["model", "query_id", "score", "time"], "model", [name]).to_pylist()
    for r in stored:
        if r["time"] < since:
            earlier[r["query_id"]] = float(r["score"])
    older = sorted((r for r in log if r["version"] < newest), key=lambda r: (r["version"], r["time"]))
    for r in older:
        earlier[r["query_id"]] = float(r["score"])
    numbers = sorted({r["version"] for r in older})
    if earlier and not numbers:  # imported, then refined: the version the import made
        hist = store.read_in(VERSIONS, ["name", "version", "time"], "name", [name]).to_pylist()
        numbers = sorted({int(h["version"]) for h in hist if h["version"] < newest and h["time"] < since}) or [newest - 1]
    return newest, after, earlier, numbers


def _items(store: Store, cal: Calibration, idx: np.ndarray) -> FingerprintItems | None:
    """The item table's parameters of these calibration queries (unknown ones placed by their query
    vectors; those with no vector left out), or None without an item table."""
    from registry.catalog.fingerprint_store import load_item_table, place_queries

    table = load_item_table(store)
    if table is None or not len(idx):
        return None
    ids = [cal.query_ids[i] for i in idx]
    kept, f, b = place_queries(store, table, ids)
    if len(kept) < len(ids):
        placed = set(kept)
        idx = idx[np.fromiter((q in placed for q in ids), dtype=bool, count=len(ids))]
    return FingerprintItems(table, idx, f, b)


def drift(store: Store, name: str, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
          permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftReport:
    """Compare the newest version of `name` with its earlier ones (see the module docstring)."""
    from registry.analytics.audit import CALIBRATION_DIR, model_rows, pool_evaluations
    from registry.analytics.audit_stats import calibrate

    started = time.perf_counter()
    alpha, max_noise = check_fraction(alpha, "alpha"), check_fraction(max_noise, "max_noise")
    permutations = check_count(permutations, "permutations", 19, maximum=MAX_DRIFT_PERMUTATIONS)
    live = store.read(MODELS, ["name"]).column("name").to_pylist()
    if name not in live:
        from registry.catalog.models import not_live

        raise not_live(store, name, live)
    newest, after, earlier, numbers = _versions_of(store, name)
    if newest is None or not earlier:
        versions = [] if newest is None else [newest]
        # a home older than the log (store format 3) has nothing logged until `registry migrate`
        hint = (" (this home predates the evaluation log: run `registry migrate`)"
                if newest is None and store.format < 3 else "")
        return DriftReport(name=name, status="nothing to compare", moved=None, newest_version=newest,
                           earlier_versions=[], alpha=alpha, newest_evaluations=len(after or {}),
                           sentence=(f"{name} has {'no logged version' if newest is None else 'one version'} "
                                     f"with evaluations{f' (v{versions[0]})' if versions else ''}{hint}: nothing "
                                     "to compare yet; drift compares a refine with what came before it."),
                           seconds=time.perf_counter() - started)
    # the audit's cached pool calibration when it covers these queries; else one fitted here and not
    # saved: the audit's cache also holds its index-neighbour pairs, which drift does not compute
    cal = Calibration.load(store.home / CALIBRATION_DIR)
    encoder_id = store.config.get("active_encoder")
    if cal is None or cal.encoder_id != encoder_id or name not in cal.names or not set(after) <= set(cal.query_ids):
        cal = calibrate(pool_evaluations(store, live), neighbours=[])
    before_rows = cal.query_rows(list(earlier), list(earlier.values()))
    after_rows = cal.query_rows(list(after), list(after.values()))
    models, qids, scores = read_evaluations(store, [name])
    current = {name: model_rows(cal, models, qids, scores, name)}
    union = np.union1d(before_rows[0], after_rows[0])
    shared = len(np.intersect1d(before_rows[0], after_rows[0]))
    items = _items(store, cal, union) if shared < MIN_EVIDENCE else None
    unplaced = 0
    if items is not None and len(items.idx) < len(union):  # queries no vector places: left out of both sides
        unplaced = len(union) - len(items.idx)
        keep_b, keep_a = np.isin(before_rows[0], items.idx), np.isin(after_rows[0], items.idx)
        before_rows = (before_rows[0][keep_b], before_rows[1][keep_b])
        after_rows = (after_rows[0][keep_a], after_rows[1][keep_a])
    fields = judge(cal, name, before_rows, after_rows, alpha=alpha, max_noise=max_noise, items=items,
                   calibrated_rows=current, permutations=permutations, seed=seed)
    if unplaced:  # the counts the sentence gives are after these, which would otherwise look lost
        from registry.catalog.dataset import GETS_A_VECTOR

        fields["sentence"] += (f" {unplaced} evaluated {'query was' if unplaced == 1 else 'queries were'} left out: "
                               f"no query vector places them under the item table ({GETS_A_VECTOR}).")
    return DriftReport(name=name, newest_version=newest, earlier_versions=numbers, **fields,
                       seconds=time.perf_counter() - started)


def drift_refined(store: Store, *, alpha: float = AUDIT_ALPHA, max_noise: float = AUDIT_MAX_NOISE,
                  permutations: int = DRIFT_PERMUTATIONS, seed: int = 0) -> DriftRun:
    """Drift of every live model with evaluation_log rows since the last run (all of them on the first
    run), so a model that moved alarms once.

    The marker is the number of log rows this run read (config.json `last_drift_log_rows`, beside the run's
    start as `last_drift_run`): the log is append-only and read under the writer lock (`read_settled`),
    so every row a later transaction brings sits after that count, whatever time it is stamped with. A
    time marker missed a refine stamped before the run started but committed after it read the log.
    A home whose config has only the time (written before the row marker) is read by time once."""
    import pyarrow as pa

    from registry.catalog.evaluation_log import EVALUATION_LOG

    started = time.perf_counter()
    alpha, max_noise = check_fraction(alpha, "alpha"), check_fraction(max_noise, "max_noise")
    marker = datetime.now(timezone.utc)
    config = store.config
    raw = config.get(MARKER_KEY)
    since = datetime.fromisoformat(raw) if raw else None
    since_rows = config.get(MARKER_ROWS_KEY)
    live = set(store.read(MODELS, ["name"]).column("name").to_pylist())
    names: set[str] = set()
    rows = 0
    if store.has_table(EVALUATION_LOG):
        log = store.read_settled(EVALUATION_LOG, ["model", "time"])
        rows = log.num_rows
        models = log.column("model").to_pylist()
        if isinstance(since_rows, int) and 0 <= since_rows <= rows:
            new = models[since_rows:]
        else:  # no row marker yet (or a log shorter than it: the home was restored from a copy): by time
            times = log.column("time").cast(pa.timestamp("us", tz="UTC")).to_pylist()
            new = [m for m, t in zip(models, times) if since is None or t >= since]
        names = {m for m in new if m in live}
    checked = [drift(store, n, alpha=alpha, max_noise=max_noise, permutations=permutations, seed=seed)
               for n in sorted(names)]
    store.update_config(**{MARKER_KEY: marker.isoformat(), MARKER_ROWS_KEY: rows})
    return DriftRun(since=since, marker=marker, log_rows=rows, checked=checked,
                    moved=[r.name for r in checked if r.moved], seconds=time.perf_counter() - started)
