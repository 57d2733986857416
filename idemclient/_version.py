"""The version of idemclient: written here only (the build reads it from this file)."""

__version__ = "0.1.0.dev0"
