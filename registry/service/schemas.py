"""Request bodies of the HTTP API, with their limits, and the thin response models.

The limits (`settings.Limits`, defaults) are part of the schema, so `/openapi.json` documents them
and a request over one is refused with 422 naming the field (413 for the body as a whole).
The response models mirror what the `Registry` methods return; they are the service's contract.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, WrapValidator, field_validator, model_validator

from registry.analytics.search import BY, BY_ALIASES
from registry.evidence import MIN_EVALS
from registry.limits import MAX_EVALS_PER_MODEL
from registry.records import MAX_METADATA_KEYS
from registry.results import ErrorDetail, ModelChange, RouteDecision
from registry.service.settings import Limits

LIMITS = Limits()
Name = Field(min_length=1, max_length=LIMITS.max_name_chars, description="model name")
MaxEvals = Field(default=None, ge=1, le=MAX_EVALS_PER_MODEL,
                 description="embed from a seeded sample of this many of the model's evaluations (default: all)")
Where = Field(default=None, max_length=LIMITS.max_where_chars,
              description="metadata filter, e.g. 'access == open and params_b <= 70'")
Scalar = str | float | int | bool | None
# The `by` values every endpoint takes: the library's (registry.analytics.search), its old names included
BY_VALUES = (*BY, *BY_ALIASES)
By = Literal[BY_VALUES]  # a body's field
BY_PATTERN = f"^({'|'.join(BY_VALUES)})$"  # a query parameter's


def _one_metadata_value(value, handler):
    """The value checked as its union is, refused in one message of ours: pydantic names the branch it tried
    first (`metadata.family.str: Input should be a valid string`), which is no field the client wrote."""
    from pydantic import ValidationError

    try:
        return handler(value)
    except ValidationError:
        if isinstance(value, list):
            odd = next((item for item in value if not isinstance(item, str)), None)
            what = f"a list holding {_json_kind(odd)}" if odd is not None else "this list"
        else:
            what = _json_kind(value)
        raise ValueError(f"a metadata value is text, a number, true/false, null or a list of texts (tags), "
                         f"not {what}") from None


def _json_kind(value) -> str:
    return {dict: "an object", list: "a list", bool: "true/false", str: "text", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


MetadataValue = Annotated[Scalar | list[str], WrapValidator(_one_metadata_value)]

__all__ = ["EvaluationIn", "AddModelRequest", "RefineRequest", "RouteRequest", "ProfileRequest",
           "SimilarByVector", "JobView", "RouteResponse", "Health"]


class _Strict(BaseModel):
    # strict: `true` is not 1, "0.5" is not a number, as the schema's types say
    model_config = ConfigDict(extra="forbid", strict=True)
    # subclasses add to it (json_schema_extra): pydantic merges a model's config with its bases'


def _check_name(value: str) -> str:
    """The registry's one name check (registry.limits), as a pydantic validator: the same words as
    the refusal of a name in a URL path."""
    from registry.errors import InputError
    from registry.limits import check_model_name

    try:
        return check_model_name(value)
    except InputError as err:
        raise ValueError(err.problem) from None


class EvaluationIn(_Strict):
    """One evaluation: the query by text (`query`) and/or by stored id (`query_id`), its score."""

    # Either or both of query and query_id (the schema's anyOf says so); absent, not null.
    model_config = ConfigDict(json_schema_extra={
        "anyOf": [{"required": ["query"]}, {"required": ["query_id"]}]})

    query: str = Field(default=None, min_length=1, max_length=LIMITS.max_query_chars, pattern=r"\S",
                       description="the query text (not blank)")
    query_id: str = Field(default=None, min_length=1, max_length=LIMITS.max_name_chars, description="a stored query's id")
    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True,
                         description="in [0, 1]; a number, not a boolean or a string")
    task: str | None = Field(default=None, max_length=LIMITS.max_name_chars)

    @model_validator(mode="after")
    def _has_query(self):
        if (self.query is None or not self.query.strip()) and self.query_id is None:
            raise ValueError("give a query text or a query_id")
        return self


class AddModelRequest(_Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "name": "my-model", "metadata": {"family": "llama", "params_b": 8, "provider": "example"},
        "evaluations": [{"query": "Solve for x: 3x + 7 = 100.", "score": 1, "task": "math"},
                        {"query": "Which planet is known as the red planet?", "score": 0, "task": "science"}]}]})

    name: str = Name
    evaluations: list[EvaluationIn] = Field(min_length=1, max_length=LIMITS.max_evaluations)
    # the key count is the library's check (registry.records, MAX_METADATA_KEYS), run by the route as on
    # every write path (an upload's metadata, the CLI's --meta), not a schema limit of this body alone
    metadata: dict[str, MetadataValue] = Field(default_factory=dict,
                                               description=f"at most {MAX_METADATA_KEYS} keys (docs/cli.md, Limits)")
    replace: bool = False
    max_evals: int | None = MaxEvals
    wait: bool = Field(default=True, description="wait for the embedding job and answer with its result")

    _name = field_validator("name")(_check_name)


class RefineRequest(_Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "evaluations": [{"query": "What is the boiling point of water at sea level in Celsius?", "score": 1,
                         "task": "science"}]}]})

    evaluations: list[EvaluationIn] = Field(min_length=1, max_length=LIMITS.max_evaluations)
    max_evals: int | None = MaxEvals
    wait: bool = True


class RouteRequest(_Strict):
    # Exactly one of query and queries (the schema's oneOf says so); absent, not null.
    model_config = ConfigDict(json_schema_extra={
        "oneOf": [{"required": ["query"]}, {"required": ["queries"]}],
        "examples": [{"query": "Which planet is known as the red planet?", "k": 3}]})

    query: str = Field(default=None, min_length=1, max_length=LIMITS.max_query_chars, pattern=r"\S")
    queries: list[Annotated[str, StringConstraints(min_length=1, max_length=LIMITS.max_query_chars,
                                                   pattern=r"\S")]] = Field(
        default=None, min_length=1, max_length=LIMITS.max_route_queries)
    k: int = Field(default=3, ge=1, le=LIMITS.max_k)
    exclude: list[str] = Field(default_factory=list, max_length=LIMITS.max_k)
    where: str | None = Where
    fallback: int = Field(default=3, ge=0, le=LIMITS.max_k)
    by: By | None = Field(
        default=None, description="the index the fallbacks come from (default: fingerprint when the top model "
                                  "has one, else locus); the ranking is always LOCUS")
    min_evals: int = Field(default=MIN_EVALS, ge=0, le=2**31 - 1,
                           description="models embedded from fewer evaluations come after the others, in the ranking "
                                       "and among the fallbacks (0: none)")
    max_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                   description="only models costing at most this, USD per call (registry.analytics.cost)")
    willingness_to_pay: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                             description="rank by p_correct - willingness_to_pay * cost_usd")
    unpriced: Literal["error", "exclude"] = Field(
        default="error", description="under a trade-off, models with no price and no params_b: an error naming "
                                     "them, or left out")

    @model_validator(mode="after")
    def _one_of(self):
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of query (a text) or queries (a list of texts)")
        for i, text in enumerate(self.texts()):
            if not text.strip():
                raise ValueError(f"query {i + 1} is empty")
            if len(text) > LIMITS.max_query_chars:
                raise ValueError(f"query {i + 1} is longer than {LIMITS.max_query_chars} characters")
        return self

    def texts(self) -> list[str]:
        return [self.query] if self.query is not None else list(self.queries or [])


class SimilarByVector(_Strict):
    vector: list[Annotated[float, Field(ge=-1e6, le=1e6, allow_inf_nan=False, strict=True)]] = Field(
        min_length=1, max_length=65_536,
        description="a LOCUS vector: as many values as the embeddings have (GET /v1/health), not all zero")
    k: int = Field(default=5, ge=1, le=LIMITS.max_k)
    metric: Literal["cosine", "euclidean"] = "cosine"
    where: str | None = Where
    min_evals: int = Field(default=MIN_EVALS, ge=0, le=2**31 - 1,
                           description="models embedded from fewer evaluations are ranked after the others (0: none)")


class ProfileRequest(_Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"targets": {"math": 0.8, "law": 0.4}, "k": 5}]})

    targets: dict[str, float] = Field(min_length=1, max_length=256, description="task -> accuracy in [0, 1]")
    k: int = Field(default=5, ge=1, le=LIMITS.max_k)
    evals: int = Field(default=512, ge=1, le=LIMITS.max_evaluations)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    where: str | None = Where
    by: By | None = None

    @field_validator("targets")
    @classmethod
    def _accuracies(cls, value: dict[str, float]) -> dict[str, float]:
        for task, accuracy in value.items():
            if not 0.0 <= accuracy <= 1.0:
                raise ValueError(f"the accuracy of {task!r} must be in [0, 1]")
        return value


# ------------------------------------------------------------------ responses
# The registry's own result types (registry.results) are the service's response schemas; only what
# exists over HTTP alone (jobs, batched route answers, health) is defined here.
class JobView(BaseModel):
    """An embedding job: `result` once done, `error` (and its HTTP status) once failed."""

    id: str
    kind: Literal["add", "refine"]
    name: str
    state: Literal["queued", "running", "done", "failed"]
    created: float = Field(description="Unix time the job was accepted")
    started: float | None = None
    finished: float | None = None
    result: ModelChange | None = None
    error: ErrorDetail | None = None
    error_status: int | None = Field(None, description="the HTTP status the error answers with")


class RouteResponse(BaseModel):
    results: list[RouteDecision] = Field(description="one decision per query text, in order")
    encoded_texts: int = Field(description="texts encoded by this call (the rest came from the cache)")


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    problem: str | None = None
    home: str
    device: str
    query_backend: str
    models: int
    embedded: int
    dimension: int | None = Field(None, description="values in an embedding (the length POST /v1/similar takes)")
    encoder_id: str | None = None
    query_encoder: str | None = None
    queue_depth: int
    reloads: int
    auth: bool
