"""Where the pytest fixtures were registered from before: an environment installed from
an earlier checkout still names this module in its pytest11 entry point. The fixtures live in
`idemclient._pytest_plugin` now, which loads nothing of `idemclient.testing` until a
fixture is used."""

from idemclient._pytest_plugin import live_reference_server, reference_server

__all__ = ["live_reference_server", "reference_server"]
