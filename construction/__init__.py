"""Dataset construction: pipelines that build benchmark data with an LM (:mod:`construction.xrag`, XRAG's
cross-lingual questions), run by ``scripts/``."""
