"""Benchmarks (outside the test suite): `python -m bench NAME`; see bench/README.md."""
