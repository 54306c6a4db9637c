"""registry.checks.check_count: the one integer check behind the API's and the analytics' count arguments."""
from __future__ import annotations

import numpy as np
import pytest

from registry.checks import check_count
from registry.errors import InputError


def test_a_count_comes_back_as_an_int():
    assert check_count(3, "k", 1) == 3
    value = check_count(np.int64(0), "fallback", 0)
    assert value == 0 and type(value) is int
    assert check_count(None, "limit", 0, optional=True) is None


@pytest.mark.parametrize("value, field, minimum, optional, message", [
    (0, "k", 1, False, "k must be an integer of at least 1, not 0"),
    (True, "k", 1, False, "k must be an integer of at least 1, not True"),
    (2.0, "workers", 1, False, "workers must be an integer of at least 1, not 2.0"),
    ("3", "nproc", 1, True, "nproc must be an integer of at least 1, not '3'"),
    (None, "k", 1, False, "k must be an integer of at least 1, not None"),
    (-1, "fallback", 0, False, "fallback must be an integer of at least 0, not -1"),
])
def test_anything_else_is_refused_naming_the_field(value, field, minimum, optional, message):
    with pytest.raises(InputError) as caught:
        check_count(value, field, minimum, optional=optional)
    assert caught.value.problem == message and caught.value.field == field
