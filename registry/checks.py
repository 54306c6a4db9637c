"""Argument checks shared by the faces (registry.api) and the analytics: one wording for one mistake."""
from __future__ import annotations

import os
from numbers import Integral, Real
from typing import Any

from registry.errors import InputError

__all__ = ["MAX_SEED", "check_count", "check_flag", "check_fraction", "check_mapping", "check_path", "check_seed", "check_text"]


def check_count(value: Any, field: str, minimum: int, *, optional: bool = False, maximum: int | None = None) -> int | None:
    """`value` as an int when it is an integer (numpy's too) of at least `minimum` (and at most `maximum`);
    None when it is None and `optional`; else an InputError naming `field`. A bool is refused: True is no count."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(f"{field} must be an integer of at least {minimum}, not {value!r}", field=field)
    if maximum is not None and value > maximum:
        shown = value if value < 10**30 else f"an integer of {len(str(value))} digits"
        raise InputError(f"{field} must be at most {maximum:,}, not {shown}", field=field)
    return int(value)


MAX_SEED = 2**32 - 1  # numpy's legacy generators and torch's take no larger seed


def check_seed(value: Any) -> int:
    """A seed: an integer from 0 to MAX_SEED, else an InputError naming `seed` (torch refused a larger one with
    "Overflow when unpacking long long" after the work had started)."""
    return check_count(value, "seed", 0, maximum=MAX_SEED)


def check_flag(value: Any, field: str) -> bool:
    """`value` as a bool when it is one (numpy's too), else an InputError naming `field`: the string "no" is
    true to Python, so `replace="no"` would have replaced."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{field} must be True or False, not {value!r}", field=field)
    return bool(value)


def check_fraction(value: Any, field: str) -> float:
    """`value` as a float when it is a number strictly between 0 and 1 (a test's level, a share of answers),
    else an InputError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 < value < 1.0:
        raise InputError(f"{field} must be a number in (0, 1); got {value!r}", field=field)
    return float(value)


def check_path(value: Any, field: str, *, optional: bool = False):
    """`value` when it is a non-empty path (str or os.PathLike); None when it is None and `optional`; else an
    InputError naming `field`. An empty string would be the current directory, which no caller means."""
    if value is None and optional:
        return None
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{field} must be a path (str or os.PathLike), not {type(value).__name__}", field=field)
    if not os.fspath(value).strip():
        raise InputError(f"{field} is empty: give a path", field=field)
    return value


def check_mapping(value: Any, field: str):
    """`value` when it is None or a mapping (metadata: field -> value), else an InputError naming `field`."""
    from collections.abc import Mapping

    if value is not None and not isinstance(value, Mapping):
        raise InputError(f"{field} must be a mapping of field to value, not {type(value).__name__}", field=field)
    return value


def check_text(value: Any, field: str) -> str:
    """`value` when it is a str, else an InputError naming `field`."""
    if not isinstance(value, str):
        raise InputError(f"{field} must be text (str), not {type(value).__name__}", field=field)
    return value
