"""`make bench`: what safety costs (see docs/performance.md). Run as `python -m benchmarks.run`."""
