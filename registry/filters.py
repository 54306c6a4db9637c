"""Filters on model metadata: `--where`, `--pool FILTER`, `--models FILTER`.

A small expression language, parsed and validated here and evaluated in Python: user text never
reaches the database as a query string.

    access == open
    family in (llama3, qwen) and params_b <= 70
    not (provider == "reseller") or name ~ Llama
    tags has synthetic

Fields: `name`, the typed metadata (family, params_b, provider, endpoint, licence, access, tags) and
any free-form metadata key present on at least one model. Operators: == != < <= > >= (numbers compare
as numbers), `in (a, b, ...)`, `~` (substring, case-insensitive), `has` (a tag in tags). Combine with
and / or / not and parentheses. Values are bare words, numbers or quoted strings. A model without the
field never matches a comparison (except !=). `params_b` values are read as the rest of the registry
reads them (registry.records.parse_params_b): 7B, 7b, 7, 350M, 1.5T. < <= > >= compare numbers: one whose
value is not a number (`params_b > abc`) is refused naming the field and the value, rather than
matching nothing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from registry.errors import InputError

__all__ = ["ModelFilter", "parse_filter", "matching"]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>==|!=|<=|>=|<|>|~|\(|\)|,)
      | (?P<word>[^\s"'(),<>=!~]+)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "has"}

Predicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class ModelFilter:
    text: str
    fields: frozenset[str]
    _predicate: Predicate

    def __call__(self, metadata: dict[str, Any]) -> bool:
        return self._predicate(metadata)

    def matches(self, record) -> bool:
        """Whether one ModelRecord matches."""
        return self(_flat(record))

    def select(self, records: Iterable) -> list:
        """The ModelRecords that match."""
        return [r for r in records if self.matches(r)]


def _flat(record) -> dict[str, Any]:
    flat = record.metadata()
    flat["name"] = record.name
    return flat


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            # a lone '=' is SQL's equality: the commonest slip, so the message names the operator to use
            hint = ("; equality is == (comparisons: ==, !=, <, <=, >, >=)"
                    if text[pos:].lstrip().startswith("=") else "")
            raise InputError(f"cannot read the filter at {text[pos:]!r}{hint}", field="filter")
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "string":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif kind == "word" and value.lower() in _KEYWORDS:
            kind, value = "kw", value.lower()
        tokens.append((kind, value))
        pos = match.end()
    return tokens


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # an int beyond float (older homes may hold one): not a number
        return None


_ORDERING = ("<", "<=", ">", ">=")


def _compare(op: str, actual: Any, expected: str) -> bool:
    if actual is None:
        return op == "!="
    a, e = _number(actual), _number(expected)
    if a is not None and e is not None:
        # equal within rounding: 350M is 350 * 0.001 billions, a hair above the 0.35 a file may say
        close = math.isclose(a, e, rel_tol=1e-9, abs_tol=1e-12)
        return {"==": close, "!=": not close, "<": a < e and not close, "<=": a < e or close,
                ">": a > e and not close, ">=": a > e or close}[op]
    if op in _ORDERING:
        return False  # a stored value that is not a number (the filter's own value is one: checked when parsed)
    left, right = str(actual).lower(), expected.lower()
    return left == right if op == "==" else left != right


def _field_value(field: str, value: str) -> str:
    """A filter's value as the field's own parser reads it: `params_b` takes 7B, 350M, 1.5T (as `--meta
    params_b=` and `--budget` do), compared as the number of billions; any other value stays as written."""
    if field != "params_b":
        return value
    from registry.records import parse_params_b

    try:
        return repr(parse_params_b(value))
    except ValueError:
        return value  # not a size: an equality compares it as text (and matches nothing), an ordering is refused


MAX_DEPTH = 32  # nested parentheses and `not`s: each is a Python call when parsing and when matching
MAX_TOKENS = 1_000  # a filter's words, values and operators (a 2,000-character `where` has fewer)


class _Parser:
    def __init__(self, text: str, known_fields: set[str]) -> None:
        self.tokens = _tokens(text)
        if len(self.tokens) > MAX_TOKENS:
            raise InputError(f"the filter has {len(self.tokens):,} terms; the limit is {MAX_TOKENS:,}", field="filter")
        self.depth = 0
        self.pos = 0
        self.known = known_fields
        self.used: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, wanted: str) -> tuple[str, str]:
        """The next token; at the end, an error saying what the filter still needs (`wanted`)."""
        token = self.peek()
        if token is None:
            last = f" after {self.tokens[self.pos - 1][1]!r}" if self.pos else ""
            raise InputError(f"the filter ends too early: expected {wanted}{last}", field="filter")
        self.pos += 1
        return token

    def expect(self, value: str) -> None:
        token = self.take(repr(value))
        if token[1] != value:
            raise InputError(f"expected {value!r} in the filter, found {token[1]!r}", field="filter")

    def parse(self) -> Predicate:
        if not self.tokens:
            raise InputError("the filter is empty", field="filter")
        predicate = self.disjunction()
        if self.peek() is not None:
            raise InputError(f"unexpected {self.peek()[1]!r} in the filter", field="filter")
        return predicate

    def disjunction(self) -> Predicate:
        parts = [self.conjunction()]
        while self.peek() == ("kw", "or"):
            self.take("or")
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else (lambda m: any(p(m) for p in parts))

    def conjunction(self) -> Predicate:
        parts = [self.negation()]
        while self.peek() == ("kw", "and"):
            self.take("and")
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else (lambda m: all(p(m) for p in parts))

    def negation(self) -> Predicate:
        if self.peek() in (("kw", "not"), ("op", "(")):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise InputError(f"the filter nests parentheses or `not` more than {MAX_DEPTH} deep", field="filter")
            try:
                return self._nested()
            finally:
                self.depth -= 1
        return self.comparison()

    def _nested(self) -> Predicate:
        if self.peek() == ("kw", "not"):
            self.take("not")
            inner = self.negation()
            return lambda m: not inner(m)
        if self.peek() == ("op", "("):
            self.take("(")
            inner = self.disjunction()
            self.expect(")")
            return inner
        return self.comparison()

    def value(self) -> str:
        kind, value = self.take("a value")
        if kind not in ("word", "string"):
            raise InputError(f"expected a value in the filter, found {value!r}", field="filter")
        return value

    def comparison(self) -> Predicate:
        kind, field = self.take("a field name")
        if kind not in ("word", "string"):
            raise InputError(f"expected a field name in the filter, found {field!r}", field="filter")
        if field not in self.known:
            raise InputError(f"unknown field {field!r} in the filter; known fields: {', '.join(sorted(self.known))}",
                             field="filter")
        self.used.add(field)
        kind, op = self.take("an operator (==, !=, <, <=, >, >=, ~, in, has)")
        if (kind, op) == ("kw", "in"):
            self.expect("(")
            options = [_field_value(field, self.value())]
            while self.peek() == ("op", ","):
                self.take(",")
                options.append(_field_value(field, self.value()))
            self.expect(")")
            return lambda m: any(_compare("==", m.get(field), o) for o in options)
        if (kind, op) == ("kw", "has"):
            tag = self.value().lower()
            return lambda m: tag in {str(t).lower() for t in (m.get(field) or [])}
        if op == "~":
            needle = self.value().lower()
            return lambda m: m.get(field) is not None and needle in str(m.get(field)).lower()
        if kind != "op" or op not in ("==", "!=", "<", "<=", ">", ">="):
            raise InputError(f"expected an operator after {field!r} in the filter, found {op!r}", field="filter")
        expected = _field_value(field, self.value())
        if op in _ORDERING and _number(expected) is None:
            raise InputError(f"{field} {op} {expected!r}: {expected!r} is not a number, and {op} compares numbers"
                             + (" (params_b takes 8B, 8b or 8, 350M, 1.5T)" if field == "params_b" else ""),
                             field="filter")
        return lambda m: _compare(op, m.get(field), expected)


def parse_filter(text: str, records: Iterable, *, field: str = "where") -> ModelFilter:
    """Parse `text` against the fields the given ModelRecords have; refuses unknown fields. Errors
    name `field`, the argument the filter came in (`where`, `pool`, `models`)."""
    from registry.records import METADATA_FIELDS

    if not isinstance(text, str):
        raise InputError(f"a filter is text (FIELD OP VALUE ...), not {type(text).__name__}", field=field)
    known = {"name", *METADATA_FIELDS}
    for record in records:
        known.update(record.extra)
    try:
        parser = _Parser(text, known)
        predicate = parser.parse()
    except InputError as err:
        raise InputError(err.problem, field=field) from None
    return ModelFilter(text=text, fields=frozenset(parser.used), _predicate=predicate)


def matching(where: str | None, records: Iterable, *, field: str = "where") -> list[str]:
    """The names of the ModelRecords that `where` selects (all of them when None): the one place every
    operation applies its filter."""
    records = list(records)
    if where is None:
        return [r.name for r in records]
    return [r.name for r in parse_filter(where, records, field=field).select(records)]
