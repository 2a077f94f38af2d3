"""The programs: ``build(name, search=..., **config)``, ``names()``, ``spec(name)`` (:mod:`programs.registry`, where
each method's settings are declared) and ``load_compiled(path_or_run_id)`` (:mod:`programs.artifact`)."""
from programs.artifact import (ARTIFACT_FORMAT, check_artifact, check_compiled, load_compiled, portable_state,
                               program_version, read_artifact, save_compiled)
from programs.registry import (REGISTRY, ProgramSpec, accepted_config, build, gold_reads, names, oracle_roles, run_k,
                               spec)

__all__ = ["ARTIFACT_FORMAT", "REGISTRY", "ProgramSpec", "accepted_config", "build", "check_artifact", "check_compiled",
           "gold_reads", "load_compiled", "names", "oracle_roles", "portable_state", "program_version", "read_artifact", "run_k",
           "save_compiled", "spec"]
