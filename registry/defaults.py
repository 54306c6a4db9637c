"""Defaults that every face of an operation shares (the library, the client, the CLI, HTTP): set once
here, so that `registry audit` and GET /v1/audit cannot come to mean different things."""
from __future__ import annotations

from datetime import timedelta

__all__ = ["AUDIT_ALPHA", "AUDIT_MAX_NOISE", "DRIFT_PERMUTATIONS", "CLUSTER_LINKAGES", "CLUSTER_LINKAGE", "KEEP_VERSIONS_FOR", "MAX_KEEP_VERSIONS_FOR",
           "MAX_DRIFT_PERMUTATIONS", "FRAGMENTS_TO_COMPACT"]

AUDIT_ALPHA = 0.01  # the chance of any false flag in a run (audit: Holm over its candidates; drift: over its tests)
AUDIT_MAX_NOISE = 0.12  # the largest share of answers one model re-run or re-served may change
DRIFT_PERMUTATIONS = 399  # drift's fingerprint test: p-values down to 1/400, below alpha / 2
MAX_DRIFT_PERMUTATIONS = 100_000  # each fits two fingerprints: minutes at this many
CLUSTER_LINKAGES = ("average", "complete", "single", "ward")
CLUSTER_LINKAGE = "complete"  # registry.analytics.clusters says why; chosen on both datasets and joint
KEEP_VERSIONS_FOR = timedelta(hours=1)  # compact: a reader that opened a table version within this may still read it
MAX_KEEP_VERSIONS_FOR = timedelta(days=36_500)  # a century: "now minus it" stays a date
FRAGMENTS_TO_COMPACT = 100  # check: a table of this many fragments is worth `registry compact` (one per write)
