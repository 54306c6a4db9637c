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
    ("access ==", "ends too early"),
    ("access open", "expected an operator"),
    ("(access == open", "ends too early"),
    ("access == open and", "ends too early"),
    ("", "empty"),
    ("access == open; drop table models", "unexpected .drop."),
    ("access == 'open", "cannot read"),
])
def test_bad_filters_are_refused(text, problem):
    with pytest.raises(InputError, match=problem):
        parse_filter(text, RECORDS)
