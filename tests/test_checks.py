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


def test_a_fraction_is_strictly_between_0_and_1():
    from registry.checks import check_fraction

    assert check_fraction(0.01, "alpha") == 0.01 and type(check_fraction(np.float32(0.5), "alpha")) is float
    for value, shown in ((0, "0"), (1.0, "1.0"), (2, "2"), (float("nan"), "nan"), (True, "True"), ("0.1", "'0.1'")):
        with pytest.raises(InputError) as caught:
            check_fraction(value, "max_noise")
        assert caught.value.problem == f"max_noise must be a number in (0, 1); got {shown}" and caught.value.field == "max_noise"


@pytest.mark.parametrize("run", ["audit", "drift", "drift_refined"])
def test_audit_and_drift_refuse_a_level_outside_0_1_alike(tmp_path, run):
    from indexing.store import Store
    from registry.analytics.audit import audit
    from registry.analytics.drift import drift, drift_refined

    store = Store(tmp_path / "home")
    call = {"audit": lambda **kw: audit(store, **kw), "drift": lambda **kw: drift(store, "x", **kw),
            "drift_refined": lambda **kw: drift_refined(store, **kw)}[run]
    with pytest.raises(InputError) as caught:
        call(alpha=2)
    assert caught.value.problem == "alpha must be a number in (0, 1); got 2"
    with pytest.raises(InputError) as caught:
        call(max_noise=0.0)
    assert caught.value.problem == "max_noise must be a number in (0, 1); got 0.0"


def test_audit_and_drift_refuse_a_count_as_every_count_is_refused(tmp_path):
    """The audit's k and drift's permutations go through check_count: a bool or a float is no count."""
    from indexing.store import Store
    from registry.analytics.audit import audit
    from registry.analytics.drift import drift

    store = Store(tmp_path / "home")
    for value in (True, 2.0, 0):
        with pytest.raises(InputError) as caught:
            audit(store, k=value)
        assert caught.value.problem == f"k must be an integer of at least 1, not {value!r}" and caught.value.field == "k"
    with pytest.raises(InputError) as caught:
        drift(store, "x", permutations=18)
    assert caught.value.problem == "permutations must be an integer of at least 19, not 18"


def test_every_face_of_audit_and_drift_has_the_defaults_of_registry_defaults():
    """The library, the client, HTTP and the CLI default alpha, max_noise and permutations alike (the
    CLI spells them out so that `registry --help` does not import the registry package)."""
    import inspect

    from cli.main import cli
    from registry import Registry, defaults
    from registry.analytics import audit, drift
    from registry.client import RegistryClient
    from registry.service.routes import analytics as routes

    want = {"alpha": defaults.AUDIT_ALPHA, "max_noise": defaults.AUDIT_MAX_NOISE,
            "permutations": defaults.DRIFT_PERMUTATIONS}
    seen = []
    for face in (Registry.audit, Registry.drift, Registry.drift_refined, RegistryClient.audit, RegistryClient.drift,
                 RegistryClient.drift_refined, audit.audit, drift.drift, drift.drift_refined,
                 routes.audit, routes.drift, routes.drift_run):
        for name, parameter in inspect.signature(face).parameters.items():
            if name in want:
                default = getattr(parameter.default, "default", parameter.default)  # FastAPI's Query(default=...)
                assert default == want[name], (face.__qualname__, name)
                seen.append(name)
    for command in (cli.commands["audit"], cli.commands["drift"]):
        for parameter in command.params:
            if parameter.name in want:
                assert parameter.default == want[parameter.name], (command.name, parameter.name)
                seen.append(parameter.name)
    assert seen.count("alpha") == 14 and seen.count("permutations") == 9  # every face that takes them was read
