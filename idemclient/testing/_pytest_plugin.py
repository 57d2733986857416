"""pytest fixtures for the reference server (registered through the pytest11 entry point)."""
