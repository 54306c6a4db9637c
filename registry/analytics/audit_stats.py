"""The audit's evidence from evaluations alone: a pool calibration and the per-pair decision.

Nothing here reads the store or the index, so benchmarks can run it on in-memory pools.

Model of "two distinct models". Each model m has an ability per task, theta[m, t]; each query q a
difficulty beta[q]; P(m answers q right) = sigmoid(theta[m, task(q)] - beta[q]) (a one-parameter IRT
model with task-specific abilities, fitted by penalised joint maximum likelihood on the whole pool,
the per-task abilities shrunk toward the model's overall ability). Two distinct models, conditionally
independent given the query, disagree on a shared query with probability pa(1-pb) + pb(1-pa); summed
over their shared queries that is the expected disagreement rate. The pair's statistic is

    kappa = 1 - observed disagreement / expected disagreement,

a kappa-type excess agreement that is 0 for independent models, 1 for identical answers, and does not
reward two strong (or two weak) models for agreeing on what everyone gets right (or wrong). Real
distinct models are not exactly independent (shared training data, one lineage), so a pair's kappa is
compared with the pool's own pairs of similar accuracy (their median and upper spread, read off the 90th
percentile: robust to a tenth of them being relatives; the pairs the audit cannot tell from one model answering
twice are left out, however many), and its sampling error, as a one-sided z-test.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from registry.defaults import AUDIT_ALPHA

__all__ = ["PoolEvals", "Calibration", "calibrate", "evidence", "label", "holm_level", "prefer_best_match", "PairStats", "Decision",
           "MIN_EVIDENCE", "task_kappa"]

MIN_EVIDENCE = 30  # answers needed on a side before a test is run at all
# Without shared queries only the task x difficulty homogeneity test speaks, and it passes distinct
# models of similar ability unless it has many answers and the pool shows it separates distinct pairs:
MIN_DISJOINT = 200  # answers each side needs before its "same model" verdict counts
MAX_SPLIT_PASS = 0.2  # largest share of the pool's distinct pairs it may pass on disjoint halves
_SCALE_FLOOR = 0.02  # smallest null spread of kappa we trust (a pool of near-identical pairs would give ~0)
_BINS = 4  # difficulty strata per task for the homogeneity test on non-shared queries
# "duplicate" needs kappa above the pool's closest distinct relatives by this many of its standard errors.
# At 0, with fingerprint candidates, a BFCL copy of one FC mode of a model was a "duplicate" of its other
# mode (kappa 0.548 vs the ceiling 0.537); at 2 no planted copy on docs/results/audit.md's pools is a
# false duplicate, and the copies it moves from "duplicate" stay flagged as "same product line?".
RELATIVES_MARGIN_SE = 2.0


def _digest(idx: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(2,) int64: how many answers, and a hash of them (query index and score, in query order): equal exactly
    when the answers are (sums of them were not: another model with as many right answers summed alike)."""
    import hashlib

    order = np.lexsort((y, idx))
    data = np.asarray(idx, np.int64)[order].tobytes() + np.round(np.asarray(y, np.float64)[order], 6).tobytes()
    return np.array([len(idx), int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)],
                    dtype=np.int64)


def _p_above_noise(disagreed, shared, max_noise: float) -> np.ndarray:
    """P(at least `disagreed` of `shared` answers differ | one model answering twice changes `max_noise` of
    them), elementwise: the audit's max-noise test, over a pair, its tasks, or the reference pairs."""
    from scipy.special import bdtrc  # bdtrc(j, n, p) is P(X > j)

    k = np.rint(np.asarray(disagreed, np.float64))
    return np.where(k <= 0, 1.0, bdtrc(np.maximum(k - 1, 0), shared, max_noise))


def _chi2_sf(stat: float, df: int) -> float:
    # scipy.special, not scipy.stats: the CI call `audit --model` pays ~0.7 s more to import the latter
    from scipy.special import chdtrc

    return float(chdtrc(df, stat))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30, 30)))


@dataclass
class PoolEvals:
    """Evaluations of a pool: per model, its sorted query indices and scores in [0, 1]."""

    names: list[str]
    rows: list[tuple[np.ndarray, np.ndarray]]  # per model: (query index (n,) int64 sorted, score (n,) float64)
    task: np.ndarray  # (Q,) task index of each query
    task_names: list[str]
    query_ids: list[str]

    @classmethod
    def from_triples(cls, models: np.ndarray, query_ids: np.ndarray, scores: np.ndarray,
                     queries: list[str], tasks: list[str]) -> "PoolEvals":
        """From parallel arrays of evaluations and the list of (query id, task) they refer to."""
        task_names, task = np.unique(np.asarray(tasks, dtype=object).astype(str), return_inverse=True)
        q_pos = {q: i for i, q in enumerate(queries)}
        qi = np.fromiter((q_pos.get(q, -1) for q in query_ids), dtype=np.int64, count=len(query_ids))
        models = np.asarray(models, dtype=object)
        keep = qi >= 0
        names = sorted(set(models[keep].tolist()))
        m_pos = {m: i for i, m in enumerate(names)}
        mi = np.fromiter((m_pos[m] for m in models[keep]), dtype=np.int64, count=int(keep.sum()))
        qi, y = qi[keep], np.asarray(scores, dtype=np.float64)[keep]
        order = np.lexsort((qi, mi))
        mi, qi, y = mi[order], qi[order], y[order]
        bounds = np.searchsorted(mi, np.arange(len(names) + 1))
        rows = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            q, s = qi[lo:hi], y[lo:hi]
            first = np.r_[True, q[1:] != q[:-1]]  # a query scored twice: keep its first score
            rows.append((q[first], s[first]))
        return cls(names, rows, task.astype(np.int64), [str(t) for t in task_names], list(queries))

    @classmethod
    def from_dense(cls, names: list[str], scores: np.ndarray, task: np.ndarray,
                   task_names: list[str] | None = None) -> "PoolEvals":
        """From a (models, queries) matrix with NaN where a model was not scored."""
        rows = [(np.flatnonzero(~np.isnan(r)).astype(np.int64), r[~np.isnan(r)].astype(np.float64)) for r in scores]
        task = np.asarray(task, dtype=np.int64)
        tn = task_names or [str(t) for t in range(int(task.max()) + 1 if len(task) else 0)]
        return cls(list(names), rows, task, tn, [str(i) for i in range(len(task))])


