"""Queries over the index: search, routing, audit, profile, portfolio, families, compare, maps."""
