"""The benchmarks: run each from the repository root, ``python -m bench.NAME``."""
