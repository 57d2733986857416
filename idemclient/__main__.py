"""`python -m idemclient`: the idemclient command."""

from .cli import main

main()
