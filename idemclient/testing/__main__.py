"""`python -m idemclient.testing`: the same as `idemclient server`."""

from ._adapters.cli import server

if __name__ == "__main__":
    server(prog_name="idemclient server")
