"""Analytics over the pool: duplicates (audit), the models nearest a hypothetical profile, and a
small covering portfolio; from the reader. The families (GET /v1/clusters) are with the web UI's reads
(registry.service.web), whose answers are kept per generation of the store."""
from __future__ import annotations

from fastapi import APIRouter, Query

from registry import results as r
from registry.defaults import AUDIT_ALPHA, AUDIT_MAX_NOISE, DRIFT_PERMUTATIONS
from registry.service import schemas as s
from registry.service.deps import WRITE, Name, Reader, State
from registry.service.errors import ERRORS
from registry.service.schemas import BY_PATTERN, LIMITS
from registry.service.json_body import UniqueKeysRoute

__all__ = ["router"]

router = APIRouter(route_class=UniqueKeysRoute)
# the audit's and drift's parameters, checked alike by the audit, the read of one model's drift and the CI
# run over every refined one; NaN and inf are refused as such (pydantic compares them with the bounds and
# said 'should be less than 1' of 'alpha=nan')
Alpha = Query(default=AUDIT_ALPHA, gt=0.0, lt=1.0, allow_inf_nan=False)
MaxNoise = Query(default=AUDIT_MAX_NOISE, gt=0.0, lt=1.0, allow_inf_nan=False)
Permutations = Query(default=DRIFT_PERMUTATIONS, ge=19, le=9999)
Seed = Query(default=0, ge=0, le=2**31 - 1)


@router.get("/v1/audit", response_model=r.AuditReport, responses=ERRORS, tags=["audit"])
def audit(reader: Reader,
          model: str | None = Query(default=None, min_length=1, max_length=LIMITS.max_name_chars),
          metric: str = Query(default="cosine", pattern="^(cosine|euclidean)$"),
          k: int = Query(default=10, ge=1, le=1000),
          alpha: float = Alpha,
          max_noise: float = MaxNoise,
          by: str | None = Query(default=None, pattern=BY_PATTERN,
                                 description="the index proposing candidates (default: both)")):
    """Likely duplicates: the whole pool, or one model against its nearest neighbours (the CI
    call), judged against the pool's cached calibration."""
    return reader.audit(model=model, metric=metric, k=k, alpha=alpha, max_noise=max_noise, by=by)


@router.post("/v1/profile", response_model=r.ProfileResult, responses=ERRORS, tags=["analytics"])
def profile(body: s.ProfileRequest, reader: Reader):
    """Real models nearest to a hypothetical one with these task accuracies."""
    return reader.profile(dict(body.targets), k=body.k, evals=body.evals, seed=body.seed, where=body.where, by=body.by)


@router.get("/v1/portfolio", response_model=r.PortfolioResult, responses=ERRORS, tags=["analytics"])
def portfolio(reader: Reader,
              k: int | None = Query(default=None, ge=1, le=LIMITS.max_k),
              budget_b: float | None = Query(default=None, gt=0, le=1e7, allow_inf_nan=False),
              method: str | None = Query(default=None, pattern="^(kcenter|kmedoids|greedy-budget|answers)$"),
              where: str | None = Query(default=None, max_length=LIMITS.max_where_chars),
              include_unknown_params: bool = False,
              seed: int = Query(default=0, ge=0, le=2**31 - 1),
              random_draws: int = Query(default=200, ge=1, le=LIMITS.max_random_draws,
                                        description="random subsets the portfolio is compared with"),
              by: str | None = Query(default=None, pattern=BY_PATTERN)):
    """A small set of models that covers the pool, with routing accuracies."""
    return reader.portfolio(k=k, budget_b=budget_b, method=method, where=where,
                            include_unknown_params=include_unknown_params, seed=seed, random_draws=random_draws,
                            by=by)


# drift (issue 26): a read per model; the CI run writes its marker, so it needs the token
@router.get("/v1/models/{name}/drift", response_model=r.DriftReport, responses=ERRORS, tags=["audit"])
def drift(name: Name, reader: Reader, alpha: float = Alpha, max_noise: float = MaxNoise,
          permutations: int = Permutations, seed: int = Seed):
    """Whether the model's newest version behaves like its earlier ones (registry drift NAME)."""
    return reader.drift(name, alpha=alpha, max_noise=max_noise, permutations=permutations, seed=seed)


@router.post("/v1/drift/run", dependencies=WRITE, response_model=r.DriftRun, responses=ERRORS, tags=["audit"])
def drift_run(reader: Reader, state: State, alpha: float = Alpha, max_noise: float = MaxNoise,
              permutations: int = Permutations, seed: int = Seed):
    """Drift of every model given a version since the last run (registry audit --drift); keeps the new marker."""
    run = reader.drift_refined(alpha=alpha, max_noise=max_noise, permutations=permutations, seed=seed)
    state.note_written()
    return run
