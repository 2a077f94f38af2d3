"""Tables: each headline comparison declared once (:mod:`experiments.tables.declared`), run through the suite
machinery, rendered from its MLflow runs, stamped with the code that made it, checked for staleness, and exported in
the benchmarks' official prediction formats. ``python -m experiments.tables list|run|render|check|export``."""
