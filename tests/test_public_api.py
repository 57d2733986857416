"""The public surface is exactly `__all__`: nothing missing, nothing private leaking.

The order of `__all__` is kept by ruff (RUF022).
"""

import types

import idemclient


def test_all_names_exist_once() -> None:
    assert len(idemclient.__all__) == len(set(idemclient.__all__))
    for name in idemclient.__all__:
        assert hasattr(idemclient, name), name


def test_nothing_public_is_left_out_of_all() -> None:
    public = {
        name
        for name, value in vars(idemclient).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(idemclient.__all__) - {"__version__"}


def test_every_error_derives_from_the_one_root() -> None:
    errors = [
        value
        for value in (getattr(idemclient, name) for name in idemclient.__all__)
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert len(errors) == 19
    for error in errors:
        assert issubclass(error, idemclient.IdemError), error


def test_indeterminate_and_not_sent_are_never_failures() -> None:
    assert not issubclass(idemclient.Indeterminate, idemclient.Rejected)
    assert not issubclass(idemclient.NotSent, idemclient.Rejected)
    assert issubclass(idemclient.ReconcileRequired, idemclient.Indeterminate)
