"""llama.cpp's instruction sets chosen by what the machine runs (``scripts.llama_flags``), not by what the CPU lists:
``GGML_NATIVE=ON`` crashed with "Illegal instruction" on a VM that lists AMX and AVX512-BF16."""
from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from scripts.llama_flags import PROBES, answer, flags, probe, program

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


@x86
def test_the_answer_is_kept_under_what_it_depends_on_and_probed_again_when_that_changes(tmp_path, monkeypatch):
    """``make`` asks on every run and the probe compiles for seconds: a kept answer is reused while the CPU's listed
    sets (and the script, kernel, compiler) are the same, and probed again when they change; no list, no keeping."""
    import scripts.llama_flags as llama_flags

    probed = []
    monkeypatch.setattr(llama_flags, "probe", lambda cc: probed.append(cc) or ["avx2"])
    monkeypatch.setattr(llama_flags, "listed", lambda: "flags : fpu avx2")
    assert answer("cc", "x86_64", tmp_path) == answer("cc", "x86_64", tmp_path) == flags(["avx2"], "x86_64")
    assert len(probed) == 1 and len(list(tmp_path.iterdir())) == 1
    monkeypatch.setattr(llama_flags, "listed", lambda: "flags : fpu avx2 avx512f")
    answer("cc", "x86_64", tmp_path)
    assert len(probed) == 2 and len(list(tmp_path.iterdir())) == 2
    monkeypatch.setattr(llama_flags, "listed", lambda: None)
    answer("cc", "x86_64", tmp_path)
    answer("cc", "x86_64", tmp_path)
    assert len(probed) == 4 and len(list(tmp_path.iterdir())) == 2
