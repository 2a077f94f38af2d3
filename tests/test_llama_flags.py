"""llama.cpp's instruction sets chosen by what the machine runs (``scripts.llama_flags``), not by what the CPU lists:
``GGML_NATIVE=ON`` crashed with "Illegal instruction" on a VM that lists AMX and AVX512-BF16."""
from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from scripts.llama_flags import PROBES, flags, probe, program

x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or not shutil.which("cc"),
                         reason="probes x86-64 instructions with the C compiler")


@x86
def test_a_set_whose_program_dies_stays_off_and_so_do_the_sets_built_on_it():
    probes = (("avx2", "", "r = x;", "-DGGML_AVX2=ON"),
              ("avx512", "", "__builtin_trap();", "-DGGML_AVX512=ON"),  # killed (SIGILL), as a hidden set is
              ("vnni", "", "r = x;", "-DGGML_AVX512_VNNI=ON"),  # runs, but needs avx512
              ("bmi2", "-mno-such-flag", "r = x;", "-DGGML_BMI2=ON"))  # the compiler cannot build it
    ran = probe("cc", probes)
    assert ran == ["avx2"]
    assert flags(ran, "x86_64", probes) == ("x86_64-avx2 -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF "
                                            "-DGGML_AVX512_VNNI=OFF -DGGML_BMI2=OFF")


@x86
def test_every_probe_compiles_and_the_baseline_runs(tmp_path):
    """A probe that does not compile (a typo) would leave its set off on every machine; x86-64 CI runs AVX2."""
    for name, cflags, statement, _ in PROBES:
        (tmp_path / "p.c").write_text(program(statement))
        built = subprocess.run(["cc", "-O1", *cflags.split(), str(tmp_path / "p.c"), "-o", str(tmp_path / "p")],
                               capture_output=True, text=True)
        assert built.returncode == 0, f"{name}: {built.stderr[-300:]}"
    assert probe("cc")[0] == "avx2"
