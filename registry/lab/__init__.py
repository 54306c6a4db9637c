"""Measuring and demonstrating: LOCUS against the baselines (`registry evaluate`), the geometry scorecard, synthetic pools and the demo home."""
