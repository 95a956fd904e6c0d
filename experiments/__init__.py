"""Reproductions, sweeps and benchmarks, built only from the public API; run each as ``python -m experiments.NAME``."""
