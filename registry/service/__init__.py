"""`registry serve`: the registry over HTTP, with warm state and an embedding-job writer.

- `settings`: the service's limits and options (one dataclass passed down);
- `state`: what stays loaded (LOCUS encoder + predictor, query encoder, vector index, encoded texts),
  reloaded when the store's generation token or the active encoder changes;
- `writer`: lands a batch of add/refine jobs in one store transaction with one forward pass;
- `jobs`: the queue the single writer thread drains (persisted, so an accepted job survives a crash);
- `app`: the FastAPI application (`/v1/...`, `/openapi.json`, `/docs`, `/metrics`): `create_app`.
- `routes`: the `/v1` endpoints and /metrics, one `APIRouter` per area (models, reads, search,
  analytics, health);
- `deps`: what an endpoint asks for (settings, warm state, job queue, reader, the write check);
- `errors`: every error as one JSON shape; `edge`: the middleware (body limit, Host, OPTIONS);
  `metrics`: the Prometheus numbers.
- `web`: the web UI at `/` (pages, their script and styles from `webui/`) and the `/v1` reads its
  pages need (model table, map points, compare, aliases).
"""
