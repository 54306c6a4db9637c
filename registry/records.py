"""The registry's data model: queries, evaluations and model records.

Scores are binary correctness in the LOCUS paper. We also accept real scores in [0, 1] (partial
credit, e.g. a token-F1 or a pass-rate): they are used as soft targets in the predictor's
cross-entropy and count as the expected correctness in accuracy metrics (a routed model with score 0.7
on a query contributes 0.7).
"""
from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from registry.limits import (DEFAULT_TASK, LONE_SURROGATE, MAX_ENDPOINT_CHARS, MAX_METADATA_TEXT_CHARS, MAX_NAME_CHARS,
                             first_unprintable, lone_surrogate)

__all__ = ["Query", "Evaluation", "ModelRecord", "METADATA_FIELDS", "MAX_METADATA_KEYS", "validation_problem"]

# Typed metadata columns of the models table; anything else goes to ModelRecord.extra.
METADATA_FIELDS = ("family", "params_b", "provider", "endpoint", "licence", "access", "tags")
# Columns a model has besides its metadata (the table's, the filters'): no metadata key takes these names.
RESERVED_KEYS = ("name", "version", "n_evals", "accuracy")
# Metadata keys of one model: a record is a row of every table, filter and legend that shows it, and real
# records hold a dozen; a typed field left empty (None, "", no tags) is no key
MAX_METADATA_KEYS = 64


class Query(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    task: str = DEFAULT_TASK

    @field_validator("task", mode="before")
    @classmethod
    def _visible_task(cls, value: Any) -> str:
        """A query whose file names no task gets a visible one ("default"), not a blank name."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return DEFAULT_TASK
        return value.strip() if isinstance(value, str) else value


_PARAMS = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[mMbBtT]?)\s*$")
_PARAMS_SCALE = {"": 1.0, "b": 1.0, "t": 1000.0, "m": 0.001}


MAX_PARAMS_B = 100_000.0  # billions of parameters in one model's record
MAX_EXTRA_NUMBER = 1e15  # a free-form metadata number (a price, a context length, a date as a number)
# Free-form keys registry.analytics.cost reads: USD per 1M input/output tokens, USD per call, milliseconds.
PRICE_KEYS = ("price_in", "price_out", "price_call", "latency_ms")


def parse_params_b(value: Any) -> float:
    """A parameter count in billions, as a user writes it: 8, 8.0, '8', '8B', '8b', '1.5T', '350M'.
    The one parser behind `--meta params_b=...`, the `params_b` column of an import and `--budget`.
    Raises ValueError saying what is wrong."""
    if isinstance(value, bool):
        raise ValueError(f"params_b {value!r} is not a number of parameters")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"params_b {value}: too large to be a number of parameters") from None
    else:
        match = _PARAMS.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a number of parameters: write billions as 8B, 8b or 8, "
                             "millions as 350M, trillions as 1.5T")
        number = float(match.group("number")) * _PARAMS_SCALE[match.group("unit").lower()]
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r}: a number of parameters must be a finite number >= 0")
    return number


def check_score(value: Any) -> float:
    """A score as a float in [0, 1]; raises ValueError saying what is wrong."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            # Python reads 0_1 as 1 and 1_0 as 10, and '１' (a full-width digit) as 1: no CSV writer means that
            if "_" in text or not text.isascii():
                raise ValueError
            value = float(text)
        except ValueError:
            raise ValueError(f"score {text!r} is not a number") from None
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"score {value!r} is not a number") from None
    except OverflowError:  # an integer past float's range: no score, and too long to quote whole
        shown = repr(value)
        raise ValueError(f"score {shown[:20]}... ({len(shown)} digits) is outside [0, 1]") from None
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


def _storable(value: Any) -> bool:
    """Not text, or text that can be written as UTF-8 (`registry.limits.lone_surrogate`)."""
    return not isinstance(value, str) or lone_surrogate(value) is None


