"""Optimizers: compiling programs with DSPy teleprompters, and fitting gates and option priors on dev."""
