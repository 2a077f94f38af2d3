"""Method comparisons, diagnostics and benchmarks, each run as a module from the repository root:
``python -m scripts.NAME --help``."""
