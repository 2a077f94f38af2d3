"""Decoding helpers the methods build on: grammar-constrained outputs (:mod:`decoding.constrained`), option-letter
scoring from token log-probabilities (:mod:`decoding.choice`) and scored closed-set decisions
(:mod:`decoding.decisions`)."""
