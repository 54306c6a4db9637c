"""The service's Prometheus numbers: requests and latency per route template (fed by `Edge`), and
gauges read at scrape time from the job queue and the warm state. One collector registry per app,
so two apps in one process (tests) never share counts."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["ServiceMetrics"]


class ServiceMetrics:
    def __init__(self, state, queue) -> None:
        self.registry = metrics = CollectorRegistry()
        self._requests = Counter("locus_http_requests", "HTTP requests", ["method", "route", "status"],
                                 registry=metrics)
        self._latency = Histogram("locus_http_request_seconds", "HTTP request latency", ["route"], registry=metrics,
                                  buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30))
        Gauge("locus_job_queue_depth", "jobs waiting for the writer", registry=metrics).set_function(queue.depth)
        Gauge("locus_jobs_landed", "jobs landed since start", registry=metrics).set_function(lambda: queue.landed)
        Gauge("locus_jobs_failed", "jobs failed since start", registry=metrics).set_function(lambda: queue.failed)
        Gauge("locus_writer_batches", "writer batches since start", registry=metrics).set_function(
            lambda: queue.batches)
        Gauge("locus_store_compactions", "compactions of the store by the writer since start", registry=metrics
              ).set_function(lambda: queue.compactions)
        Gauge("locus_state_reloads", "warm-state reloads", registry=metrics).set_function(lambda: state.reloads)
        # how far the loaded state is behind the home: reads with X-Locus-Read: loaded (or N) may answer from it
        Gauge("locus_home_generation", "the home's last finished transaction (generation)", registry=metrics
              ).set_function(state.generation)
        Gauge("locus_state_generation", "the generation of the state loaded (-1: none yet)", registry=metrics
              ).set_function(lambda: getattr(state.loaded(), "generation", -1))
        Gauge("locus_text_cache_size", "encoded texts in memory", registry=metrics).set_function(
            lambda: state.cached_texts)
        Gauge("locus_text_cache_hits", "query texts answered from memory", registry=metrics).set_function(
            lambda: state.text_hits)
        Gauge("locus_texts_encoded", "query texts encoded since start", registry=metrics).set_function(
            lambda: state.texts_encoded)
        Gauge("locus_text_batches", "batches the text-encoding thread ran (requests waiting together share one)",
              registry=metrics).set_function(lambda: state.encoder.batches)

    def observe(self, method: str, template: str, status: int, seconds: float) -> None:
        self._requests.labels(method, template, str(status)).inc()
        self._latency.labels(template).observe(seconds)

    def exposition(self) -> str:
        return generate_latest(self.registry).decode("utf-8")
