"""The metadata filter language: what it matches, and what it refuses."""
from __future__ import annotations

import pytest

from registry.errors import InputError
from registry.filters import parse_filter
from registry.records import ModelRecord

RECORDS = [
    ModelRecord(name="Llama-3-8B", family="llama3", params_b=8, access="open", tags=["base"], extra={"instruct": 0}),
    ModelRecord(name="Llama-3-70B-Instruct", family="llama3", params_b=70, access="open", extra={"instruct": 1}),
    ModelRecord(name="Qwen2-72B", family="qwen", params_b=72, access="open", extra={"instruct": 0}),
    ModelRecord(name="Gemini-1.5-Pro", family="gemini", access="api", provider="google", extra={"instruct": 1}),
]


def names(text: str) -> list[str]:
    return [r.name for r in parse_filter(text, RECORDS).select(RECORDS)]


@pytest.mark.parametrize("text, expected", [
    ("access == open", ["Llama-3-8B", "Llama-3-70B-Instruct", "Qwen2-72B"]),
    ("access == api", ["Gemini-1.5-Pro"]),
    ("params_b >= 70", ["Llama-3-70B-Instruct", "Qwen2-72B"]),
    ("params_b < 10 or family == gemini", ["Llama-3-8B", "Gemini-1.5-Pro"]),
    ("family in (llama3, qwen) and instruct == 1", ["Llama-3-70B-Instruct"]),
    ("not (family == llama3)", ["Qwen2-72B", "Gemini-1.5-Pro"]),
    ("name ~ instruct", ["Llama-3-70B-Instruct"]),
    ("tags has base", ["Llama-3-8B"]),
    ('provider == "google"', ["Gemini-1.5-Pro"]),
    ("provider != google", ["Llama-3-8B", "Llama-3-70B-Instruct", "Qwen2-72B"]),
    ("params_b > 1000", []),
])
def test_filters_select(text, expected):
    assert names(text) == expected


@pytest.mark.parametrize("text, problem", [
    ("colour == red", "unknown field 'colour'"),
    # a filter cut short says what it still needs, after which word
    ("access ==", "ends too early: expected a value after '=='"),
    ("access", r"ends too early: expected an operator \(==, .*\) after 'access'"),
    ("access open", "expected an operator"),
    ("(access == open", "ends too early: expected '\\)' after 'open'"),
    ("access == open and", "ends too early: expected a field name after 'and'"),
    ("access in (open,", "ends too early: expected a value after ','"),
    ("", "empty"),
    ("access == open; drop table models", "unexpected .drop."),
    ("access == 'open", "cannot read"),
    ("access = open", "cannot read the filter at ' = open'; equality is =="),  # SQL's '=' names the operator
])
def test_bad_filters_are_refused(text, problem):
    with pytest.raises(InputError, match=problem):
        parse_filter(text, RECORDS)


@pytest.mark.parametrize("text, expected", [
    ("params_b > 7B", ["Llama-3-8B", "Llama-3-70B-Instruct", "Qwen2-72B"]),
    ("params_b >= 70b", ["Llama-3-70B-Instruct", "Qwen2-72B"]),
    ("params_b < 0.071T", ["Llama-3-8B", "Llama-3-70B-Instruct"]),
    ("params_b > 350M and params_b <= 8B", ["Llama-3-8B"]),
    ("params_b == 8B", ["Llama-3-8B"]),
    ("params_b in (8B, 72000M)", ["Llama-3-8B", "Qwen2-72B"]),
])
def test_params_b_filters_read_sizes_as_the_cli_writes_them(text, expected):
    assert names(text) == expected


def test_params_b_of_350m_equals_0_35():
    records = [ModelRecord.from_flat("small", {"params_b": "0.35"}), ModelRecord.from_flat("tiny", {"params_b": "350M"})]
    assert [r.name for r in parse_filter("params_b == 350M", records).select(records)] == ["small", "tiny"]
    assert [r.name for r in parse_filter("params_b >= 0.35", records).select(records)] == ["small", "tiny"]


@pytest.mark.parametrize("text, value", [
    ("params_b > abc", "abc"), ("params_b <= 7Bn", "7Bn"), ("instruct >= yes", "yes"), ("name < m", "m"),
])
def test_an_ordering_on_a_value_that_is_not_a_number_is_refused_naming_the_field(text, value):
    with pytest.raises(InputError) as caught:
        parse_filter(text, RECORDS)
    assert caught.value.field == "where"
    field = text.split()[0]
    assert caught.value.problem.startswith(f"{field} ") and f"{value!r} is not a number" in caught.value.problem


def test_equality_on_text_still_works_after_the_params_b_change():
    assert names("family == llama3 and params_b != 8B") == ["Llama-3-70B-Instruct"]
    assert names("params_b == abc") == []  # an equality with a non-size: matches nothing, as before
    with pytest.raises(InputError) as caught:
        parse_filter("params_b > 7X", RECORDS, field="pool")  # the argument the filter came in is named
    assert caught.value.field == "pool" and "'7X' is not a number" in caught.value.problem
