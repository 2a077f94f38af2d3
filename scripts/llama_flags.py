"""``python -m scripts.llama_flags``: the instruction sets this machine runs, as llama.cpp's CMake flags.

Prints one line, ``TAG ARGS...``: TAG names the sets (``x86_64-avx2-bmi2-avx512-vbmi-vnni-bf16``: the build's cache
key), ARGS are the ``-DGGML_...`` flags of a build that uses them and nothing else (``GGML_NATIVE=OFF``, every other
probed set off). Each set is probed by compiling a few of its instructions with the C compiler (``$CC``, else ``cc``)
and running them: a set the CPU lists but the machine does not run (a virtual machine that hides it) dies of SIGILL and
stays off, as does one the compiler cannot emit. ``GGML_NATIVE=ON`` trusts what the CPU lists, and so crashed on such a
machine. Not x86-64: the machine's name and no instruction flags (llama.cpp's defaults for it). Standard library only:
``make setup`` runs it before the venv exists."""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Probed sets in order: name, compiler flags, a statement using the set's instructions, the CMake flags it enables.
#: A set counts only when every set before it it builds on (AVX2 for all; AVX-512 for its extensions) ran too.
PROBES = (
    ("avx2", "-mavx -mavx2 -mfma -mf16c",
     "__m256 a = _mm256_set1_ps(x); a = _mm256_fmadd_ps(a, a, a); __m128i h = _mm256_cvtps_ph(a, 0);"
     "__m256i i = _mm256_add_epi32(_mm256_castps_si256(a), _mm256_castps_si256(a));"
     "r = _mm_extract_epi16(h, 0) + _mm256_extract_epi32(i, 0);",
     "-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"),
    ("bmi2", "-mbmi2", "r = _pdep_u32((unsigned) x, 0xF0F0u);", "-DGGML_BMI2=ON"),
    ("avx512", "-mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw",
     "__m512i a = _mm512_set1_epi16((short) x); a = _mm512_add_epi16(a, a);"
     "__m256i b = _mm256_ternarylogic_epi32(_mm256_set1_epi32(x), _mm256_set1_epi32(x), _mm256_set1_epi32(x), 0x96);"
     "r = _mm512_reduce_add_epi32(_mm512_conflict_epi32(a)) + _mm256_extract_epi32(b, 0);",
     "-DGGML_AVX512=ON"),
    ("vbmi", "-mavx512f -mavx512bw -mavx512vbmi",
     "__m512i a = _mm512_set1_epi8((char) x); r = _mm512_reduce_add_epi32(_mm512_permutexvar_epi8(a, a));",
     "-DGGML_AVX512_VBMI=ON"),
    ("vnni", "-mavx512f -mavx512bw -mavx512vl -mavx512vnni",
     "__m512i a = _mm512_set1_epi8((char) x); r = _mm512_reduce_add_epi32(_mm512_dpbusd_epi32(a, a, a));"
     "r += _mm256_extract_epi32(_mm256_dpbusd_epi32(_mm256_set1_epi8((char) x), _mm256_set1_epi8(1),"
     " _mm256_set1_epi8(2)), 0);",
     "-DGGML_AVX512_VNNI=ON"),
    ("bf16", "-mavx512f -mavx512bw -mavx512vl -mavx512bf16",
     "__m512 a = _mm512_set1_ps(x); __m512bh b = _mm512_cvtne2ps_pbh(a, a);"
     "r = (int) _mm512_reduce_add_ps(_mm512_dpbf16_ps(a, b, b));",
     "-DGGML_AVX512_BF16=ON"),
    ("avxvnni", "-mavx2 -mavxvnni",
     "__m256i a = _mm256_set1_epi8((char) x); r = _mm256_extract_epi32(_mm256_dpbusd_avx_epi32(a, a, a), 0);",
     "-DGGML_AVX_VNNI=ON"),
)
NEEDS = {"bmi2": "avx2", "avx512": "avx2", "vbmi": "avx512", "vnni": "avx512", "bf16": "avx512", "avxvnni": "avx2"}
BASE = "-DGGML_NATIVE=OFF"


def program(statement: str) -> str:
    """A C program running ``statement`` on a value the compiler cannot fold (argc), printing the result."""
    return ("#include <immintrin.h>\n#include <stdio.h>\n"
            f"int main(int argc, char **argv) {{ int x = argc; volatile int r = 0; {statement} "
            'printf("%d\\n", r); return 0; }\n')


def runs(cflags: str, statement: str, cc: str, workdir: Path) -> bool:
    """Whether ``statement`` compiles with ``cflags`` and its program exits 0 (not killed by SIGILL)."""
    source, binary = workdir / "probe.c", workdir / "probe"
    source.write_text(program(statement))
    built = subprocess.run([cc, "-O1", *cflags.split(), str(source), "-o", str(binary)], capture_output=True)
    if built.returncode != 0:
        return False
    try:
        return subprocess.run([str(binary)], capture_output=True, timeout=30).returncode == 0
    finally:
        binary.unlink(missing_ok=True)


def probe(cc: str, probes=PROBES) -> list[str]:
    """The names of the ``probes`` this machine compiles and runs, each only after the set it builds on."""
    ran: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cflags, statement, _ in probes:
            if NEEDS.get(name, name) in ran + [name] and runs(cflags, statement, cc, Path(tmp)):
                ran.append(name)
    return ran


def flags(ran: list[str], machine: str, probes=PROBES) -> str:
    """``TAG ARGS...`` for the sets in ``ran`` on x86-64 ``machine``: each probed set's flags on if it ran, else off
    (llama.cpp turns AVX2, FMA, F16C and BMI2 on by default)."""
    args = [a if name in ran else a.replace("=ON", "=OFF") for name, _, _, a in probes]
    return " ".join([f"{machine}-{'-'.join(ran) or 'generic'}", BASE, *args])


def listed() -> str | None:
    """The instruction sets the CPU lists (``/proc/cpuinfo``'s first ``flags`` line); None where there is none."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line for line in fh if line.startswith("flags")), None)
    except OSError:
        return None


def key(cc: str, machine: str) -> str | None:
    """A hash of what the probe's answer depends on: this script, the CPU's listed sets, the kernel (it decides
    what a listed set may run), the compiler (which sets it emits); None if the list or the compiler is missing."""
    cpu = listed()
    if cpu is None:
        return None
    try:
        compiler = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    except OSError:  # no compiler: the probe fails and says so
        return None
    parts = (Path(__file__).read_text(), cpu, machine, platform.release(), shutil.which(cc) or cc, compiler)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def answer(cc: str, machine: str, cache: Path | None = None) -> str:
    """``TAG ARGS...`` for x86-64 ``machine`` with compiler ``cc``: read from ``cache`` under :func:`key`, else probed
    (and kept there)."""
    name = key(cc, machine) if cache else None
    kept = cache / name if name else None
    if kept and kept.exists():
        return kept.read_text().strip()
    line = flags(probe(cc), machine)
    if kept:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{name}.{os.getpid()}")
        partial.write_text(line + "\n")
        os.replace(partial, kept)
    return line


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, help="folder keeping the answer under a hash of what it depends on")
    args = p.parse_args(argv)
    machine = platform.machine().lower().replace("amd64", "x86_64")
    if machine != "x86_64":
        print(f"{machine} {BASE}")
        return
    print(answer(os.environ.get("CC") or "cc", machine, args.cache))


if __name__ == "__main__":
    sys.exit(main())
