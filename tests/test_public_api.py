"""The public surface is exactly what `__all__` says, sorted, and nothing private leaks."""

import idemclient


def test_all_is_sorted_and_complete() -> None:
    assert idemclient.__all__ == sorted(idemclient.__all__)
    for name in idemclient.__all__:
        assert hasattr(idemclient, name), name


def test_every_error_derives_from_the_one_root() -> None:
    errors = [
        getattr(idemclient, name)
        for name in idemclient.__all__
        if isinstance(getattr(idemclient, name), type)
        and issubclass(getattr(idemclient, name), BaseException)
    ]
    assert errors
    for error in errors:
        assert issubclass(error, idemclient.IdemError), error


def test_indeterminate_is_never_a_failure() -> None:
    assert not issubclass(idemclient.Indeterminate, idemclient.Rejected)
    assert not issubclass(idemclient.NotSent, idemclient.Rejected)
