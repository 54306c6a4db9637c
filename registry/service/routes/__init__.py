"""The `/v1` API and /metrics, one `APIRouter` per area; endpoints get what they use from
`registry.service.deps`.

- `models`: add, refine (embedding jobs), jobs, remove, restore: the writes;
- `reads`: list, show, history;
- `search`: similar (by name or vector), route;
- `analytics`: audit, profile, portfolio;
- `health`: stats, health, /metrics.

`ROUTERS` is the order `create_app` includes them in, which is the order of `/openapi.json`'s paths.
"""
from registry.service.routes import analytics, health, models, reads, search

__all__ = ["ROUTERS"]

ROUTERS = (models.router, reads.router, search.router, analytics.router, health.router)
