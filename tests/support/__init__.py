"""What the tests and the benchmarks need that the installed package must not ship."""