class ModelRecord(BaseModel):
    """One model (or endpoint) and what we know about it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    family: str | None = None
    # At most 100,000 billion (100 trillion) parameters: anything larger is a unit mistake (1e308 was accepted).
    params_b: float | None = Field(default=None, ge=0, le=MAX_PARAMS_B, allow_inf_nan=False,
                                   description="parameter count, billions")
    provider: str | None = None
    endpoint: str | None = None
    licence: str | None = None
    access: str | None = Field(default=None, description="'open' (weights available) or 'api'")
    tags: list[str] = Field(default_factory=list)
    extra: dict[str, str | float | int | bool | None] = Field(default_factory=dict)

    @field_validator("extra", mode="before")
    @classmethod
    def _values_are_scalar(cls, value: Any) -> Any:
        """One scalar per key (only `tags` is a list), said with the key: pydantic's own message named
        neither."""
        if not isinstance(value, dict):
            return value
        for key, item in value.items():
            if not (item is None or isinstance(item, (str, int, float, bool))):
                raise ValueError(f"{key[:40]}: a metadata value is text, a number, true/false or empty, not a "
                                 f"{type(item).__name__} (only tags takes a list)")
        return value

    @field_validator("extra")
    @classmethod
    def _numbers_are_plain(cls, value: dict) -> dict:
        for key, item in value.items():
            # an int too: 10**400 was stored, then every filter or sort on its key failed converting it to float
            number = isinstance(item, (int, float)) and not isinstance(item, bool)
            if number and not (abs(item) <= MAX_EXTRA_NUMBER and math.isfinite(item)):  # abs first: a huge int
                shown = item if isinstance(item, float) or abs(item) < 10**30 else f"an integer of {len(str(abs(item)))} digits"
                raise ValueError(f"{key}={shown}: a metadata number must be finite and within +-{MAX_EXTRA_NUMBER:g}")
            if not all(_storable(text) for text in (key, item)):
                raise ValueError(f"{key[:40]!r} holds {LONE_SURROGATE}")
        return value

    @field_validator("family", "provider", "endpoint", "licence", "access", "tags")
    @classmethod
    def _text_is_storable(cls, value):
        if not all(_storable(text) for text in (value if isinstance(value, list) else [value])):
            raise ValueError(f"holds {LONE_SURROGATE}")
        return value

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
        # counted here, where metadata comes in (the CLI, imports, uploads and inline adds over HTTP all build
        # their record here); a typed field that is empty is not counted, so a record's own metadata() (every
        # typed field, set or not) merged with more counts what the record holds
        keys = [k for k, v in fields.items() if k not in METADATA_FIELDS or not _unset(v)]
        if len(keys) > MAX_METADATA_KEYS:
            raise ValueError(f"metadata of {len(keys)} keys; the limit is {MAX_METADATA_KEYS} (a typed field left "
                             "empty is not counted)")
        typed: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, raw in fields.items():
            # a key that shadows a column tables, sorts and filters read by that name (`where name == x`
            # would never see it) is refused here, where metadata comes in; homes that stored one keep it
            if not isinstance(key, str):
                raise ValueError(f"a metadata key must be text, not {type(key).__name__} ({key!r})")
            if not key.strip():
                raise ValueError("a metadata key is empty")
            if is_reserved_key(key):
                raise ValueError(f"{key[:40]!r} is a column of its own, not a metadata key (reserved: "
                                 f"{', '.join(RESERVED_KEYS)} and task:NAME); name it otherwise")
            # checked here, where metadata comes in (CLI, HTTP, files), not on the record: a home that stored
            # such a value before keeps reading it
            _check_printable(key, "metadata key", first_unprintable(key))
            if len(key) > MAX_NAME_CHARS:
                raise ValueError(f"a metadata key of {len(key):,} characters (starting {key[:40]!r}); the limit is "
                                 f"{MAX_NAME_CHARS}")
            value = raw.strip() if isinstance(raw, str) else raw
            for text in (t for t in (value if isinstance(value, list) else [value]) if isinstance(t, str)):
                _check_printable(key, "metadata value", first_unprintable(text, breaks_ok=key not in METADATA_FIELDS))
            if value == "":
                value = None
            if key == "params_b" and value is not None:
                try:
                    value = parse_params_b(value)
                except ValueError:
                    raise MetadataValueError("params_b", f"params_b {raw!r} is not a number of parameters (billions: "
                                             "8B, 8b or 8; also 350M, 1.5T)") from None
            if key == "tags" and isinstance(value, str):
                value = [t.strip() for t in value.split(",") if t.strip()]
            if key == "tags" and value is None:
                value = []
            limit = _metadata_chars_limit(key)
            for text in (t for t in (value if isinstance(value, list) else [value]) if isinstance(t, str)):
                if len(text) > limit:  # each tag on its own, once split
                    raise MetadataValueError(key, f"{key} has a value of {len(text):,} characters (starting "
                                             f"{text[:40]!r}); the limit for {key} is {limit:,}")
            if key in METADATA_FIELDS:
                typed[key] = value
            else:
                extra[key] = _coerce_scalar(value)
            if key in PRICE_KEYS and value is not None:
                _check_price(key, extra[key])
        return cls(name=name, **typed, extra=extra)

    def metadata(self) -> dict[str, Any]:
        """All metadata as one flat mapping (typed fields, then extra)."""
        flat = self.model_dump(exclude={"name", "extra"})
        flat.update(self.extra)
        return flat


def _unset(value: Any) -> bool:
    """Whether a typed field's value leaves it unknown: None, blank text, no tags."""
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value)


def _metadata_chars_limit(key: str) -> int:
    """The longest text a metadata key takes: a label that tables, legends and filters print (family, provider,
    licence, access, a tag) as long as a model name; an endpoint as a URL; free-form notes longer. Checked
    where metadata comes in: a 200,000-character family was stored and stretched the web map 1.5M px wide."""
    if key == "endpoint":
        return MAX_ENDPOINT_CHARS
    return MAX_NAME_CHARS if key in METADATA_FIELDS else MAX_METADATA_TEXT_CHARS


def is_reserved_key(key: str) -> bool:
    """Whether a metadata key would shadow one of a model's own columns (RESERVED_KEYS, task:NAME)."""
    return key in RESERVED_KEYS or key.startswith("task:")


def _check_printable(key: str, what: str, bad: str | None) -> None:
    if bad is not None:
        import unicodedata

        named = unicodedata.name(bad, "")
        raise ValueError(f"{key[:40]!r}: a {what} holds U+{ord(bad):04X}{f' ({named})' if named else ''}, a control, "
                         "line-separator or invisible formatting character")


def _check_price(key: str, value: Any) -> None:
    """A price or latency given as metadata is a number >= 0: refused at the door (an add, an import)
    rather than when a route asks for a cost trade-off."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MetadataValueError(key, f"{key} {value!r} is not a number >= 0 ({'milliseconds' if key == 'latency_ms' else 'USD per call' if key == 'price_call' else 'USD per 1M tokens'})")


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


class MetadataValueError(ValueError):
    """A metadata value refused, with the key (the column of a models.csv) it was given under."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def validation_problem(err: Exception) -> tuple[str | None, str]:
    """(field, message) of a pydantic ValidationError (its first error) or a plain ValueError, in words a
    user reads: never pydantic's own multi-line text with its URL."""
    if isinstance(err, MetadataValueError):
        return err.key, str(err)
    errors = getattr(err, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or None
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        return field, message
    return None, str(err)
