"""Argument checks shared by the faces (registry.api) and the analytics: one wording for one mistake."""
from __future__ import annotations

from numbers import Integral
from typing import Any

from registry.errors import InputError

__all__ = ["check_count"]


def check_count(value: Any, field: str, minimum: int, *, optional: bool = False) -> int | None:
    """`value` as an int when it is an integer (numpy's too) of at least `minimum`; None when it is None
    and `optional`; else an InputError naming `field`. A bool is refused: True is no count."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(f"{field} must be an integer of at least {minimum}, not {value!r}", field=field)
    return int(value)
