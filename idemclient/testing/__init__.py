"""The reference server: the server half of the idempotency protocol, for tests."""

__all__: list[str] = []
