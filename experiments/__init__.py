"""Running experiments: the command-line settings and session, and suites of evaluations."""
