"""The reference server (`idemclient.testing`) on SQLite, in-process and over a socket."""
