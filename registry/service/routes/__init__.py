"""The `/v1` API and /metrics, one `APIRouter` per area; endpoints get what they use from
`registry.service.deps`.

- `models`: add, refine (embedding jobs), jobs, remove, restore: the writes;
- `reads`: list, show, history;
- `search`: similar (by name or vector), route;
- `analytics`: audit, profile, portfolio;
- `health`: stats, health, /metrics;
- `onboarding`: suggest-queries (the queries to evaluate a new model on first).

`ROUTERS` is the order `create_app` includes them in, which is the order of `/openapi.json`'s paths.
"""
from registry.service.routes import analytics, health, models, reads, search
from registry.service.routes import onboarding

__all__ = ["ROUTERS"]

ROUTERS = (models.router, reads.router, search.router, analytics.router, health.router)
ROUTERS += (onboarding.router,)
