"""The registry's data model: queries, evaluations and model records.

Scores are binary correctness in the LOCUS paper. We also accept real scores in [0, 1] (partial
credit, e.g. a token-F1 or a pass-rate): they are used as soft targets in the predictor's
cross-entropy and count as the expected correctness in accuracy metrics (a routed model with score 0.7
on a query contributes 0.7).
"""
from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Query", "Evaluation", "ModelRecord", "METADATA_FIELDS", "validation_problem"]

# Typed metadata columns of the models table; anything else goes to ModelRecord.extra.
METADATA_FIELDS = ("family", "params_b", "provider", "endpoint", "licence", "access", "tags")


class Query(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    task: str = ""


def check_score(value: Any) -> float:
    """A score as a float in [0, 1]; raises ValueError saying what is wrong."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"score {text!r} is not a number") from None
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"score {value!r} is not a number") from None
    if math.isnan(score):
        raise ValueError("score is NaN")
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score {score!r} is outside [0, 1]")
    return score


class Evaluation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    query: str = Field(min_length=1, description="query id")
    score: float

    @field_validator("score", mode="before")
    @classmethod
    def _score_in_unit_interval(cls, value: Any) -> float:
        return check_score(value)


class ModelRecord(BaseModel):
    """One model (or endpoint) and what we know about it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    family: str | None = None
    params_b: float | None = Field(default=None, ge=0, description="parameter count, billions")
    provider: str | None = None
    endpoint: str | None = None
    licence: str | None = None
    access: str | None = Field(default=None, description="'open' (weights available) or 'api'")
    tags: list[str] = Field(default_factory=list)
    extra: dict[str, str | float | int | bool | None] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_trimmed(cls, value: str) -> str:
        if value != value.strip():
            raise ValueError("model name has leading or trailing spaces")
        return value

    @classmethod
    def from_flat(cls, name: str, fields: dict[str, Any]) -> "ModelRecord":
        """Build from a flat mapping (a CSV row, `--meta k=v` pairs): typed fields are parsed,
        every other key lands in `extra`. Empty strings mean "unknown"."""
        typed: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, raw in fields.items():
            value = raw.strip() if isinstance(raw, str) else raw
            if value == "":
                value = None
            if key == "params_b" and value is not None:
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    raise ValueError(f"params_b {raw!r} is not a number (billions)") from None
            if key == "tags" and isinstance(value, str):
                value = [t.strip() for t in value.split(",") if t.strip()]
            if key == "tags" and value is None:
                value = []
            if key in METADATA_FIELDS:
                typed[key] = value
            else:
                extra[key] = _coerce_scalar(value)
        return cls(name=name, **typed, extra=extra)

    def metadata(self) -> dict[str, Any]:
        """All metadata as one flat mapping (typed fields, then extra)."""
        flat = self.model_dump(exclude={"name", "extra"})
        flat.update(self.extra)
        return flat


def _coerce_scalar(value: Any) -> Any:
    """'35' -> 35, '0.5' -> 0.5, other strings stay strings: CSV metadata keeps its numbers."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def validation_problem(err: Exception) -> tuple[str | None, str]:
    """(field, message) of a pydantic ValidationError (its first error) or a plain ValueError, in words a
    user reads: never pydantic's own multi-line text with its URL."""
    errors = getattr(err, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or None
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        return field, message
    return None, str(err)