def _fit(rows, task: np.ndarray, n_tasks: int, *, iters: int = 30, shrink: float = 2.0,
         ridge: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """theta (M, T) and beta (Q,) by alternating Newton steps on the penalised likelihood."""
    q = len(task)
    mi = np.concatenate([np.full(len(idx), m, dtype=np.int64) for m, (idx, _) in enumerate(rows)]) \
        if rows else np.zeros(0, dtype=np.int64)
    qi = np.concatenate([idx for idx, _ in rows]) if rows else np.zeros(0, dtype=np.int64)
    y = np.concatenate([s for _, s in rows]) if rows else np.zeros(0)
    m_count = len(rows)
    mt = mi * n_tasks + task[qi]
    n_mt = np.bincount(mt, minlength=m_count * n_tasks).astype(np.float64)
    theta = np.zeros(m_count * n_tasks)
    beta = np.zeros(q)
    for _ in range(iters):
        p = _sigmoid(theta[mt] - beta[qi])
        # each task ability is pulled toward the model's count-weighted mean ability
        mean = (theta * n_mt).reshape(m_count, n_tasks).sum(1) / np.maximum(n_mt.reshape(m_count, n_tasks).sum(1), 1)
        gap = theta - np.repeat(mean, n_tasks)
        grad = np.bincount(mt, y - p, m_count * n_tasks) - shrink * gap - ridge * theta
        hess = np.bincount(mt, p * (1 - p), m_count * n_tasks) + shrink + ridge
        theta += np.clip(grad / hess, -2, 2)
        p = _sigmoid(theta[mt] - beta[qi])
        grad = -np.bincount(qi, y - p, q) - ridge * beta
        hess = np.bincount(qi, p * (1 - p), q) + ridge
        beta = np.clip(beta + np.clip(grad / hess, -2, 2), -10, 10)
    theta = theta.reshape(m_count, n_tasks)
    counts = n_mt.reshape(m_count, n_tasks)
    for m in range(m_count):  # tasks a model never answered: its mean ability
        seen = counts[m] > 0
        if seen.any() and not seen.all():
            theta[m, ~seen] = (theta[m, seen] * counts[m, seen]).sum() / counts[m, seen].sum()
    return theta, beta


def fit_theta(idx: np.ndarray, y: np.ndarray, task: np.ndarray, beta: np.ndarray, n_tasks: int, *,
              iters: int = 25, shrink: float = 2.0, ridge: float = 0.01) -> np.ndarray:
    """(T,) task abilities of one model given the pool's difficulties (a model the calibration predates)."""
    t = task[idx]
    n_t = np.bincount(t, minlength=n_tasks).astype(np.float64)
    theta = np.zeros(n_tasks)
    for _ in range(iters):
        p = _sigmoid(theta[t] - beta[idx])
        mean = (theta * n_t).sum() / max(n_t.sum(), 1)
        grad = np.bincount(t, y - p, n_tasks) - shrink * (theta - mean) - ridge * theta
        hess = np.bincount(t, p * (1 - p), n_tasks) + shrink + ridge
        theta += np.clip(grad / hess, -2, 2)
    if (n_t > 0).any():
        theta[n_t == 0] = (theta[n_t > 0] * n_t[n_t > 0]).sum() / n_t.sum()
    return theta


def task_kappa(ia: np.ndarray, ya: np.ndarray, ib: np.ndarray, yb: np.ndarray,
               task: np.ndarray) -> tuple[float | None, int]:
    """(kappa, shared queries) of two models without a pool fit: 1 - observed disagreement / the
    disagreement two independent models of their per-task accuracies (on the shared queries) would
    show. Coarser than `evidence` (no query difficulty), but needs nothing beyond the two models, so
    search can re-rank by it; None below `MIN_EVIDENCE` shared queries. `ia`/`ib` sorted, unique."""
    common, pa_i, pb_i = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
    if len(common) < MIN_EVIDENCE:
        return None, len(common)
    sa, sb, t = ya[pa_i], yb[pb_i], task[common]
    n_t = np.bincount(t).astype(np.float64)
    seen = n_t > 0
    acc_a = np.bincount(t, sa)[seen] / n_t[seen]
    acc_b = np.bincount(t, sb)[seen] / n_t[seen]
    expected = float(((acc_a * (1 - acc_b) + acc_b * (1 - acc_a)) * n_t[seen]).sum() / len(common))
    if expected <= 0:
        return None, len(common)
    return 1.0 - float(np.abs(sa - sb).mean()) / expected, len(common)


@dataclass
class PairStats:
    """What the evaluations of two models say, before the decision."""

    shared: int = 0
    disagreement: float | None = None
    expected_disagreement: float | None = None
    kappa: float | None = None
    kappa_se: float | None = None
    accuracy_a: float | None = None  # on the shared queries
    accuracy_b: float | None = None
    a_right_b_wrong: int = 0
    b_right_a_wrong: int = 0
    symmetry_p: float | None = None
    symmetry_strata: int = 0
    symmetry_stat: float | None = None  # the stratified McNemar chi-square behind symmetry_p
    only_a: int = 0
    only_b: int = 0
    homogeneity_p: float | None = None
    homogeneity_strata: int = 0
    task_shared: np.ndarray | None = None  # (T,) shared queries per task
    task_disagreed: np.ndarray | None = None  # (T,) of them, how much the two disagree (a sum of |a - b|)


def _pair_stats(ia, ya, ta, ib, yb, tb, task, beta, *, bins: np.ndarray | None, n_tasks: int,
                with_tests: bool = True) -> PairStats:
    """Statistics of models a and b: (query index, score, task abilities (T,)) each."""
    out = PairStats()
    common, pa_i, pb_i = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
    out.shared = len(common)
    if len(common) >= MIN_EVIDENCE:
        sa, sb = ya[pa_i], yb[pb_i]
        t = task[common]
        pa, pb = _sigmoid(ta[t] - beta[common]), _sigmoid(tb[t] - beta[common])
        d = float(np.abs(sa - sb).mean())
        de = float((pa * (1 - pb) + pb * (1 - pa)).mean())
        out.disagreement, out.expected_disagreement = d, de
        out.accuracy_a, out.accuracy_b = float(sa.mean()), float(sb.mean())
        out.task_shared = np.bincount(t, minlength=n_tasks)
        out.task_disagreed = np.bincount(t, np.abs(sa - sb), minlength=n_tasks)
        if de > 0:
            out.kappa = 1.0 - d / de
            # binomial error of the observed rate, floored at one disagreement so 0/n is not "exact"
            out.kappa_se = float(np.sqrt(max(d * (1 - d), 1.0 / len(common)) / len(common)) / de)
        if with_tests:
            ab = (sa > 0.5) & (sb <= 0.5)
            ba = (sb > 0.5) & (sa <= 0.5)
            out.a_right_b_wrong, out.b_right_a_wrong = int(ab.sum()), int(ba.sum())
            # stratified McNemar by task: one model re-run differs at random, in both directions alike;
            # tasks with few discordant answers are pooled so the chi-square approximation holds
            n_ab = np.bincount(t[ab], minlength=n_tasks).astype(float)
            n_ba = np.bincount(t[ba], minlength=n_tasks).astype(float)
            total = n_ab + n_ba
            big = total >= 10
            stat, df = 0.0, 0
            for x, y in zip(np.r_[n_ab[big], n_ab[~big].sum()], np.r_[n_ba[big], n_ba[~big].sum()]):
                if x + y > 0:
                    stat += (x - y) ** 2 / (x + y)
                    df += 1
            if df:
                out.symmetry_p, out.symmetry_strata, out.symmetry_stat = _chi2_sf(stat, df), df, stat
    if with_tests and bins is not None:
        only_a = np.setdiff1d(ia, common, assume_unique=True)
        only_b = np.setdiff1d(ib, common, assume_unique=True)
        out.only_a, out.only_b = len(only_a), len(only_b)
        if len(only_a) >= MIN_EVIDENCE and len(only_b) >= MIN_EVIDENCE:
            ya_only = ya[np.isin(ia, only_a, assume_unique=True)]
            yb_only = yb[np.isin(ib, only_b, assume_unique=True)]
            p, df = _homogeneity(only_a, ya_only, only_b, yb_only, task, bins, n_tasks)
            out.homogeneity_p, out.homogeneity_strata = p, df
    return out


def _homogeneity(qa, ya, qb, yb, task, bins, n_tasks) -> tuple[float | None, int]:
    """Chi-square test that a on its queries and b on its (other) queries score alike within strata
    of task x difficulty (difficulty: the pool's IRT difficulty, in quartiles): true when one model
    answered two samples of the same questions."""
    size = n_tasks * (_BINS + 1)
    sa, sb = task[qa] * (_BINS + 1) + bins[qa], task[qb] * (_BINS + 1) + bins[qb]
    na, nb = np.bincount(sa, minlength=size), np.bincount(sb, minlength=size)
    ka, kb = np.bincount(sa, ya, minlength=size), np.bincount(sb, yb, minlength=size)
    use = (na > 0) & (nb > 0)
    na, nb, ka, kb = na[use], nb[use], ka[use], kb[use]
    p = (ka + kb) / (na + nb)
    var = p * (1 - p) * (1 / na + 1 / nb)  # an upper bound for scores in [0, 1], exact for 0/1
    ok = var > 0
    if not ok.any():
        return None, 0
    stat = float((((ka / na - kb / nb) ** 2)[ok] / var[ok]).sum())
    return _chi2_sf(stat, int(ok.sum())), int(ok.sum())


@dataclass
class Calibration:
    """The pool's fitted difficulties and abilities, and the kappa of its reference pairs."""

    names: list[str]
    query_ids: list[str]
    task: np.ndarray  # (Q,)
    task_names: list[str]
    beta: np.ndarray  # (Q,) query difficulty
    theta: np.ndarray  # (M, T) task abilities
    ref_a: np.ndarray  # (R,) reference pairs (indices into names)
    ref_b: np.ndarray
    ref_kappa: np.ndarray  # (R,)
    ref_accuracy: np.ndarray  # (R,) mean of the two accuracies on their shared queries
    ref_se: np.ndarray  # (R,) sampling standard error of each reference kappa
    q_total: np.ndarray  # (Q,) sum of the calibrated models' scores per query
    q_count: np.ndarray  # (Q,) how many calibrated models answered it
    split_homogeneity_p: np.ndarray  # (S,) homogeneity p of reference pairs on disjoint random halves
    ref_symmetry_p: np.ndarray  # (R,) stratified McNemar p of each reference pair (NaN: too few discordant)
    ref_random: np.ndarray  # (R,) bool: an all-pairs / random pair (the null's sample); else an index neighbour pair
    ref_disagreement: np.ndarray  # (R,) each reference pair's disagreement rate on its shared queries
    ref_shared: np.ndarray  # (R,) and how many queries it shares
    # (R,) each reference pair's symmetry test: its chi-square, degrees of freedom and discordant answers (NaN
    # or 0: no test), from which `relatives` reads how far its disagreements lean one way
    ref_symmetry_stat: np.ndarray
    ref_symmetry_df: np.ndarray
    ref_discordant: np.ndarray
    row_digest: np.ndarray  # (M, 2) each model's answers when calibrated, in brief (`_digest`)
    generation: str | None = None
    encoder_id: str | None = None
    _pos: dict = field(default_factory=dict, repr=False)
    _query_pos: dict | None = field(default=None, repr=False)  # query id -> index, made when first asked

    def __post_init__(self) -> None:
        self._pos = {n: i for i, n in enumerate(self.names)}

    def query_rows(self, query_ids, scores) -> tuple[np.ndarray, np.ndarray]:
        """One model's evaluations as (query index into the calibration, ascending; score), the first
        score of a query scored twice; queries the calibration predates are left out (they have no
        fitted difficulty)."""
        if self._query_pos is None:
            self._query_pos = {q: i for i, q in enumerate(self.query_ids)}
        pos = self._query_pos
        idx = np.fromiter((pos.get(q, -1) for q in query_ids), dtype=np.int64, count=len(query_ids))
        y = np.asarray(scores, dtype=np.float64)
        keep = idx >= 0
        idx, y = idx[keep], y[keep]
        order = np.argsort(idx, kind="stable")
        idx, y = idx[order], y[order]
        first = np.r_[True, idx[1:] != idx[:-1]] if len(idx) else np.zeros(0, dtype=bool)
        return idx[first], y[first]

    @property
    def n_tasks(self) -> int:
        return len(self.task_names)

    def bins(self, without: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
        """(Q,) difficulty quartile of each query within its task: the mean score of the rest of the
        pool, leaving out the models in `without` (name -> (query index, score)), whose own answers
        would otherwise bias a test of those models; `_BINS` where no other model answered."""
        total, count = self.q_total.copy(), self.q_count.copy()
        for name, (idx, y) in (without or {}).items():
            if name in self._pos:
                np.subtract.at(total, idx, y)
                np.subtract.at(count, idx, 1)
        known = count > 0.5
        mean = np.where(known, total / np.maximum(count, 1), np.nan)
        out = np.full(len(self.beta), _BINS, dtype=np.int64)
        for t in range(self.n_tasks):
            sel = (self.task == t) & known
            if sel.sum() >= _BINS:
                edges = np.quantile(mean[sel], np.linspace(0, 1, _BINS + 1)[1:-1])
                out[sel] = np.searchsorted(edges, mean[sel])
        return out

    def theta_of(self, name: str, idx: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Task abilities: the fitted ones for a model calibrated on these very answers, else fitted now from
        (idx, y) (a model the calibration predates, or one replaced or refined since: its old abilities would
        make another model's answers look like its own)."""
        at = self._pos.get(name)
        if at is not None and np.array_equal(self.row_digest[at], _digest(idx, y)):
            return self.theta[at]
        return fit_theta(idx, y, self.task, self.beta, self.n_tasks)

    def null(self, a: str, b: str, accuracy: float, *, nearest: int = 40, max_noise: float | None = None,
             alpha: float = AUDIT_ALPHA) -> tuple[float, float, int]:
        """(median, scale, pairs) of kappa over the reference pairs of similar mean accuracy that
        involve neither a nor b. The scale is the upper spread between distinct pairs beyond their own
        sampling error ((90th percentile - median) / 1.2816, less the median squared standard error;
        robust to the top 10% being relatives or duplicates), floored. With `max_noise`, the pairs the
        audit cannot tell from one model answering twice (`one_model_pairs`) are no sample of distinct
        models: left out, so that a pool holding many copies of one model (a model behind many resellers)
        does not set the distinct models' spread with them (six copies of one of the demo's 15 models made
        the spread 0.65 and cleared every copy)."""
        keep = self._without(a, b) & self.ref_random
        if max_noise is not None:
            keep &= ~self.one_model_pairs(max_noise, alpha)
        kappa, acc, se = self.ref_kappa[keep], self.ref_accuracy[keep], self.ref_se[keep]
        if len(kappa) < 10:
            return 0.0, _SCALE_FLOOR, int(len(kappa))
        n = min(len(kappa), max(nearest, len(kappa) // 4))
        sel = np.argsort(np.abs(acc - accuracy), kind="stable")[:n]
        k = kappa[sel]
        med = float(np.median(k))
        # the test is one-sided, so the spread is read off the upper half: pools of distinct models have
        # a long right tail of related pairs (shared data, one vendor's formats) that a MAD would miss
        spread = ((float(np.quantile(k, 0.9)) - med) / 1.2816) ** 2 - float(np.median(se[sel] ** 2))
        return med, max(float(np.sqrt(max(spread, 0.0))), _SCALE_FLOOR), int(n)

    def one_model_pairs(self, max_noise: float, alpha: float) -> np.ndarray:
        """(R,) the reference pairs that disagree no more than `max_noise` allows (not significantly more, at
        `alpha`) and whose disagreements are symmetric within tasks (or too few to test): what one model
        re-run or re-served looks like to the audit's own tests."""
        p_above = _p_above_noise(np.nan_to_num(self.ref_disagreement) * self.ref_shared, self.ref_shared, max_noise)
        symmetric = np.nan_to_num(self.ref_symmetry_p, nan=1.0) >= alpha
        return (p_above >= alpha) & symmetric

    def _without(self, a: str, b: str) -> np.ndarray:
        ia, ib = self._pos.get(a, -1), self._pos.get(b, -1)
        return (self.ref_a != ia) & (self.ref_a != ib) & (self.ref_b != ia) & (self.ref_b != ib)

    def relatives(self, a: str, b: str, alpha: float, *, discordant: int = 0, strata: int = 0
                  ) -> tuple[tuple[float, str, str, float] | None, tuple[float, str, str, float] | None]:
        """(ceiling, set aside) for the pair a ~ b, each (kappa, x, y, p) or None. The ceiling: the pool pair,
        involving neither a nor b, that agrees most among those shown to be *distinct* models (their
        disagreements lean one way within tasks, symmetry p < alpha, which one model answering twice does
        not do), with its symmetry p. However much a symmetric pair agrees, it is not told apart from such
        relatives (another snapshot, a fine-tune, the same weights behind another interface) unless it agrees
        more than they do. But a relative is set aside when the pair's own symmetry test (`discordant`
        answers over `strata` strata) would have seen a lean like its with power 1 - alpha: the pair was
        found symmetric, and a relative like that passes as symmetric less often than alpha. Its lean is the
        lower alpha-confidence bound of its test's noncentrality (the plain estimate, chi-square - df, is
        biased up among the relatives whose tests rejected), per discordant answer, assuming the pair's
        discordant answers fall into strata as the relative's do. So a copy leaning hard one way (quantised)
        no longer demotes every true duplicate its kappa tops, while mildly leaning snapshots still demote
        pairs whose tests could have missed their lean. The set-aside relative closest in kappa comes with
        that power in place of p."""
        sym = np.nan_to_num(self.ref_symmetry_p, nan=1.0)
        keep = self._without(a, b) & (sym < alpha)
        aside = np.zeros_like(keep)
        power = np.zeros(len(keep))
        if discordant > 0 and strata > 0 and keep.any():
            from scipy.special import chdtri, chndtr, chndtrinc

            at = np.flatnonzero(keep)
            lower = np.nan_to_num(chndtrinc(self.ref_symmetry_stat[at], self.ref_symmetry_df[at], 1.0 - alpha))
            lean = np.maximum(lower, 0.0) / np.maximum(self.ref_discordant[at], 1.0)
            power[at] = 1.0 - chndtr(chdtri(strata, alpha), strata, lean * discordant)
            aside[at] = power[at] >= 1.0 - alpha
            keep &= ~aside

        def top(mask: np.ndarray, last: np.ndarray) -> tuple[float, str, str, float] | None:
            if not mask.any():
                return None
            i = int(np.flatnonzero(mask)[np.argmax(self.ref_kappa[mask])])
            return (float(self.ref_kappa[i]), self.names[int(self.ref_a[i])], self.names[int(self.ref_b[i])],
                    float(last[i]))

        return top(keep, self.ref_symmetry_p), top(aside, power)

    # ---------------------------------------------------------------- persistence (JSON + .npz, no pickle)
    _ARRAYS = ("task", "beta", "theta", "ref_a", "ref_b", "ref_kappa", "ref_accuracy", "ref_se", "q_total", "q_count",
               "split_homogeneity_p", "ref_symmetry_p", "ref_random", "ref_disagreement", "ref_shared",
               "ref_symmetry_stat", "ref_symmetry_df", "ref_discordant", "row_digest")

    def save(self, directory: Path) -> None:
        import io

        from indexing.home import write_bytes_atomic, write_text_atomic

        directory.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()  # through bytes: the home may be an s3 prefix
        np.savez(buffer, **{k: getattr(self, k) for k in self._ARRAYS})
        write_bytes_atomic(directory / "calibration.npz", buffer.getvalue(), fsync=False)  # a cache
        meta = {"names": self.names, "query_ids": self.query_ids, "task_names": self.task_names,
                "generation": self.generation, "encoder_id": self.encoder_id}
        write_text_atomic(directory / "calibration.json", json.dumps(meta), fsync=False)

    @classmethod
    def load(cls, directory: Path) -> "Calibration | None":
        import io

        try:
            meta = json.loads((directory / "calibration.json").read_text())
            with np.load(io.BytesIO((directory / "calibration.npz").read_bytes()), allow_pickle=False) as z:
                arrays = {k: z[k] for k in cls._ARRAYS}
        except (OSError, ValueError, KeyError):
            return None
        if (len(arrays["beta"]) != len(meta["query_ids"]) or len(arrays["theta"]) != len(meta["names"])
                or arrays["row_digest"].shape != (len(meta["names"]), 2)):
            return None
        return cls(meta["names"], meta["query_ids"], task_names=meta["task_names"], generation=meta["generation"],
                   encoder_id=meta["encoder_id"], **arrays)


def calibrate(pool: PoolEvals, *, neighbours: list[tuple[str, str]] | None = None, max_pairs: int = 5000,
              split_pairs: int = 300, seed: int = 0) -> Calibration:
    """Fit the pool's IRT model, then kappa over its pairs: all of them, or `max_pairs` at random (the
    null's sample), plus `neighbours` (the index's candidate pairs, by name), where a big pool's close
    relatives are, which random pairs would rarely hit."""
    n_tasks = len(pool.task_names)
    theta, beta = _fit(pool.rows, pool.task, n_tasks)
    m = len(pool.names)
    rng = np.random.default_rng(seed)
    if m * (m - 1) // 2 <= max_pairs:
        pairs = np.array([(a, b) for a in range(m) for b in range(a + 1, m)], dtype=np.int64).reshape(-1, 2)
    else:
        a = rng.integers(0, m, 2 * max_pairs)
        b = rng.integers(0, m, 2 * max_pairs)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        pairs = np.unique(np.stack([lo, hi], 1)[lo != hi], axis=0)
        pairs = pairs[rng.permutation(len(pairs))[:max_pairs]]
    random_set = {(int(a), int(b)) for a, b in pairs}
    pos = {n: i for i, n in enumerate(pool.names)}
    extra = sorted({(min(pos[x], pos[y]), max(pos[x], pos[y])) for x, y in neighbours or []
                    if x in pos and y in pos and x != y} - random_set)
    ref = []
    for (a, b), is_random in [*((p, True) for p in sorted(random_set)), *((p, False) for p in extra)]:
        ia, ya = pool.rows[a]
        ib, yb = pool.rows[b]
        s = _pair_stats(ia, ya, theta[a], ib, yb, theta[b], pool.task, beta, bins=None, n_tasks=n_tasks)
        if s.kappa is not None:
            ref.append((a, b, s.kappa, 0.5 * (s.accuracy_a + s.accuracy_b), s.kappa_se,
                        np.nan if s.symmetry_p is None else s.symmetry_p, float(is_random), s.disagreement, s.shared,
                        np.nan if s.symmetry_stat is None else s.symmetry_stat, s.symmetry_strata,
                        s.a_right_b_wrong + s.b_right_a_wrong))
    ref_arr = np.array(ref, dtype=np.float64).reshape(-1, 12)
    q_total, q_count = np.zeros(len(pool.task)), np.zeros(len(pool.task))
    for idx, y in pool.rows:
        q_total[idx] += y
        q_count[idx] += 1
    cal = Calibration(list(pool.names), list(pool.query_ids), pool.task, list(pool.task_names), beta, theta,
                      ref_arr[:, 0].astype(np.int64), ref_arr[:, 1].astype(np.int64), ref_arr[:, 2], ref_arr[:, 3],
                      ref_arr[:, 4], q_total, q_count, np.zeros(0), ref_arr[:, 5], ref_arr[:, 6] > 0.5,
                      ref_arr[:, 7], ref_arr[:, 8].astype(np.int64), ref_arr[:, 9], ref_arr[:, 10], ref_arr[:, 11],
                      np.array([_digest(idx, y) for idx, y in pool.rows], dtype=np.int64).reshape(-1, 2))
    # How often two distinct models pass the homogeneity test when they share no query: each
    # reference pair on random disjoint halves of the queries (what a disjoint flag is worth).
    split = []
    for r in rng.permutation(np.flatnonzero(ref_arr[:, 6] > 0.5))[:split_pairs]:
        a, b = int(ref_arr[r, 0]), int(ref_arr[r, 1])
        half = rng.random(len(pool.task)) < 0.5
        ia, ya = pool.rows[a]
        ib, yb = pool.rows[b]
        bins = cal.bins({pool.names[a]: (ia, ya), pool.names[b]: (ib, yb)})
        ka, kb = half[ia], ~half[ib]
        if ka.sum() >= MIN_EVIDENCE and kb.sum() >= MIN_EVIDENCE:
            p, _ = _homogeneity(ia[ka], ya[ka], ib[kb], yb[kb], pool.task, bins, n_tasks)
            if p is not None:
                split.append(p)
    cal.split_homogeneity_p = np.asarray(split, dtype=np.float64)
    return cal


@dataclass
class Decision:
    label: str  # "duplicate", "same product line?", "cleared", "untested"
    reason: str
    stats: PairStats
    null_kappa_median: float | None = None
    null_kappa_scale: float | None = None
    null_pairs: int = 0
    z: float | None = None
    p_excess: float | None = None
    p_above_max_noise: float | None = None
    # the task whose answers differ most beyond max noise, its rate, and its p (Bonferroni over the tasks tested)
    noisiest_task: str | None = None
    noisiest_task_rate: float | None = None
    p_task_above_max_noise: float | None = None
    split_pass_rate: float | None = None
    relatives_kappa: float | None = None  # the pool's closest pair of provably distinct models (see label)
    relatives_pair: tuple[str, str] | None = None


def evidence(cal: Calibration, a: str, ia: np.ndarray, ya: np.ndarray, b: str, ib: np.ndarray, yb: np.ndarray, *,
             max_noise: float, alpha: float = AUDIT_ALPHA, calibrated_rows: dict | None = None) -> Decision:
    """The pair's statistics and p-values, not yet labelled. `ia`/`ib` index the calibration's queries.
    `calibrated_rows` (name -> rows): what the calibration holds for a or b when that differs from the
    rows given (their answers are left out of the difficulty strata; default: the rows given)."""
    from scipy.special import ndtr

    ta, tb = cal.theta_of(a, ia, ya), cal.theta_of(b, ib, yb)
    bins = cal.bins({a: (ia, ya), b: (ib, yb), **(calibrated_rows or {})})
    s = _pair_stats(ia, ya, ta, ib, yb, tb, cal.task, cal.beta, bins=bins, n_tasks=cal.n_tasks)
    out = Decision("untested", "", s)
    if s.kappa is not None:
        out.p_above_max_noise = float(_p_above_noise(s.disagreement * s.shared, s.shared, max_noise))
        # by task too: a copy that answers one task from another model is not one model answering twice, however
        # little that task weighs in the whole (40% of math changed, 0% elsewhere, passed the pooled test)
        n_t = s.task_shared
        tested = np.flatnonzero(n_t >= MIN_EVIDENCE)
        if len(tested) > 1:
            p_t = _p_above_noise(s.task_disagreed[tested], n_t[tested], max_noise)
            worst = int(np.argmin(p_t))
            out.p_task_above_max_noise = float(min(1.0, p_t[worst] * len(tested)))
            out.noisiest_task = cal.task_names[int(tested[worst])]
            out.noisiest_task_rate = float(s.task_disagreed[tested[worst]] / n_t[tested[worst]])
        med, scale, n_ref = cal.null(a, b, 0.5 * (s.accuracy_a + s.accuracy_b), max_noise=max_noise, alpha=alpha)
        out.z = float((s.kappa - med) / np.sqrt(scale ** 2 + s.kappa_se ** 2))
        out.p_excess = float(ndtr(-out.z))
        out.null_kappa_median, out.null_kappa_scale, out.null_pairs = med, scale, n_ref
    return out


def holm_level(p_values: list[float], alpha: float) -> float:
    """Holm's step-down threshold: flags at p <= the returned level hold the chance of any false
    flag in the run at most alpha (family-wise, as a CI gate wants); 0.0 when nothing qualifies."""
    p = np.sort(np.asarray(p_values, dtype=np.float64))
    level = 0.0
    for i, value in enumerate(p):
        if value > alpha / (len(p) - i):
            break
        level = float(value)
    return level


def prefer_best_match(decided: dict[tuple[str, str], "Decision"]) -> None:
    """A model flagged with several others is a duplicate of the one it agrees with most; a flagged
    pair whose kappa is clearly (3 standard errors) below the best match of either member is that
    duplicate's relative, so it becomes "same product line?" (e.g. a copy of gpt-4-0125 also agrees
    beyond chance with gpt-4-turbo, less than with the original)."""
    best: dict[str, tuple[float, float, str]] = {}
    for (a, b), d in decided.items():
        if d.label in ("duplicate", "same product line?") and d.stats.kappa is not None:
            for x, other in ((a, b), (b, a)):
                if x not in best or d.stats.kappa > best[x][0]:
                    best[x] = (d.stats.kappa, d.stats.kappa_se, other)
    for (a, b), d in decided.items():
        if d.label != "duplicate" or d.stats.kappa is None:
            continue
        for x in (a, b):
            k_best, se_best, other = best[x]
            if other not in (a, b) and k_best - d.stats.kappa > 3 * np.hypot(se_best, d.stats.kappa_se):
                d.label = "same product line?"
                d.reason += (f"; but {x} agrees clearly more with {other} (kappa {k_best:.3f} vs "
                             f"{d.stats.kappa:.3f}), so this pair is more likely that one's relative")
                break


def label(cal: Calibration, out: Decision, a: str, b: str, *, level: float, alpha: float, max_noise: float) -> Decision:
    """Label a pair from its evidence. `level`: the p threshold of the excess-agreement test (Holm's
    step-down level over the run's candidates); `alpha`: level of the other tests.

    Shared queries (>= 30): cleared when they disagree significantly more often than `max_noise`
    (one model re-run or re-served does not), or when their excess agreement kappa is not above the
    pool's distinct pairs of similar accuracy at `level`. Otherwise flagged: "duplicate" when their
    disagreements are symmetric within tasks (as sampling noise is) and their non-shared answers are
    homogeneous and their kappa is above the pool's closest pair of provably distinct models
    (`Calibration.relatives`), else "same product line?" (agree far beyond chance but differ
    systematically, or no more than the pool's own relatives do: another snapshot, a fine-tune, a
    degraded copy). No shared queries: "duplicate" unless the task x
    difficulty homogeneity test rejects; no stratum both answered: "untested".
    """
    s = out.stats
    if s.kappa is not None:
        seen = (f"they disagree on {s.disagreement:.1%} of {s.shared} shared queries (two distinct models of "
                f"their abilities: {s.expected_disagreement:.1%}; excess agreement kappa {s.kappa:.3f}, "
                f"pool's pairs of similar accuracy {out.null_kappa_median:.3f} +- {out.null_kappa_scale:.3f} "
                f"over {out.null_pairs} pairs, z={out.z:.1f})")
        if out.p_above_max_noise < alpha:
            out.label, out.reason = "cleared", (f"{seen}: more than one model re-run would (max noise "
                                                f"{max_noise:.0%}, p={out.p_above_max_noise:.2g})")
        elif out.p_excess > level:
            out.label, out.reason = "cleared", (f"{seen}: no more agreement than the pool's distinct pairs "
                                                f"(p={out.p_excess:.2g}, flag level {level:.2g})")
        else:
            systematic = s.symmetry_p is not None and s.symmetry_p < alpha
            split_other = s.homogeneity_p is not None and s.homogeneity_p < alpha
            one_task = out.p_task_above_max_noise is not None and out.p_task_above_max_noise < alpha
            beyond = f"far beyond chance (p={out.p_excess:.2g} <= {level:.2g})"
            if systematic or split_other or one_task:
                why = []
                if one_task:
                    why.append(f"on task {out.noisiest_task} they disagree on {out.noisiest_task_rate:.1%}, more "
                               f"than one model re-run would (max noise {max_noise:.0%}, p={out.p_task_above_max_noise:.2g} "
                               "over the tasks)")
                if systematic:
                    why.append(f"their disagreements lean one way within tasks ({a} right and {b} wrong on "
                               f"{s.a_right_b_wrong}, the reverse on {s.b_right_a_wrong}; symmetry p="
                               f"{s.symmetry_p:.2g})")
                if split_other:
                    why.append(f"on queries only one answered their accuracies differ by task x difficulty "
                               f"(p={s.homogeneity_p:.2g})")
                out.label = "same product line?"
                out.reason = (f"{seen}: {beyond}, but " + "; ".join(why) + ": another snapshot or fine-tune "
                              "of one model, or a degraded (e.g. quantised) copy")
            else:
                symmetric = (f"their disagreements are symmetric ({s.a_right_b_wrong} vs {s.b_right_a_wrong}) "
                             f"as sampling noise is")
                ceiling, aside = cal.relatives(a, b, alpha, discordant=s.a_right_b_wrong + s.b_right_a_wrong,
                                               strata=s.symmetry_strata)
                if ceiling is not None:
                    out.relatives_kappa, out.relatives_pair = ceiling[0], (ceiling[1], ceiling[2])
                if ceiling is not None and s.kappa <= ceiling[0] + RELATIVES_MARGIN_SE * s.kappa_se:
                    out.label = "same product line?"
                    out.reason = (f"{seen}: {beyond} and {symmetric}, but no more than distinct models of this "
                                  f"pool agree: {ceiling[1]} ~ {ceiling[2]} reach kappa {ceiling[0]:.3f} while "
                                  f"their disagreements lean one way (p={ceiling[3]:.2g}); successive snapshots "
                                  f"or fine-tunes of one model agree this closely, so a duplicate is not told "
                                  f"apart from a relative here")
                else:
                    out.label = "duplicate"
                    above = ("" if ceiling is None else
                             f", above the pool's closest distinct relatives ({ceiling[1]} ~ {ceiling[2]}, "
                             f"kappa {ceiling[0]:.3f})")
                    if aside is not None and s.kappa <= aside[0] + RELATIVES_MARGIN_SE * s.kappa_se:
                        above += (f"; {aside[1]} ~ {aside[2]} agree more (kappa {aside[0]:.3f}) but lean one way "
                                  f"as far as these answers would have shown (power {aside[3]:.2f}): not what "
                                  f"this pair is")
                    out.reason = (f"{seen}: {beyond}, within max noise {max_noise:.0%}, {symmetric}{above}")
        return out
    if s.homogeneity_p is None:
        out.label, out.reason = "untested", (f"no evidence either way: {s.shared} shared queries and no task x "
                                             f"difficulty stratum both answered ({s.only_a} / {s.only_b} others)")
        return out
    rate = float((cal.split_homogeneity_p >= alpha).mean()) if len(cal.split_homogeneity_p) else None
    out.split_pass_rate = rate
    if s.homogeneity_p < alpha:
        out.label, out.reason = "cleared", (f"no shared queries to compare; their accuracies differ across "
                                            f"{s.homogeneity_strata} task x difficulty strata (p={s.homogeneity_p:.2g})")
    elif min(s.only_a, s.only_b) < MIN_DISJOINT or rate is None or rate > MAX_SPLIT_PASS:
        why = (f"{s.only_a} / {s.only_b} answers (a verdict needs {MIN_DISJOINT} each)"
               if min(s.only_a, s.only_b) < MIN_DISJOINT else
               f"{rate:.0%} of the pool's distinct pairs pass it on disjoint halves" if rate is not None else
               "the pool has no pairs to measure it on")
        out.label, out.reason = "untested", (f"{s.shared} shared queries; their accuracies agree across "
                                             f"{s.homogeneity_strata} task x difficulty strata (p={s.homogeneity_p:.2g}), "
                                             f"but that test cannot tell distinct models apart here: {why}")
    else:
        out.label = "duplicate"
        out.reason = (f"no shared queries to compare ({s.only_a} / {s.only_b} answered); their accuracies agree "
                      f"across {s.homogeneity_strata} task x difficulty strata (p={s.homogeneity_p:.2g} >= "
                      f"{alpha:g}); only {rate:.0%} of the pool's distinct pairs pass this test on disjoint halves")
    return out
